"""Time-based restart policy: restart intensity (OTP's MaxR/MaxT) and capped backoff.

Both read time only through an injected clock, a callable returning monotonic
seconds, so tests can state exact behaviour without sleeping.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Backoff", "Clock", "RestartIntensity"]

Clock = Callable[[], float]
"""A callable returning monotonic seconds (``time.monotonic`` by default)."""


def _check_seconds(name: str, value: float, *, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of seconds, got {value!r}"
        raise TypeError(msg)
    ok = value >= 0 if allow_zero else value > 0
    if not (ok and math.isfinite(value)):
        rule = ">= 0" if allow_zero else "> 0"
        msg = f"{name} must be finite and {rule}, got {value!r}"
        raise ValueError(msg)


class RestartIntensity:
    """At most ``max_restarts`` restarts within any ``max_seconds`` window.

    As in OTP, a restart at time ``now`` is allowed if, counting it, no more than
    ``max_restarts`` restarts happened at times ``t`` with ``now - t <= max_seconds``.
    Not thread-safe: a supervisor uses it on its own thread only.
    """

    __slots__ = ("_clock", "_times", "max_restarts", "max_seconds")

    def __init__(self, max_restarts: int, max_seconds: float, clock: Clock) -> None:
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int):
            msg = f"max_restarts must be an int, got {max_restarts!r}"
            raise TypeError(msg)
        if max_restarts < 0:
            msg = f"max_restarts must be >= 0, got {max_restarts}"
            raise ValueError(msg)
        _check_seconds("max_seconds", max_seconds, allow_zero=False)
        if not callable(clock):
            msg = f"clock must be a callable returning monotonic seconds, got {clock!r}"
            raise TypeError(msg)
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self._clock = clock
        self._times: deque[float] = deque()

    def allow(self) -> bool:
        """Record a restart now; False if it exceeds the intensity (the supervisor must give up)."""
        now = self._clock()
        times = self._times
        times.append(now)
        while times and now - times[0] > self.max_seconds:
            times.popleft()
        return len(times) <= self.max_restarts

    def now(self) -> float:
        """The injected clock's current reading."""
        return self._clock()


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before a restart, growing per consecutive restart of a child, capped.

    The n-th consecutive restart (n >= 1) waits ``min(max_delay, initial * factor**(n-1))``.
    A child that ran for at least ``reset_after`` seconds before it died starts
    again from n = 1. Thread-safe (immutable).

    Attributes:
        initial: Delay of the first restart in a row, seconds (0 restarts at once).
        factor: Growth per consecutive restart (>= 1).
        max_delay: Cap of the delay, seconds.
        reset_after: Uptime in seconds after which the streak is forgotten.
    """

    initial: float = 0.1
    factor: float = 2.0
    max_delay: float = 30.0
    reset_after: float = 60.0

    def __post_init__(self) -> None:
        _check_seconds("Backoff initial", self.initial, allow_zero=True)
        _check_seconds("Backoff max_delay", self.max_delay, allow_zero=True)
        _check_seconds("Backoff reset_after", self.reset_after, allow_zero=False)
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            msg = f"Backoff factor must be a number, got {self.factor!r}"
            raise TypeError(msg)
        if not (self.factor >= 1 and math.isfinite(self.factor)):
            msg = f"Backoff factor must be finite and >= 1, got {self.factor!r}"
            raise ValueError(msg)
        if self.max_delay < self.initial:
            msg = f"Backoff max_delay ({self.max_delay}) must be >= initial ({self.initial})"
            raise ValueError(msg)

    def delay(self, consecutive: int) -> float:
        """Seconds to wait before the ``consecutive``-th restart in a row (1-based)."""
        if consecutive < 1:
            return 0.0
        # Compare exponents, not products, so huge streaks cannot overflow.
        if self.initial == 0:
            return 0.0
        if self.factor > 1 and (consecutive - 1) * math.log(self.factor) > math.log(
            self.max_delay / self.initial
        ):
            return self.max_delay
        return min(self.max_delay, self.initial * self.factor ** (consecutive - 1))


for _cls in (RestartIntensity, Backoff):
    _cls.__module__ = "supervisor"
