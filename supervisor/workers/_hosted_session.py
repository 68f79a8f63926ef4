"""What a worker process keeps of one session it hosts, and the calls it tells that session.

Shared by the worker's frame writing (``_frame_writer``), its session actors
(``_remote_session``) and its dispatch of frames (``_worker_server``), so none of
those needs another's module for these few names.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import pykka

from actors import SteeringQueue
from supervisor.workers._protocol import SESSION_DOWN

__all__ = ["SESSION_CALLS", "Call", "HostedSession", "down_reply"]

SESSION_CALLS = frozenset({"send", "snapshot", "history", "rollback"})
"""The ops a session's own actor thread answers (each one a ``Call``)."""


class Call(NamedTuple):
    """A request told to a session actor; it replies on the pipe itself."""

    id: int
    op: str
    payload: dict[str, Any]


class HostedSession:
    """What the worker keeps of one session.

    ``lock`` guards ``pending`` (ids of calls told to the session and not yet
    answered), ``running`` (the call it is handling) and ``batch`` (the events
    that call held back so far; ``None`` between calls). Frames about the
    session are written under ``lock`` too, so its events and replies reach the
    parent in the order they happened. ``end_reason`` is what its plugins'
    ``session_end`` gets when it stops: set before the stop is told to it.
    """

    __slots__ = (
        "batch",
        "end_reason",
        "lock",
        "pending",
        "ref",
        "running",
        "session_id",
        "steering",
    )

    def __init__(self, session_id: str, steering: SteeringQueue) -> None:
        self.session_id = session_id
        self.ref: pykka.ActorRef[Any] = None  # type: ignore[assignment]  # set once started
        self.steering = steering
        self.pending: set[int] = set()
        self.running: int | None = None
        self.lock = threading.Lock()
        self.batch: list[list[Any]] | None = None
        self.end_reason = "normal"


def down_reply(call_id: int, reason: str, *, started: bool) -> dict[str, Any]:
    """The failure frame of a call whose session is not running (any more) in this worker;
    ``started`` says whether the call had begun (the host then counts it as crashed)."""
    error = {"type": SESSION_DOWN, "message": reason, "args": [started]}
    return {"id": call_id, "ok": False, "error": error}
