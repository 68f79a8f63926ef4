"""``ask_later``: a Pykka ``ask`` whose answer goes to a callback, not to a waiting thread.

Pykka's ``ask`` puts an envelope in the actor's inbox with a future the actor
fulfils (``set`` with the answer, ``set_exception`` with what the handler
raised, or ``ActorDeadError`` when the actor ended with the envelope still
queued). Here that future is an ``_Answer``, which hands the outcome to a
callback instead of waking a thread: on the actor's own thread, the moment the
handler returns. Like ``supervisor._actor``, it relies on Pykka 4's envelope
and future protocol (``pykka>=4,<5``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pykka
from pykka._envelope import Envelope

from supervisor._outcome import OneOutcome

if TYPE_CHECKING:
    from pykka._types import OptExcInfo

    from supervisor._timer import Deadline

__all__ = ["Outcome", "ask_and_wait", "ask_later"]

Outcome = Callable[[Any, BaseException | None], None]
"""Called once with ``(answer, None)`` or ``(None, error)``."""


class _Answer(pykka.Future[Any]):
    """The reply slot of one ``ask_later``: the first of answer, error or deadline wins.
    Its ``set`` and ``set_exception`` never raise: they run inside the actor's loop,
    which would take an exception for the handler's."""

    def __init__(self, done: Outcome) -> None:
        super().__init__()
        self.outcome = OneOutcome(done)

    def set(self, value: Any | None = None) -> None:
        self.outcome.finish(value, None)

    def set_exception(self, exc_info: OptExcInfo | None = None) -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        error = exc_info[1]
        if error is None:
            error = RuntimeError(f"{exc_info[0]!r} set without an exception")
        self.outcome.finish(None, error)


def ask_and_wait(ref: pykka.ActorRef[Any], message: Any, timeout: float | None) -> Any:
    """``ref.ask(message)``'s answer, waited for up to ``timeout`` seconds, as Pykka's
    blocking ``ask`` gives it, but leaving a failed call's error in no reference cycle.

    Pykka's blocking ``ask`` frame holds the reply, which holds the error it raises; and
    its ``ask`` to an actor already dead fails a reply it made, whose error's traceback
    holds that frame too. Here the reply is waited for outside ``ask``, and a dead actor
    is told before any reply is made (one dying meanwhile still fails Pykka's way).

    Raises:
        pykka.ActorDeadError: the actor is dead (or ended with the message queued).
        pykka.Timeout: no answer within ``timeout``.
        Exception: what the actor's handler raised.
    """
    if not ref.is_alive():
        raise pykka.ActorDeadError(f"{ref} not found")
    return ref.ask(message, block=False).get(timeout=timeout)


def ask_later(  # noqa: PLR0917 (one call's whole description)
    ref: pykka.ActorRef[Any],
    message: Any,
    done: Outcome,
    call_later: Callable[[float, Callable[[], None]], Deadline],
    timeout: float,
    expired: Callable[[], BaseException],
) -> None:
    """Ask ``ref`` without waiting: ``done`` gets the answer or the error once, on the
    actor's thread, or ``expired()`` after ``timeout`` seconds on the timer's thread.

    An actor already dead fails the call at once with ``pykka.ActorDeadError``
    (without a cause, as Pykka's ``ask`` does: the call was never taken).

    Raises:
        RuntimeError: ``call_later`` refused (its host is shut down).
    """
    answer = _Answer(done)
    outcome = answer.outcome
    outcome.deadline = call_later(timeout, lambda: outcome.finish(None, expired()))
    if not ref.is_alive():
        outcome.finish(None, pykka.ActorDeadError(f"{ref} not found"))
        return
    ref.actor_inbox.put(Envelope(message, reply_to=answer))
