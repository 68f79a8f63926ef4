"""``ThreadRuntime``: every session an ``AgentSession`` actor on a thread of this process.

The default runtime of ``AgentHost`` (``workers=None``). A call is a Pykka
``ask``; a checkpoint due after a turn is saved on the session's own thread
before the answer is handed back, so before any later message (a kill
included) is handled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka

from actors import AgentSession, Send, Snapshot
from actors.snapshot import checked_encoding, checked_messages
from supervisor._actor import supervised_class
from supervisor._ask_later import ask_and_wait, ask_later
from supervisor._lifecycle import lifecycle_of
from supervisor._runtime import Done, NotDelivered, Request, SessionLaunch, WorkerInfo
from supervisor._session_threads import SessionThreads
from supervisor._timer import CallTimer
from supervisor.errors import SessionCrashed

__all__ = ["ThreadRuntime"]

_SessionActor = supervised_class(AgentSession)
_CLOSE_TIMEOUT = 5.0  # parked threads end at once: a bound for a stalled machine


class ThreadRuntime:
    """Runs sessions as actors on threads of this process. Thread-safe.

    A session's thread is one of ``threads``: a start hands the session's loop to a
    thread parked there when one is, instead of waiting for a new thread to run, and a
    thread whose session ended parks for the next start (``SessionThreads``).
    """

    deaths = 0
    gave_up = False

    def __init__(self, threads: SessionThreads | None = None) -> None:
        self.threads = SessionThreads() if threads is None else threads
        # This runtime's own session class: its sessions' loops run on its threads.
        self._actor_class: type[AgentSession] = type(
            _SessionActor.__name__,
            (_SessionActor,),
            {"__module__": _SessionActor.__module__, "_sv_threads": self.threads},
        )

    def start(self, launch: SessionLaunch) -> pykka.ActorRef[Any]:
        """Start the session's actor; its plugins' ``session_start`` runs before this returns."""
        snapshot = launch.snapshot
        return self._actor_class.start(
            launch.template,
            session_id=launch.session_id,
            restored_state=None if snapshot is None else snapshot.state,
            restored_checked=snapshot is not None and checked_messages(snapshot) is not None,
            restored_encoding=None if snapshot is None else checked_encoding(snapshot),
            stripped_fields=() if snapshot is None else snapshot.stripped_fields,
            model=launch.model,
            max_steps=launch.max_steps,
            metadata=launch.metadata,
            steering=launch.steering,
            event_buffer=launch.events,
            checkpointer=None if launch.checkpoint_every is None else _checkpointer(launch),
            checkpoint_every=launch.checkpoint_every or 1,
            credentials=launch.credentials,
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
            return ask_and_wait(ref, request, timeout)
        except pykka.ActorDeadError as exc:
            raise _ended(session_id, exc) from exc
        except pykka.Timeout as exc:
            raise TimeoutError(f"session {session_id!r} did not answer within {timeout} s") from exc

    def submit(  # noqa: PLR0917 (the seam's signature)
        self,
        session_id: str,
        ref: pykka.ActorRef[Any],
        request: Request,
        timeout: float,
        done: Done,
        timer: CallTimer,
    ) -> None:
        """Put the call in the session's inbox; ``done`` gets its outcome (see
        ``SessionRuntime.submit``) on the session's thread, or on the timer's at the
        deadline. Asked from the session's own thread, it answers directly."""
        if not isinstance(request, Send):
            own = _own_session(ref)
            if own is not None:
                try:
                    answer = own.on_receive(request)
                except Exception as exc:
                    done(None, exc)
                else:
                    done(answer, None)
                return

        def outcome(value: Any, error: BaseException | None) -> None:
            if isinstance(error, pykka.ActorDeadError):
                error = _ended(session_id, error)
            done(value, error)

        def expired() -> TimeoutError:
            return TimeoutError(f"session {session_id!r} did not answer within {timeout} s")

        ask_later(ref, request, outcome, timer.call_later, timeout, expired)

    def workers(self) -> list[WorkerInfo]:
        return []

    def wait_ready(self, timeout: float | None) -> bool:
        return True

    def close(self) -> None:
        """End the parked threads (the host's supervisor has stopped the sessions)."""
        self.threads.close(_CLOSE_TIMEOUT)


def _ended(session_id: str, exc: pykka.ActorDeadError) -> NotDelivered | SessionCrashed:
    """What a call that found its session's actor dead means (see ``SessionRuntime.call``)."""
    if exc.__cause__ is None:  # never taken: it died with the call in its inbox
        error: NotDelivered | SessionCrashed = NotDelivered(
            f"session {session_id!r} ended before it took the call"
        )
    else:
        error = SessionCrashed(session_id, f"it died during the call ({exc})")
    error.__cause__ = exc
    return error


def _own_session(ref: pykka.ActorRef[Any]) -> AgentSession | None:
    """The session actor of ``ref`` when this thread is its own, else ``None``."""
    lifecycle = lifecycle_of(ref)
    # Once ``finished``, its thread may run another session (or a thread with its ident).
    if (
        lifecycle is None
        or lifecycle.thread != threading.get_ident()
        or lifecycle.finished.is_set()
    ):
        return None
    actor = lifecycle.actor()
    return actor if isinstance(actor, AgentSession) else None


def _checkpointer(launch: SessionLaunch) -> Callable[[Snapshot], object]:
    """The session's checkpointer: one that does not wait for the commit where the host
    has one (the session's thread goes back to its inbox; ``actors._later``)."""
    return launch.save if launch.save_later is None else launch.save_later
