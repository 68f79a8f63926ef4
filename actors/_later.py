"""A turn whose checkpoint is committed after its session's thread has moved on.

A host's checkpointer may queue a turn's save and return a ``PendingSave`` instead of
waiting for the commit (``supervisor._checkpoints.Checkpoints.save_later``): a session
thread that waits for its batch and is woken costs a hand-over of the interpreter lock,
which with a thousand turns in flight is most of what a turn's checkpoint costs past
its Python. ``AgentSession.send`` then returns a ``LaterAnswer`` instead of the answer,
and the actor's receive loop hands it the ask's reply:

* once the save is durable, the thread that committed it publishes the turn's
  ``turn_finished`` and sets the reply to the answer; a save that failed publishes the
  turn's ``error`` and fails the reply with the save's error, as a turn does whose
  save fails on its own thread;
* the session's thread waits for the outcome (if it is not in yet) before it takes
  its next message, a kill or a stop included, and then rolls a failed turn back
  there: so a session never runs a turn, answers a call or ends on top of a turn
  whose save is still in doubt, and its own state changes only on its own thread.

Both objects are thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from actors._turn_undo import TurnMark
from actors.errors import CheckpointAborted
from actors.messages import Message

__all__ = ["LaterAnswer", "PendingSave", "reply"]

logger = logging.getLogger("actors")


class _Session(Protocol):
    """What a ``LaterAnswer`` uses of its ``AgentSession`` (not imported: the session's
    module imports this one)."""

    event_buffer: Any  # an ``actors.events.EventBuffer``
    _steered: list[str]

    def _rollback(self, mark: TurnMark) -> None: ...


class PendingSave:
    """A checkpoint save that its caller does not wait for: finished once, by whoever
    commits it, with its error or ``None``; tells each ``when_done`` callback then (at
    once for one added after)."""

    __slots__ = ("_callbacks", "_error", "_finished", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._finished = threading.Lock()
        self._finished.acquire()  # released by ``finish``: the cheapest wake-up there is
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[BaseException | None], object]] | None = []

    def finish(self, error: BaseException | None) -> None:
        """Record how the save ended (``None``: it is durable), then run the callbacks, on
        this thread. A second call is ignored."""
        with self._lock:
            callbacks = self._callbacks
            if callbacks is None:
                return
            self._callbacks = None
            self._error = error
            self._finished.release()
        for callback in callbacks:
            _run(callback, error)

    def when_done(self, callback: Callable[[BaseException | None], object]) -> None:
        """Call ``callback(error)`` once the save ended: on the finishing thread, or on this
        one at once if it has. It must not raise (one that does is logged)."""
        with self._lock:
            callbacks = self._callbacks
            if callbacks is not None:
                callbacks.append(callback)
                return
            error = self._error
        _run(callback, error)

    @property
    def finished(self) -> bool:
        """Whether the save has ended."""
        return self._callbacks is None

    @property
    def error(self) -> BaseException | None:
        """How the save ended, once ``finished``: its error, or ``None`` (durable)."""
        return self._error

    def wait(self) -> BaseException | None:
        """Wait until the save ended; its error, or ``None``. It does not wait for the
        callbacks (one may be waiting for this thread)."""
        if self._callbacks is not None:  # read without the lock: set once, to None
            self._finished.acquire()
            self._finished.release()
        return self._error


class LaterAnswer:
    """The outcome of a turn whose save is pending (see the module docstring): what
    ``send`` returns then, for the actor's loop."""

    __slots__ = ("_answer", "_lock", "_mark", "_outcome", "_reply", "_save", "_session",
                 "_started")  # fmt: skip

    def __init__(
        self,
        session: _Session,
        save: PendingSave,
        mark: TurnMark,
        answer: Message,
        started: float,
    ) -> None:
        self._session = session
        self._save = save
        self._mark = mark
        self._answer = answer
        self._started = started
        self._lock = threading.Lock()
        self._reply: Any = None  # the ask's reply, once the loop hands it over
        self._outcome: tuple[BaseException | None] | None = None
        save.when_done(self._saved)

    def reply_with(self, reply: Any) -> None:
        """Set the ask's ``reply`` (a Pykka future) once the save ended: now if it has."""
        with self._lock:
            outcome = self._outcome
            if outcome is None:
                self._reply = reply
                return
        _answer(reply, self._answer, outcome[0])

    def settle(self) -> None:
        """On the session's thread, before its next message: wait for the save's outcome,
        then roll the turn back if it failed (else forget the steering it took)."""
        session = self._session
        if self._save.wait() is None:
            session._steered = []
        else:
            session._rollback(self._mark)

    def _saved(self, error: BaseException | None) -> None:
        """The save ended (on the thread that committed it): the turn's last event, then
        the answer (or the save's error)."""
        if error is not None and not isinstance(error, Exception):  # as ``session._save``
            aborted = CheckpointAborted(error)
            aborted.__cause__ = error
            error = aborted
        events = self._session.event_buffer
        try:
            if error is None:
                events.publish(
                    "turn_finished",
                    turn=self._mark.turns + 1,
                    content=self._answer.content,
                    seconds=time.perf_counter() - self._started,
                )
            else:
                events.publish("error", turn=self._mark.turns + 1, error=repr(error))
        finally:
            events.unreserve()
            with self._lock:
                self._outcome = (error,)
                reply, self._reply = self._reply, None
            if reply is not None:
                _answer(reply, self._answer, error)


def reply(response: Any, reply_to: Any) -> LaterAnswer | None:
    """Hand a handler's ``response`` to the ask's ``reply_to`` (a Pykka future; ``None``
    for a tell): at once, or, for a ``LaterAnswer``, once its save has ended. Returns that
    ``LaterAnswer``, which the actor's loop settles before its next message."""
    if response.__class__ is LaterAnswer:
        if reply_to is not None:
            response.reply_with(reply_to)
        return response
    if reply_to is not None:
        reply_to.set(response)
    return None


def _answer(reply: Any, answer: Message, error: BaseException | None) -> None:
    """Set ``reply`` (a Pykka future) to ``answer``, or fail it with ``error``."""
    if error is None:
        reply.set(answer)
    else:
        reply.set_exception(exc_info=(type(error), error, error.__traceback__))


def _run(callback: Callable[[BaseException | None], object], error: BaseException | None) -> None:
    try:
        callback(error)
    except BaseException:  # the save's other callbacks, and its committing thread, go on
        logger.exception("a pending checkpoint's completion handler failed")
