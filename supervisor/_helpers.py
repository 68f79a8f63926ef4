"""``HelperThreads``: a small bounded pool for the slow steps of non-blocking calls.

A non-blocking call holds no thread while it runs in its session; a few of
its steps may still have to wait: bringing back a hibernated session (its
checkpoint loaded, an actor started through the root supervisor), waiting for
a crashed one to be restarted or for an ended incarnation's notices before a
retry, reading a checkpoint of a session that is not running, and the
lifecycle calls (``start_session``, ``resume``, ``hibernate``,
``stop_session``, ``steer`` in process mode). Those run here, on at most
``size`` threads, in the order they were asked for. A thread starts when work
is queued and fewer than ``size`` run, and ends as soon as the queue is empty,
so an idle host holds none.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

__all__ = ["HelperThreads"]

logger = logging.getLogger("supervisor.host")


class HelperThreads:
    """Runs queued functions on at most ``size`` threads. Thread-safe.

    Args:
        size: Most threads at once.
        name: Prefix of the threads' names.
    """

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        self.size = size
        self._name = name
        self._lock = threading.Lock()
        self._queue: deque[Callable[[], None]] = deque()
        self._threads: set[threading.Thread] = set()
        self._idle = threading.Condition(self._lock)  # notified when the last thread ends
        self._count = 0

    def run(self, work: Callable[[], None]) -> None:
        """Queue ``work`` (which must not raise: what it raises, ``SystemExit`` included,
        is logged and dropped)."""
        with self._lock:
            self._queue.append(work)
            if len(self._threads) >= self.size:
                return
            self._count += 1
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}-{self._count}", daemon=True
            )
            self._threads.add(thread)
        thread.start()

    @property
    def running(self) -> int:
        """How many helper threads run now."""
        with self._lock:
            return len(self._threads)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty and every thread ended; False after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._threads, timeout)

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                if not self._queue:
                    self._threads.discard(me)
                    if not self._threads:
                        self._idle.notify_all()
                    return
                work = self._queue.popleft()
            try:
                work()
            except BaseException:  # a future's done-callback may raise even ``SystemExit``:
                # the thread must go on (it counts as running), or queued work never runs
                logger.exception("a helper step of a non-blocking call failed")
