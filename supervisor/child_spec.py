"""Child specifications and the read-only views a supervisor reports about its children."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import pykka

from supervisor.intensity import RestartIntensity

__all__ = ["ChildCounts", "ChildInfo", "ChildSpec", "RestartType", "Strategy"]

RestartType: TypeAlias = Literal["permanent", "transient", "temporary"]
"""``permanent``: always restarted; ``transient``: after an abnormal exit; ``temporary``: never."""

Strategy: TypeAlias = Literal["one_for_one", "one_for_all", "rest_for_one"]
"""Which children restart with a dead one: itself; all; itself and those started after it."""

_RESTART_TYPES = ("permanent", "transient", "temporary")


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """How a supervisor starts, restarts and stops one child. Thread-safe (immutable).

    Attributes:
        id: Unique among the supervisor's children.
        start: Returns the ref of a freshly started :class:`~supervisor.SupervisedActor`.
            Runs on the supervisor's thread (on the caller's thread for the static
            children of ``Supervisor.start``); must not call the supervisor itself.
            What it raises becomes :class:`~supervisor.ChildStartError`: on the
            supervisor's thread a ``BaseException`` too (``SystemExit`` from user
            code fails this child's start or restart, never the supervisor); on
            the caller's thread one that is not an ``Exception`` propagates as is.
        restart: ``permanent``, ``transient`` or ``temporary`` (see :data:`RestartType`).
        shutdown: Seconds the supervisor waits for the child to stop before it
            reports and abandons it (Python cannot kill a thread).
        max_restarts: Optional intensity of this child alone: more than this many
            restarts within ``max_seconds`` and the supervisor gives up on *this
            child* (removes it, logs its last exit reason, calls the supervisor's
            ``on_give_up``) and goes on supervising the others. Not in OTP, where
            only the supervisor-wide limit exists; a host of many independent
            sessions needs it so one crash-looping session cannot take down the
            rest. ``None`` (the default) leaves only the supervisor-wide limit.
        max_seconds: Window of ``max_restarts``, seconds.
    """

    id: str
    start: Callable[[], pykka.ActorRef[Any]]
    restart: RestartType = "permanent"
    shutdown: float = 5.0
    max_restarts: int | None = None
    max_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            msg = f"ChildSpec id must be a non-empty str, got {self.id!r}"
            raise ValueError(msg)
        if not callable(self.start):
            msg = f"ChildSpec {self.id!r}: start must be callable, got {self.start!r}"
            raise TypeError(msg)
        if self.restart not in _RESTART_TYPES:
            msg = (
                f"ChildSpec {self.id!r}: restart must be one of {', '.join(_RESTART_TYPES)}; "
                f"got {self.restart!r}"
            )
            raise ValueError(msg)
        shutdown = self.shutdown
        if isinstance(shutdown, bool) or not isinstance(shutdown, int | float):
            msg = f"ChildSpec {self.id!r}: shutdown must be a number of seconds, got {shutdown!r}"
            raise TypeError(msg)
        if not (shutdown > 0 and math.isfinite(shutdown)):
            msg = f"ChildSpec {self.id!r}: shutdown must be > 0 and finite, got {shutdown!r}"
            raise ValueError(msg)
        if self.max_restarts is not None:
            # Validates max_restarts and max_seconds with the supervisor's own rules.
            RestartIntensity(self.max_restarts, self.max_seconds, lambda: 0.0)


@dataclass(frozen=True, slots=True)
class ChildInfo:
    """One row of ``which_children()``. Thread-safe (immutable snapshot).

    Attributes:
        id: The child's id.
        actor_ref: Its current ref, or None while a backoff delay holds its restart.
        restart: Its restart type.
        supervisor: True if the child is itself a supervisor.
        shutdown: Its shutdown timeout in seconds (for a nested supervisor left to
            ``Supervisor.child_spec``'s default: what the children it has now need).
    """

    id: str
    actor_ref: pykka.ActorRef[Any] | None
    restart: RestartType
    supervisor: bool
    shutdown: float


@dataclass(frozen=True, slots=True)
class ChildCounts:
    """Result of ``count_children()``, as OTP's. Thread-safe (immutable snapshot).

    Attributes:
        specs: Children the supervisor knows about.
        active: Children currently running.
        supervisors: Children that are supervisors.
        workers: Children that are not.
    """

    specs: int
    active: int
    supervisors: int
    workers: int


for _cls in (ChildSpec, ChildInfo, ChildCounts):
    _cls.__module__ = "supervisor"
