"""``ThreadRuntime``: every session an ``AgentSession`` actor on a thread of this process.

The default runtime of ``AgentHost`` (``workers=None``). A call is a Pykka
``ask``; a checkpoint due after a turn is saved on the session's own thread
before the answer is handed back, so before any later message (a kill
included) is handled.
"""

from __future__ import annotations

import threading
from typing import Any

import pykka

from actors import AgentSession, Send
from supervisor._actor import supervised_class
from supervisor._lifecycle import lifecycle_of
from supervisor._runtime import NotDelivered, Request, SessionLaunch, WorkerInfo
from supervisor.errors import SessionCrashed

__all__ = ["ThreadRuntime"]

_SessionActor = supervised_class(AgentSession)


class ThreadRuntime:
    """Runs sessions as actors on threads of this process. Thread-safe (stateless)."""

    deaths = 0
    gave_up = False

    def start(self, launch: SessionLaunch) -> pykka.ActorRef[Any]:
        """Start the session's actor; its plugins' ``session_start`` runs before this returns."""
        snapshot = launch.snapshot
        return _SessionActor.start(
            launch.template,
            session_id=launch.session_id,
            restored_state=None if snapshot is None else snapshot.state,
            stripped_fields=() if snapshot is None else snapshot.stripped_fields,
            model=launch.model,
            max_steps=launch.max_steps,
            metadata=launch.metadata,
            steering=launch.steering,
            event_buffer=launch.events,
            checkpointer=None if launch.checkpoint_every is None else launch.save,
            checkpoint_every=launch.checkpoint_every or 1,
            epoch=launch.epoch,
        )

    def call(
        self, session_id: str, ref: pykka.ActorRef[Any], request: Request, timeout: float
    ) -> Any:
        """Ask the session (see ``SessionRuntime.call``).

        A subscriber runs on its session's thread; asked from there for history
        or a snapshot, the session answers directly instead of through its
        inbox, which it would never read while the subscriber runs.
        """
        if not isinstance(request, Send):
            own = _own_session(ref)
            if own is not None:
                return own.on_receive(request)
        try:
            return ref.ask(request, block=True, timeout=timeout)
        except pykka.ActorDeadError as exc:
            if exc.__cause__ is None:  # never taken: it died with the call in its inbox
                raise NotDelivered(f"session {session_id!r} ended before it took the call") from exc
            raise SessionCrashed(session_id, f"it died during the call ({exc})") from exc
        except pykka.Timeout as exc:
            raise TimeoutError(f"session {session_id!r} did not answer within {timeout} s") from exc

    def workers(self) -> list[WorkerInfo]:
        return []

    def wait_ready(self, timeout: float | None) -> bool:
        return True

    def close(self) -> None:
        """Nothing to release: the host's supervisor stops the sessions."""


def _own_session(ref: pykka.ActorRef[Any]) -> AgentSession | None:
    """The session actor of ``ref`` when this thread is its own, else ``None``."""
    lifecycle = lifecycle_of(ref)
    if lifecycle is None or lifecycle.thread != threading.get_ident():
        return None
    actor = lifecycle.actor()
    return actor if isinstance(actor, AgentSession) else None
