"""The inbox and the reply slot of this project's Pykka actors.

Pykka's ``ThreadingActor`` gives each actor a ``queue.Queue`` inbox and each
``ask`` a ``ThreadingFuture``; both are built on ``threading.Condition``, which
costs a fresh lock, a deque and two Python-level lock dances per message. A
session's turn is one ``ask``, so that cost is paid on every turn a caller
waits for. Here the inbox is a ``queue.SimpleQueue`` (C-level; Pykka uses only
``put``, ``get`` and ``empty``), and the reply slot a ``Reply``: one lock,
held from birth and released when the answer is set. Measured against a bare
Pykka actor that returns its message, an ``ask`` round trip takes about 40%
less time.

Both keep Pykka's contracts (``pykka>=4,<5``): a ``Reply`` is a
``pykka.Future``, so ``get(timeout=)``, ``join``, ``map``, ``filter``,
``reduce``, ``await`` and ``pykka.get_all`` work on it as on Pykka's own.
"""

from __future__ import annotations

import _thread
import queue
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import pykka

if TYPE_CHECKING:
    from pykka._actor import ActorInbox
    from pykka._envelope import Envelope
    from pykka._future import GetHookFunc
    from pykka._types import OptExcInfo

__all__ = ["Reply", "new_inbox", "new_reply"]

T = TypeVar("T")


def new_inbox() -> ActorInbox:
    """An actor's inbox: a ``queue.SimpleQueue``."""
    inbox: queue.SimpleQueue[Envelope[Any]] = queue.SimpleQueue()
    return inbox


def new_reply() -> pykka.Future[Any]:
    """The reply slot of one ``ask``: a ``Reply``."""
    return Reply()


class Reply(pykka.Future[T]):
    """The answer to one ``ask``: set once (by the actor's thread), read by any number of
    threads.

    Thread-safe for readers; ``set``, ``set_exception`` and ``set_get_hook`` are
    meant to be called once, by one thread, and raise ``queue.Full`` (as Pykka's
    ``ThreadingFuture`` does) when the slot is already taken.
    """

    def __init__(self) -> None:
        super().__init__()
        self._ready = _thread.allocate_lock()
        self._ready.acquire()  # released once the outcome is in
        self._outcome: tuple[Any, OptExcInfo | None] | None = None

    def get(self, *, timeout: float | None = None) -> T:
        """The answer, waiting at most ``timeout`` seconds (forever if ``None``).

        Raises:
            pykka.Timeout: No answer within ``timeout``.
            Exception: What the actor's handler raised, with its traceback.
        """
        if self._get_hook is not None:
            return super().get(timeout=timeout)
        outcome = self._outcome
        if outcome is None:
            wait = -1 if timeout is None else max(timeout, 0.0)
            if not self._ready.acquire(timeout=wait):
                raise pykka.Timeout(f"{timeout} seconds")
            self._ready.release()  # for the next reader
            outcome = self._outcome
            assert outcome is not None  # set before the lock was released
        value, exc_info = outcome
        if exc_info is None:
            return value  # type: ignore[no-any-return]
        exc_type, error, trace = exc_info
        try:
            if error is None:
                assert exc_type is not None
                error = exc_type()
            if error.__traceback__ is not trace:
                raise error.with_traceback(trace)
            raise error
        finally:
            # This frame is in the raised error's traceback: kept as its locals, the error
            # (and the reply, which holds it) made a reference cycle of each failed ``ask``.
            del self, outcome, exc_info, error, trace

    def set(self, value: Any | None = None) -> None:
        """Set the answer, waking every reader."""
        self._finish((value, None))

    def set_exception(self, exc_info: OptExcInfo | None = None) -> None:
        """Set the error the readers get (``sys.exc_info()`` when not given)."""
        if exc_info is None:
            exc_info = sys.exc_info()
        self._finish((None, exc_info))

    def set_get_hook(self, func: GetHookFunc[T]) -> None:
        """Have ``get`` return what ``func(timeout)`` returns (Pykka's ``map``, ``join``...)."""
        if self._outcome is not None:
            raise queue.Full
        super().set_get_hook(func)

    def _finish(self, outcome: tuple[Any, OptExcInfo | None]) -> None:
        if self._outcome is not None or self._get_hook is not None:
            raise queue.Full
        self._outcome = outcome
        self._ready.release()
