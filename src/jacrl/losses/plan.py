"""Which loss terms apply to each env's samples, with that env's overrides merged in."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from jacrl.losses.config import LossFrameworkConfig
from jacrl.losses.env_config import EnvConfig, deep_merge
from jacrl.losses.term_config import PRIMARY_TYPES, EchoLossConfig, LossTermConfig

DEFAULT_ENV = "default"
"""The label of the implicit env used when `orchestrator.train.env` is empty."""


@dataclass(frozen=True)
class EnvLossPlan:
    """The terms one env enables, in `losses` order, with its `loss_overrides` applied."""

    env: str
    terms: tuple[LossTermConfig, ...]
    training_mode: str = "rl"
    demos: bool = False
    """The env's rollouts are demonstrations (gold completions, not samples): echo trains them, never the primary."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(term.name for term in self.terms)

    @property
    def echo(self) -> EchoLossConfig | None:
        """The env's echo term (at most one), overrides merged."""
        return next((term for term in self.terms if isinstance(term, EchoLossConfig)), None)

    @property
    def primary_enabled(self) -> bool:
        """Whether the completion is trained by the primary. In sft and opd mode the mode's core is the
        primary and is not a list term, so it always applies, except to demonstrations."""
        if self.demos:
            return False
        return self.training_mode in ("sft", "opd") or any(term.type in PRIMARY_TYPES for term in self.terms)

    def enables(self, name: str) -> bool:
        return name in self.names


def plan_env(losses: list[LossTermConfig], env: EnvConfig | None, training_mode: str = "rl") -> EnvLossPlan:
    """Resolve one env's terms. `env=None` is the implicit env: every term, no overrides."""
    if env is None:
        return EnvLossPlan(DEFAULT_ENV, tuple(losses), training_mode)
    enabled = set(env.enabled_losses) if env.enabled_losses is not None else None
    terms = []
    for term in losses:
        if enabled is not None and term.name not in enabled:
            continue
        override = env.loss_overrides.get(term.name)
        if override:
            term = EchoLossConfig.model_validate(deep_merge(term.model_dump(), override))
        terms.append(term)
    return EnvLossPlan(env.label, tuple(terms), training_mode, demos=env.source.kind == "demos")


class EnvLossPlans(Mapping[str, EnvLossPlan]):
    """Every env's plan, looked up by the env label rollouts carry."""

    def __init__(self, losses: list[LossTermConfig], envs: list[EnvConfig], training_mode: str = "rl"):
        self.losses = list(losses)
        self._plans = {env.label: plan_env(losses, env, training_mode) for env in envs}
        self._default = plan_env(losses, None, training_mode) if not envs else None

    @classmethod
    def from_config(cls, config: LossFrameworkConfig) -> EnvLossPlans:
        return cls(config.losses, config.orchestrator.train.env, config.training_mode)

    def __getitem__(self, env: str) -> EnvLossPlan:
        if self._default is not None:
            return self._default
        try:
            return self._plans[env]
        except KeyError:
            raise KeyError(
                f"rollout env {env!r} is not an orchestrator.train.env name (known: {', '.join(self._plans)})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._plans if self._default is None else {DEFAULT_ENV: None})

    def __len__(self) -> int:
        return len(self._plans) if self._default is None else 1
