"""The messages ``SupervisorHandle`` sends a ``Supervisor`` (and the supervisor sends itself).

Private protocol between the two modules; each is answered on the supervisor's thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.child_spec import ChildSpec

__all__ = [
    "CountChildren",
    "RestartDue",
    "ShutdownChildren",
    "ShutdownOf",
    "StartChild",
    "TerminateChild",
    "WhichChildren",
]


@dataclass(frozen=True, slots=True)
class StartChild:
    """Start a dynamic child; answered with its ref."""

    spec: ChildSpec


@dataclass(frozen=True, slots=True)
class TerminateChild:
    """Stop and remove a child; answered with False if it was abandoned."""

    child_id: str


@dataclass(frozen=True, slots=True)
class ShutdownOf:
    """Answered with the child's shutdown timeout in seconds; ``ChildNotFound`` if none."""

    child_id: str


@dataclass(frozen=True, slots=True)
class WhichChildren:
    """Answered with a list of ChildInfo in start order."""


@dataclass(frozen=True, slots=True)
class CountChildren:
    """Answered with ChildCounts."""


@dataclass(frozen=True, slots=True)
class ShutdownChildren:
    """Stop all children in reverse order; answered with the ids of abandoned ones."""


@dataclass(frozen=True, slots=True)
class RestartDue:
    """Told by a backoff timer: restart the children waiting on ``token``."""

    token: int
