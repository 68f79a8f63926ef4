"""``SessionThreads``: threads that run one actor loop after another.

``threading.Thread.start`` returns only once the new thread has run: a hand-off
between two threads, and on this project's machines the largest single step of a
session's start (about 220 µs of a 1.3 ms resume, measured on a slow stretch; the
other steps are the load, the supervisor's hop and building the session). A start
that finds a *parked* thread hands it the actor's loop and goes on without waiting;
the loop runs as soon as that thread is scheduled, and a message sent meanwhile
waits in the actor's inbox as it would behind any start.

A thread whose loop ended parks, if fewer than ``most_parked`` do, for up to
``idle`` seconds, and then ends; ``close`` ends the parked ones at once. So a host
that starts, hibernates and resumes sessions keeps a few threads busy instead of
creating one per start, and an idle host holds none for long.

What a reused thread keeps: what the loops before left in ``threading.local``
values (as in any thread pool). Each loop runs in a fresh ``contextvars``
context, as on a new thread, and under its own thread name; a parked thread is
named ``sessionvisor-parked``.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable

__all__ = ["DEFAULT_PARKED_THREADS", "PARKED_NAME", "SessionThreads"]

DEFAULT_PARKED_THREADS = 8
PARKED_NAME = "sessionvisor-parked"

_Loop = Callable[[], None]


class SessionThreads:
    """Runs actor loops on parked threads, or on new ones. Thread-safe.

    Args:
        most_parked: Most threads kept waiting for a loop (0: none, every loop gets a
            thread of its own, which ends with it).
        idle: Seconds a parked thread waits for a loop before it ends.
    """

    def __init__(self, most_parked: int = DEFAULT_PARKED_THREADS, idle: float = 5.0) -> None:
        if most_parked < 0:
            raise ValueError(f"most_parked must be >= 0, got {most_parked!r}")
        if idle <= 0:
            raise ValueError(f"idle must be > 0 seconds, got {idle!r}")
        self.most_parked = most_parked
        self.idle = idle
        self._lock = threading.Lock()
        self._loops: queue.SimpleQueue[tuple[_Loop, str] | None] = queue.SimpleQueue()
        self._free = 0  # parked threads no loop was handed to yet
        self._parked: set[threading.Thread] = set()
        self._closed = False

    def run(self, loop: _Loop, name: str) -> None:
        """Run ``loop`` on a parked thread, renamed ``name``, without waiting for it; with
        none parked, on a new (non-daemon) thread named ``name``, once it has started.

        ``loop`` must not raise: what escapes it ends its thread (reported by
        ``threading.excepthook``), which then parks no more.
        """
        with self._lock:
            parked = self._free > 0
            if parked:
                self._free -= 1
        if parked:
            self._loops.put((loop, name))
        else:  # in a list the thread empties: its ``args`` would hold the loop while it parks
            threading.Thread(target=self._serve, args=([loop],), name=name).start()

    @property
    def parked(self) -> int:
        """How many threads wait for a loop now."""
        with self._lock:
            return len(self._parked)

    def close(self, timeout: float) -> None:
        """End the parked threads and wait (up to ``timeout`` in all) for them to exit;
        a thread whose loop ends later ends with it. Idempotent."""
        with self._lock:
            self._closed = True
            waiting, self._free = self._free, 0
            parked = list(self._parked)
        for _ in range(waiting):
            self._loops.put(None)
        for thread in parked:
            thread.join(timeout)  # each ends at once: the bound is for a stalled machine

    def _serve(self, first: list[_Loop]) -> None:
        me = threading.current_thread()
        loop: _Loop | None = first.pop()
        while loop is not None:
            contextvars.Context().run(loop)
            # Dropped before parking: the ended actor, and all its session held, is garbage.
            loop = None
            handed = self._park(me)
            if handed is not None:
                loop, me.name = handed
                del handed

    def _park(self, me: threading.Thread) -> tuple[_Loop, str] | None:
        """Wait for the next loop; ``None`` when this thread is to end (too many parked, the
        pool closed, or nothing came within ``idle`` seconds)."""
        with self._lock:
            if self._closed or len(self._parked) >= self.most_parked:
                return None
            self._parked.add(me)
            self._free += 1
        me.name = PARKED_NAME  # a thread dump tells a parked thread from a session's
        try:
            try:
                return self._loops.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:
                    if self._free > 0:  # no loop is on its way to this thread: leave
                        self._free -= 1
                        return None
                # ``run`` counted this thread as taken: its loop is on the way (or close's
                # None); either comes at once.
                return self._loops.get()
        finally:
            with self._lock:
                self._parked.discard(me)
