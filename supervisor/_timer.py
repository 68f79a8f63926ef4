"""``CallTimer``: one thread that runs the deadlines of every non-blocking call of a host.

A non-blocking call cannot time out on its own thread (it has none), so each
one schedules its deadline here and cancels it when it completes. The thread
starts with the first deadline and ends once none has been pending for
``linger`` seconds (and at ``close``): a host that makes no non-blocking call,
or none lately, holds no thread for it, and a steady stream of calls does not
start a thread per call.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

__all__ = ["CallTimer", "Deadline"]

logger = logging.getLogger("supervisor.host")

LINGER = 1.0
"""Seconds the timer's thread stays without a pending deadline before it ends."""


class Deadline:
    """One scheduled callback of a ``CallTimer``; ``cancel`` it when it is no longer due.

    Thread-safe: ``cancel`` may race the timer; the callback then runs or not,
    once at most.
    """

    __slots__ = ("_timer", "action", "at")

    def __init__(self, timer: CallTimer, at: float, action: Callable[[], None]) -> None:
        self._timer = timer
        self.at = at
        self.action: Callable[[], None] | None = action

    def cancel(self) -> None:
        """Make sure the callback does not run (if it has not begun). Idempotent."""
        self._timer._cancel(self)


class CallTimer:
    """Runs callbacks at deadlines on one thread of its own. Thread-safe.

    Callbacks must be quick and must not block: every deadline of the host
    waits behind the one running. One that raises (``SystemExit`` included) is logged.

    Args:
        name: The thread's name.
        linger: Seconds the thread waits for a new deadline before it ends.
        clock: Monotonic seconds (real time; a host's injectable clock is for
            idleness and restart intensity, not for waiting).
    """

    def __init__(
        self, name: str, linger: float = LINGER, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._name = name
        self._linger = linger
        self._clock = clock
        # Held through ``_lock`` (C-level enter and exit) rather than ``with self._cond``,
        # which are two Python calls: every non-blocking call schedules and cancels here.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._live = 0  # deadlines in the heap that are neither cancelled nor run
        self._wake_at = math.inf  # when the thread wakes next, if it waits
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay: float, action: Callable[[], None]) -> Deadline:
        """Run ``action`` on the timer's thread after ``delay`` seconds, unless cancelled.

        Raises:
            RuntimeError: the timer is closed (its host shut down).
        """
        deadline = Deadline(self, self._clock() + max(delay, 0.0), action)
        with self._lock:
            if self._closed:
                raise RuntimeError("this AgentHost is shut down; create a new one")
            self._live += 1
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif deadline.at < self._wake_at:  # else it is seen when the thread wakes
                self._cond.notify()
        return deadline

    def close(self) -> None:
        """Drop every deadline and end the thread (joined). Idempotent."""
        with self._lock:
            self._closed = True
            self._heap.clear()
            self._live = 0
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether the timer's thread is running now."""
        with self._lock:
            return self._thread is not None

    def _cancel(self, deadline: Deadline) -> None:
        with self._lock:
            if deadline.action is None:
                return  # ran, or cancelled before
            deadline.action = None
            self._live -= 1
            heap = self._heap
            if not self._live:
                heap.clear()  # the thread notices within ``linger``, without a wake-up now
            elif len(heap) > 1024 and len(heap) > 4 * self._live:  # mostly cancelled
                self._heap = [entry for entry in heap if entry[2].action is not None]
                heapq.heapify(self._heap)

    def _run(self) -> None:
        while True:
            with self._lock:
                action = self._next_due()
                if action is None:
                    self._thread = None
                    return
            try:
                action()
            except BaseException:  # a future's done-callback may raise even ``SystemExit``:
                # the thread must go on, or no deadline of the host fires again
                logger.exception("a call's deadline handler failed")

    def _next_due(self) -> Callable[[], None] | None:
        """Wait (holding the condition) for the next deadline due; ``None`` once there was
        none for ``linger`` seconds, or the timer is closed."""
        idle_since: float | None = None
        while not self._closed:
            heap = self._heap  # re-read each time: ``_cancel`` may replace or clear it
            while heap and heap[0][2].action is None:
                heapq.heappop(heap)  # cancelled
            now = self._clock()
            if heap:
                idle_since = None
                at, _, deadline = heap[0]
                if at <= now:
                    heapq.heappop(heap)
                    action, deadline.action = deadline.action, None
                    self._live -= 1
                    return action
                wait = min(at - now, self._linger)
            else:
                if idle_since is None:
                    idle_since = now
                elif now - idle_since >= self._linger:
                    return None
                wait = self._linger - (now - idle_since)
            self._wake_at = now + wait
            self._cond.wait(wait)
            self._wake_at = math.inf
        return None
