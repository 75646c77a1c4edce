"""The Jac tasks as a verifiers environment, under the module name verifiers loads by id:
`vf.load_environment("jacrl-env", split=...)`, `vf-eval jacrl-env`. See jacrl.interop.env."""

from jacrl.interop.env import load_environment

__all__ = ["load_environment"]
