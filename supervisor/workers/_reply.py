"""``Reply``: the reply to one call a ``WorkerClient`` sends its worker.

A one-shot, lock-based future (see ``supervisor.workers._client`` for why not
``concurrent.futures.Future``): the thread that reads the reply from the pipe, or
the one that buries the worker, settles it; any number of threads wait for it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor.workers._lanes import Parked

__all__ = ["Reply"]

logger = logging.getLogger("supervisor.workers")


class Reply:
    """The reply to one call: settled once, by the thread delivering it (or at the worker's death).

    Thread-safe. Any number of threads may wait in ``result``. The waiting is a
    lock the constructor acquires and ``_settle`` releases: the cheapest wake-up
    CPython has. ``on_done``, if given, is called with the reply once it is
    settled, on the settling thread (a non-blocking call's completion: nobody waits).
    """

    __slots__ = (
        "_done",
        "_error",
        "_gate",
        "_id",
        "_key",
        "_on_done",
        "_on_reply",
        "_ordered",
        "_parked",
        "_value",
    )

    def __init__(
        self,
        on_reply: Callable[[Any], Any] | None = None,
        on_done: Callable[[Reply], None] | None = None,
    ) -> None:
        self._on_reply = on_reply
        self._on_done = on_done
        self._gate = threading.Lock()
        self._gate.acquire()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._id: int | None = None  # the request's id (set by ``WorkerClient``)
        self._key: str | None = None  # the session the call is about: its frames' lane
        self._ordered = True  # delivered in its session's lane (see ``_UNORDERED``)
        self._parked: list[Parked] | None = None  # threads in ``WorkerClient.wait`` for it

    def done(self) -> bool:
        """True once the reply (or the failure) is in."""
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The reply payload; raises the call's error, or ``TimeoutError`` after ``timeout``."""
        if not self._done:
            if not self._gate.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise TimeoutError(f"no reply within {timeout} s")
            self._gate.release()  # let any other waiter through too
        error = self._error
        if error is not None:
            try:
                raise error
            finally:
                # This frame is in the error's traceback: kept as its locals, the error and
                # the reply (which holds it) made a reference cycle of each failed call.
                del self, error
        return self._value

    def exception(self) -> BaseException | None:
        """The call's error once settled (``None``: it succeeded, or is not settled yet),
        without raising it: read so, it gets no frame of its reader in its traceback."""
        return self._error

    def _deliver(self, value: Any) -> None:
        """Settle with a successful reply's payload, passed through ``on_reply`` first.

        What ``on_reply`` raises settles the reply as its error; a ``BaseException`` that is
        not an ``Exception`` (a checkpoint store's ``SystemExit`` on the main thread) is
        raised on too, on the delivering thread. That thread may be delivering the reply of
        another caller's call (a non-blocking one, of the session it waits for): before, that
        call was left unanswered until its deadline, or until its worker was killed."""
        on_reply = self._on_reply
        if on_reply is None:
            self._settle(value, None)
            return
        try:
            try:
                result = on_reply(value)
            except Exception as exc:
                self._settle(None, exc)
            except BaseException as exc:
                self._settle(None, exc)
                raise
            else:
                self._settle(result, None)
        finally:
            # This frame is in the traceback of what ``on_reply`` raised: kept as its local,
            # the reply (which holds that error) made a reference cycle of each failed save.
            del self

    def _settle(self, value: Any, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done = True
        self._gate.release()
        parked = self._parked
        if parked is not None:
            for waiter in list(parked):
                waiter.wake()
        on_done = self._on_done
        if on_done is not None:
            try:
                on_done(self)
            except Exception:
                logger.exception("a reply's completion handler failed")
