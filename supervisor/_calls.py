"""The messages ``SupervisorHandle`` sends a ``Supervisor`` (and the supervisor sends itself).

Private protocol between the two modules; each is answered on the supervisor's thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from supervisor._lifecycle import Lifecycle
from supervisor.child_spec import ChildSpec

__all__ = [
    "ChildStopping",
    "CountChildren",
    "RestartDue",
    "ShutdownChildren",
    "StartChild",
    "TerminateChild",
    "WhichChildren",
]

logger = logging.getLogger("supervisor")


@dataclass(frozen=True, slots=True)
class StartChild:
    """Start a dynamic child; answered with its ref."""

    spec: ChildSpec


@dataclass(frozen=True, slots=True)
class TerminateChild:
    """Stop and remove a child; answered, once the stop is requested, with a
    ``ChildStopping`` the caller waits on (the supervisor goes on serving meanwhile)."""

    child_id: str


@dataclass(frozen=True, slots=True)
class ChildStopping:
    """A child being terminated: removed from its supervisor, its stop requested.

    Attributes:
        lifecycle: The child's, or ``None`` if it was not running.
        shutdown: Its ``ChildSpec.shutdown``: how long ``wait`` waits by default.
        supervisor: The supervisor's name, and ``child_id`` the child's id (for the log).
    """

    lifecycle: Lifecycle | None
    shutdown: float
    supervisor: str
    child_id: str

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the child's Down notices are out, at most ``timeout`` seconds (its
        ``shutdown`` if ``None``); False, with a warning logged, if it was abandoned."""
        if self.lifecycle is None:
            return True
        limit = self.shutdown if timeout is None else timeout
        if self.lifecycle.finished.wait(limit):
            return True
        return self._abandoned(limit)

    def wait_from(self, began: float) -> bool:
        """``wait`` for a child whose stop was requested at ``began`` (``time.monotonic``)
        along with its siblings': its ``shutdown`` counts from then, so children stopping
        at once share one deadline instead of adding theirs up."""
        if self.lifecycle is None:
            return True
        if self.lifecycle.finished.wait(max(0.0, began + self.shutdown - time.monotonic())):
            return True
        return self._abandoned(self.shutdown)

    def _abandoned(self, limit: float) -> bool:
        logger.warning(
            "%s: child %r did not stop within %s s; abandoned, still running "
            "(Python cannot kill a thread)",
            self.supervisor,
            self.child_id,
            limit,
        )
        return False


@dataclass(frozen=True, slots=True)
class WhichChildren:
    """Answered with a list of ChildInfo in start order."""


@dataclass(frozen=True, slots=True)
class CountChildren:
    """Answered with ChildCounts."""


@dataclass(frozen=True, slots=True)
class ShutdownChildren:
    """Stop all children in reverse order, one after the other (or, ``concurrently``, all
    at once); answered with the ids of abandoned ones."""

    concurrently: bool = False


@dataclass(frozen=True, slots=True)
class RestartDue:
    """Told by a backoff timer: restart the children waiting on ``token``."""

    token: int
