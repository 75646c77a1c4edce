"""The Jac tasks as a verifiers v1 taskset, under the module name verifiers loads by id: `vf-eval
jac-env`, prime-rl's `env.taskset.id = "jac-env"`. See jacrl.interop.taskset."""

from jacrl.interop.taskset import JacTaskset

__all__ = ["JacTaskset"]
