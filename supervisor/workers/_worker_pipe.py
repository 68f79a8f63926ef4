"""The worker's end of its pipe: read by one thread at a time, often the session it is for.

The worker's main thread routes frames as they come. An idle session reads the
pipe itself while no other thread does (its actor inbox, ``PipeInbox``, waits
on the pipe as well as on Pykka's messages): a call for that session then runs
at once on the thread that read it, with no hand-off from the main thread, and
other frames are routed exactly as the main thread routes them. The session
stops reading before it runs anything, so a long turn never holds up other
sessions' frames: the main thread reads them meanwhile.

The main thread waits in an ``epoll`` set that a session takes the pipe out of
while it reads, so the main thread is not woken at all for that session's
calls. The reading session itself waits in a blocking ``read`` of the pipe
(cheaper to wake than a poller, see ``WorkerPipe.read_for``); a message put in
its inbox ends that read through a ``poke`` frame, which the worker asks the
host for. With the portable backend (``supervisor.workers._io``: where
``epoll`` or ``eventfd`` is missing, or when asked for), only the main thread
reads.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from supervisor.workers._frames import read_frame
from supervisor.workers._io import PipeIO, Poller
from supervisor.workers._protocol import POKE, unpack

__all__ = ["PipeInbox", "WorkerPipe"]

_MAIN = object()
"""``WorkerPipe.holder`` while the main thread reads a frame."""

_STOP_TIMEOUT = 10.0

Route = Callable[[dict[str, Any], Any], Any]
"""``route(frame, owner)``: act on a frame, or return the call it is for ``owner`` (the
reading session's, else ``None``) for that session to run on its own thread."""


def _wait(io: PipeIO, poller: Poller, wake: int) -> list[int]:
    """The fds ``poller`` finds ready (blocking until one is); ``wake`` is drained if it fired."""
    ready = poller.poll()
    if wake in ready:
        io.drain(wake)
    return ready


class _Read(NamedTuple):
    """A call a session read off the pipe itself, shaped as the envelope Pykka's loop takes."""

    message: Any
    reply_to: None = None


class WorkerPipe:
    """Reads the worker's pipe: ``serve`` on the main thread, ``PipeInbox.get`` on sessions'.

    Thread-safe. ``lock`` guards ``holder`` and every bound ``PipeInbox``.

    Args:
        conn: The worker's end of the pipe (written elsewhere, under its own lock).
        route: Called with every frame but ``shutdown``, on the thread that read it.
        io: The pipe backend; with a shared one, idle sessions read the pipe too.
    """

    def __init__(
        self, conn: Connection, route: Route, io: PipeIO, poke: Callable[[], None]
    ) -> None:
        self.conn = conn
        self._fd = conn.fileno()
        self._io = io
        self._route = route
        self._poke = poke
        self.lock = threading.Lock()
        self._released = threading.Condition(self.lock)  # the pipe has no holder any more
        self.holder: object = None  # _MAIN, the reading session's inbox, or None
        self._ending = False  # the worker is stopping: nobody reads any more
        self._last_frame: dict[str, Any] | None = None  # the ``shutdown`` frame
        self._epoll: Poller | None = None  # the main thread's: the pipe (off while a session
        if io.shared:  # reads) and its wake-up
            self._main_wake = io.wakeup()  # a session ended the reading
            self._epoll = io.poller(conn.fileno(), self._main_wake)

    def serve(self) -> dict[str, Any] | None:
        """Route frames (main thread) until the pipe ends (``None``) or ``shutdown`` (returned)."""
        if self._epoll is None:
            while True:
                try:
                    frame = unpack(read_frame(self.conn))
                except (EOFError, OSError):
                    return None  # the parent closed the pipe or died
                if frame["op"] == "shutdown":
                    return frame
                if frame["op"] != POKE:
                    self._route(frame, None)
        fd = self.conn.fileno()
        while True:
            ready = _wait(self._io, self._epoll, self._main_wake)
            with self.lock:
                if self._ending:
                    return self._last_frame
                if self.holder is not None or fd not in ready:
                    continue  # a session reads the pipe (it is out of the epoll set now)
                self.holder = _MAIN
            try:
                if self._read_one(None) is False:
                    with self.lock:
                        return self._last_frame
            finally:
                with self.lock:
                    self.holder = None
                    if self._ending:
                        self._released.notify_all()  # ``close`` waits (it set ``_ending``)

    def wake_reader(self) -> None:
        """Wake the session reading the pipe (a message reached its inbox): ask the host
        for a ``poke`` frame, which ends the session's ``read`` (see ``read_for``). Call it
        without holding ``lock``: it writes to the pipe."""
        self._poke()

    def hold(self, inbox: PipeInbox) -> bool:
        """Let ``inbox``'s session read the pipe if nobody does (caller holds ``lock``)."""
        if self._epoll is None or self.holder is not None or self._ending:
            return False
        self.holder = inbox
        self._epoll.pause(self._fd)  # the main thread stays asleep
        return True

    def read_for(self, inbox: PipeInbox) -> Any:
        """Read frames for ``inbox``'s session (holding the pipe) until one is its call
        (returned), a message reaches its inbox or the worker stops (``None``); then let go.

        The session waits in a blocking ``read`` of the pipe, not in a poller: the
        kernel wakes a reader blocked in ``read`` as the synchronous partner of the
        host's write (a waiter in ``epoll_wait`` is not), which here is ~10 us less
        per call and lets the scheduler run the host and the session on one CPU, as
        it does for a plain ``Pipe``. A message for the session (a stop, a kill) or
        the worker's end cannot interrupt such a read: ``wake_reader`` asks the host
        for a ``poke`` frame, which does; the pipe's end ends it too.
        """
        try:
            while True:
                with self.lock:
                    if inbox.waiting() or self._ending:
                        return None
                call = self._read_one(inbox.owner)
                if call is False:
                    return None
                if call is not None:
                    return call
        finally:
            with self.lock:
                self.let_go()

    def let_go(self) -> None:
        """The holding session stops reading (caller holds ``lock``): the main thread reads
        again, and is woken at once if a frame waits (level-triggered)."""
        self.holder = None
        if self._ending:
            self._released.notify_all()  # ``close`` waits (it set ``_ending`` first)
        elif self._epoll is not None:
            self._epoll.resume(self._fd)

    def close(self) -> None:
        """Stop reading (waking a reading session) and close the pipe."""
        with self.lock:
            self._ending = True
            reading = isinstance(self.holder, PipeInbox)
        if reading:
            self.wake_reader()
        with self.lock:
            self._released.wait_for(lambda: self.holder is None, _STOP_TIMEOUT)
        self.conn.close()
        if self._epoll is not None:
            self._epoll.close()
            os.close(self._main_wake)

    def _read_one(self, owner: Any) -> Any:
        """Read one frame and route it (the caller holds the pipe): the call for ``owner``
        it carried, ``None``, or False once the pipe ended (or said ``shutdown``)."""
        try:
            frame = unpack(read_frame(self.conn))
        except (EOFError, OSError):
            self._end(None)
            return False
        op = frame["op"]
        if op == "shutdown":
            self._end(frame)
            return False
        if op == POKE:
            return None  # it woke the reading session: its inbox has a message
        return self._route(frame, owner)

    def _end(self, last: dict[str, Any] | None) -> None:
        with self.lock:
            if not self._ending:
                self._ending = True
                self._last_frame = last
        if self._epoll is not None:
            self._io.wake(self._main_wake)  # if a session read it


class PipeInbox:
    """The actor inbox of a session in a worker: Pykka's messages, and the worker's pipe.

    ``put`` and ``empty`` are thread-safe; ``get`` runs on the session's own
    thread. While the inbox is empty and no other thread reads the pipe, ``get``
    reads it: a call for this session comes back as its next message. A message
    put meanwhile wakes it (``WorkerPipe.wake_reader``).
    """

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._pipe: WorkerPipe | None = None
        self.owner: Any = None
        self._put = threading.Condition()  # on the pipe's lock once bound
        self._mutex: Any = self._put  # what ``_put`` waits on: entered directly where no
        # wait or notify follows (a Condition's ``with`` costs two Python calls)
        self._held = False  # took the pipe in ``hold_next`` and has not read it yet

    def bind(self, pipe: WorkerPipe, owner: Any) -> None:
        """Attach to the worker's pipe (before the actor starts); ``owner`` is what ``route``
        gets to recognise the session's calls."""
        self._pipe = pipe
        self.owner = owner
        self._put = threading.Condition(pipe.lock)
        self._mutex = pipe.lock

    def put(self, envelope: Any, block: bool = True, timeout: float | None = None) -> None:
        pipe = self._pipe
        with self._put:
            self._items.append(envelope)
            reading = pipe is not None and pipe.holder is self
            if not reading:
                self._put.notify()
        if reading:  # it waits in a read of the pipe (a spurious wake-up is harmless)
            pipe.wake_reader()  # type: ignore[union-attr]  # reading: bound to a pipe

    def empty(self) -> bool:
        return not self._items

    def waiting(self) -> bool:
        """Whether a message waits (the caller holds the pipe's ``lock``)."""
        return bool(self._items)

    def hold_next(self) -> None:
        """Take the pipe now, on the session's thread, if nobody reads it and nothing waits
        here: called just before the session writes its answer, so that the next call for
        it, which may follow the answer at once, is read by this thread and not handed over
        by the main thread (the host's reply to the answer can win the race back to ``get``
        when the kernel runs the woken host on this thread's core). ``get`` reads or lets go."""
        pipe = self._pipe
        if pipe is None:
            return
        with self._mutex:
            if not self._items and not self._held:
                self._held = pipe.hold(self)

    def let_go(self) -> None:
        """Give back a pipe ``hold_next`` took (the session will not read it: it is dying)."""
        pipe = self._pipe
        if pipe is None:
            return
        with self._mutex:
            if self._held:
                self._held = False
                pipe.let_go()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        pipe = self._pipe
        while True:
            with self._mutex:  # ``_put``'s lock: ``_put.wait`` below is within it
                held, self._held = self._held, False
                if self._items:
                    if held:
                        pipe.let_go()  # type: ignore[union-attr]  # held: bound to a pipe
                    return self._items.popleft()
                if not held and (pipe is None or not pipe.hold(self)):
                    self._put.wait()
                    continue
            call = pipe.read_for(self)  # type: ignore[union-attr]  # held: bound to a pipe
            if call is not None:
                read: _Read = tuple.__new__(_Read, (call, None))  # no Python-level __new__
                return read
