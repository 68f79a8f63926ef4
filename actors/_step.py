"""``StepKey``: which step of which turn of which session is running, for idempotency.

A session sets it on its own thread for each step of a turn (one model call and
the tool calls it asks for), so that tools and plugin hooks can read it with
``current_step()`` and key their side effects on it: a retried turn replays
its steps with the same ``(session_id, turn, step)``, and ``epoch`` grows each
time another host takes the session over (0 outside a cluster), so an outside
system can refuse a write from an older epoch. The checkpoint fence covers the
store only; what a tool does elsewhere is the tool's to make idempotent.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["StepKey", "current_step"]


@dataclass(frozen=True, slots=True)
class StepKey:
    """The idempotency key of one step. Immutable, thread-safe.

    Attributes:
        session_id: The session.
        epoch: Its ownership epoch on the host running it (0 outside a cluster).
        turn: The turn being run (1 for the session's first).
        step: The model call within the turn (1 for the first).
    """

    session_id: str
    epoch: int
    turn: int
    step: int

    def __str__(self) -> str:
        return f"{self.session_id}:{self.epoch}:{self.turn}:{self.step}"


STEP: ContextVar[StepKey | None] = ContextVar("sessionvisor_step", default=None)


def current_step() -> StepKey | None:
    """The step the calling thread runs for its session, or ``None`` outside a turn.

    Read it in a tool or a plugin hook (they run on the session's thread).
    Thread-safe: each thread sees its own.
    """
    return STEP.get()


StepKey.__module__ = "actors"
