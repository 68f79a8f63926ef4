"""``SessionGate``: the per-session lock of an ``AgentHost``, for threads and callbacks alike.

The operations that change what runs a session (``send``, ``hibernate``,
``stop_session``) hold its gate, one at a time. A blocking caller waits for
it on its own thread (``acquire``, as with a ``threading.Lock``); a
non-blocking call queues a callback instead (``when_free``), which the gate
runs, holding it, the moment it is this call's turn: no thread waits for a
queued non-blocking call. Both kinds wait in one FIFO queue, so calls to a
session run in the order they were made, whichever form made them.

A callback runs on the thread that released the gate (or, if the gate was
free, on the thread that queued it). Callbacks granted while one runs on
another frame are run by that frame's loop, one after the other, so a chain of
calls that each complete at once never deepens the stack.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["SessionGate", "Ticket"]


class Ticket:
    """A non-blocking call's place in a gate's queue (see ``SessionGate.when_free``)."""

    __slots__ = ("granted", "run")

    def __init__(self, run: Callable[[], None]) -> None:
        self.run = run
        self.granted = False


class _Blocked:
    """A thread waiting in ``SessionGate.acquire``: its lock is released when granted."""

    __slots__ = ("granted", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.granted = False


class SessionGate:
    """A fair (FIFO) lock that threads wait for and callbacks queue on. Thread-safe.

    Not reentrant, and, like ``threading.Lock``, released by whoever finished
    the operation: a non-blocking call's gate is released by the thread its
    call completes on.
    """

    __slots__ = ("_granting", "_held", "_mutex", "_ready", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Blocked | Ticket] = deque()
        self._granting = False  # a frame is running granted callbacks
        self._ready: deque[Ticket] = deque()  # granted, for that frame to run

    def locked(self) -> bool:
        """Whether an operation holds the gate now."""
        return self._held

    @property
    def queued(self) -> int:
        """How many calls wait for the gate now (blocking and non-blocking)."""
        with self._mutex:
            return len(self._waiters)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the gate, waiting in turn (up to ``timeout`` seconds; ``-1``: no limit);
        ``blocking=False`` takes it only if it is free and nobody queues. True if taken."""
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return True
            if not blocking:
                return False
            waiter = _Blocked()
            self._waiters.append(waiter)
        if waiter.lock.acquire(timeout=timeout):
            return True
        with self._mutex:
            if waiter.granted:  # granted as the wait ran out: the gate is ours
                return True
            self._waiters.remove(waiter)
            return False

    def when_free(self, ticket: Ticket) -> None:
        """Queue ``ticket.run`` to be called, holding the gate, when every earlier operation
        is done; at once, on this thread, if the gate is free (``ticket.granted`` tells).
        ``run`` must release the gate once its operation ends, and must not raise."""
        with self._mutex:
            if self._held or self._waiters:
                self._waiters.append(ticket)
                return
            self._held = True
            ticket.granted = True
        self._run(ticket)

    def withdraw(self, ticket: Ticket) -> bool:
        """Take a queued callback out of the queue; False if it was granted, or withdrawn,
        already (a cancel racing the call's own deadline withdraws it twice)."""
        with self._mutex:
            if ticket.granted:
                return False
            try:
                self._waiters.remove(ticket)
            except ValueError:
                return False
            return True

    def release(self) -> None:
        """Hand the gate to the next waiter in the queue, or free it.

        Raises:
            RuntimeError: the gate is not held.
        """
        with self._mutex:
            if not self._held:
                raise RuntimeError("SessionGate.release() of a gate that is not held")
            if not self._waiters:
                self._held = False
                return
            waiter = self._waiters.popleft()
            waiter.granted = True
        if isinstance(waiter, _Blocked):
            waiter.lock.release()
        else:
            self._run(waiter)

    def _run(self, ticket: Ticket) -> None:
        """Run a granted callback, or leave it to the frame already running callbacks."""
        with self._mutex:
            if self._granting:
                self._ready.append(ticket)
                return
            self._granting = True
        while True:
            ticket.run()
            with self._mutex:
                if not self._ready:
                    self._granting = False
                    return
                ticket = self._ready.popleft()
