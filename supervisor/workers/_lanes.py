"""The bookkeeping of who delivers a worker's frames, and who waits to read its pipe.

``WorkerClient`` reads a frame, then hands the pipe on *before* it delivers the
frame (events to subscribers, a reply's checkpoint save, a non-blocking call's
completion): a subscriber that calls the host for another session of the worker
must not wait for a pipe its own thread holds. Frames are then delivered by
several threads at once, so each session gets a ``Lane``: the frames read for
it that are not delivered yet, and the one thread (``owner``) delivering them,
in the pipe's order. A frame read for a session whose lane has an owner waits in
the lane; the owner delivers it after the ones before it.

A ``Parked`` is a thread waiting for its reply that could not read the pipe (another
thread was reading it): it sleeps on its own lock until its reply is settled, the
pipe is handed to it, or its reply waits in a lane only it may deliver.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Item", "Lane", "Parked"]

Item = tuple[dict[str, Any] | None, Any, Callable[[], None] | None]
"""A lane's entry: a frame and its call's ``Reply`` (or ``None``), or a function to run in
the frame order (a failure at the worker's death, a session's death)."""


class Lane:
    """The frames of one session (or of the worker itself: key ``None``) waiting to be
    delivered, and the thread delivering them. Guarded by the client's pipe lock."""

    __slots__ = ("depth", "items", "owner")

    def __init__(self) -> None:
        self.items: collections.deque[Item] = collections.deque()
        self.owner: int | None = None  # the thread delivering; None once nobody is
        self.depth = 0  # nested deliveries by the owner (a callback waiting for its session)


class Parked:
    """A thread waiting for ``reply`` without reading the pipe. ``wake`` may be called any
    number of times, from any thread, before or after the wait."""

    __slots__ = ("gate", "ident", "reply")

    def __init__(self, ident: int, reply: Any) -> None:
        self.ident = ident
        self.reply = reply
        self.gate = threading.Lock()
        self.gate.acquire()

    def wait(self, timeout: float | None) -> None:
        """Sleep until woken or ``timeout`` seconds passed (``None``: no bound)."""
        self.gate.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # woken already
            self.gate.release()
