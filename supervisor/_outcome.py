"""``OneOutcome``: of the ways a call without a waiting thread can end, the first wins.

A non-blocking call can end in several ways that race: its answer (or error),
and its deadline on the host's timer. Whichever comes first is handed to the
call's ``done`` callback; the others are ignored, and the deadline is cancelled.

``tamed`` gives a call's caller a ``CallAborted`` instead of a
``SystemExit`` or ``KeyboardInterrupt`` raised on a thread of the host, where it
cannot stop the program: set on a future, it would stop whoever reads the result
(an asyncio event loop re-raises those two out of ``run_forever``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from actors._loop import ends_session
from supervisor.errors import CallAborted

if TYPE_CHECKING:
    from supervisor._timer import Deadline

__all__ = ["OneOutcome", "raise_tamed", "tamed"]

logger = logging.getLogger("supervisor.host")


def tamed(error: BaseException, during: str = "the call") -> BaseException:
    """``error``, or a ``CallAborted`` caused by it if it is one that stops a program or a
    thread (``actors._loop.ends_session``): what a future or an awaiting task may carry."""
    return CallAborted(error, during) if ends_session(error) else error


def raise_tamed(error: BaseException, during: str) -> NoReturn:
    """Raise ``tamed(error, during)``: ``error`` itself (its traceback kept), or the
    ``CallAborted`` caused by it. Called in an ``except`` that caught ``error``."""
    aborted = tamed(error, during)
    try:
        if aborted is error:
            raise error
        raise aborted from error
    finally:
        # This frame is in the traceback of what it raises: kept as its locals, the error
        # made a reference cycle with its own traceback (freed by the cyclic GC only).
        del error, aborted


class OneOutcome:
    """Hands ``done`` the first outcome only. Thread-safe (a lock is the claim).

    Args:
        done: Called once with ``(answer, None)`` or ``(None, error)``.
    """

    __slots__ = ("_claim", "_done", "deadline")

    def __init__(self, done: Callable[[Any, BaseException | None], None]) -> None:
        self._done = done
        self._claim = threading.Lock()
        self.deadline: Deadline | None = None

    @property
    def settled(self) -> bool:
        """Whether an outcome was handed over already."""
        return self._claim.locked()

    def finish(self, value: Any, error: BaseException | None) -> None:
        """Hand this outcome over unless another came first. Never raises (it runs on
        threads that must go on: a session's, a pipe reader's, the timer's)."""
        if not self._claim.acquire(blocking=False):
            return
        if self.deadline is not None:
            self.deadline.cancel()
        try:
            self._done(value, error)
        except Exception:
            logger.exception("a call's completion handler failed")
