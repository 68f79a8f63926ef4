"""``HostPolicy``: the settings an ``AgentHost`` runs every session by, validated once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.intensity import RestartIntensity

__all__ = ["HostPolicy"]


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Timeouts, restart intensity and checkpoint and hibernation cadence of one host's
    sessions (``AgentHost``'s constructor documents each). Immutable, so thread-safe.

    Raises:
        ValueError: an invalid setting (the message names it and says what is allowed).
    """

    checkpoint_every: int | None = 1
    hibernate_after_ms: int | None = None
    max_restarts: int = 3
    max_seconds: float = 5.0
    call_timeout: float = 120.0
    restart_wait: float = 10.0
    max_steps: int = 8
    clock: Callable[[], float] = field(default=time.monotonic)

    def __post_init__(self) -> None:
        _positive_or_none("checkpoint_every", self.checkpoint_every)
        _positive_or_none("hibernate_after_ms", self.hibernate_after_ms)
        RestartIntensity(self.max_restarts, self.max_seconds, self.clock)  # the supervisor's rules


def _positive_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
