"""``WorkerClient``: the parent's end of one worker process.

Calls are multiplexed over the worker's pipe: each gets a request id and a
``Reply`` (a one-shot, lock-based future); frames are matched to replies by id,
and unsolicited pushes (events, session downs) go to a callback. The reader
thread waits on the pipe *and* the process sentinel together (one ``epoll``
object kept for the worker's life), so a worker's death is noticed at once,
without polling: every call still in flight then fails with ``WorkerCrashed``
naming the pid and the exit code or signal (after the frames of its session
still being delivered), and the death callback runs.

A caller waiting for its reply reads the pipe itself whenever no other thread is
reading it (``wait``; ``ask`` takes the pipe before it even writes the request):
it takes the pipe out of the reader thread's ``epoll`` set, reads frames until its
own reply is in, and puts the pipe back. The reader thread is not woken at all, so
an uncontended call costs no thread hand-off in this process.

Reading and delivering are apart: the pipe is read by one thread at a time, and a
thread hands it on *before* it delivers a frame (events to subscribers, a reply's
checkpoint save, a completion), so a callback may call the worker again, for any
session, and be answered. Each session's frames are delivered in the pipe's order
by one thread at a time (its lane, ``_lanes``): a caller delivers its own session's
frames; another session's frame goes to the thread waiting for a reply there, or
to the reader thread, or to a helper thread (``_dispatch``). A caller that cannot
read sleeps on a lock of its own (``Parked``) until its reply is settled, the pipe
is handed to it, or its session's frames wait for it.

Why not ``concurrent.futures.Future`` and ``multiprocessing.connection.wait``:
a ``send`` round trip is a handful of pipe writes and thread wake-ups, and on
a small machine the Python work the reader does between handing over a reply
and blocking again delays the woken caller (it needs the GIL). A ``Future``
(condition variable, waiter lists) and a selector built per ``wait`` call cost
about 60 us per round trip there; a pre-acquired lock released by the reader
and a persistent poll object cost a few.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from supervisor.errors import WorkerCrashed
from supervisor.workers._frames import read_frame, write_frame
from supervisor.workers._io import DEFAULT, PipeIO, Poller
from supervisor.workers._lanes import Item, Lane, Parked
from supervisor.workers._memory_limit import MEMORY_EXIT
from supervisor.workers._protocol import POKE, SessionDown, decode_error, pack, unpack
from supervisor.workers._reply import Reply
from supervisor.workers._worker_process import WorkerSetup, worker_main

__all__ = ["LoadedTemplate", "Reply", "WorkerClient", "describe_exit"]

logger = logging.getLogger("supervisor.workers")

_JOIN_TIMEOUT = 5.0

_POKE = pack({"op": POKE})

_READ_SLICE = 1.0
"""Longest receive timeout a reading caller sets on the socket: a deadline further off is
waited for in slices, so the timeout changes (a system call) only near a deadline."""

_LEAD_LIMIT = 65536
"""``ask`` takes the pipe before writing only requests up to this size: a socket pair's
buffer (over 200 KiB on Linux) takes them at once, so the write does not block."""

_UNORDERED = frozenset({"history", "steer"})
"""Operations whose replies are delivered as soon as they are read, not after the frames of
their session being delivered: nothing in them depends on those (no checkpoint, no events,
no ``HistoryMirror`` update). A subscriber's ``steer`` or ``history`` of a session whose own
subscriber waits in turn for another session then never waits for that delivery: in thread
mode ``steer`` does not wait for the session's thread either. (``snapshot`` replies update
the session's ``HistoryMirror`` and ``stop`` ends its steering: both keep the order.)"""

_NO_LANE = object()
"""The lane a thread waits in when it waits for no ordered reply (see ``_dispatch``)."""

Push = Callable[["WorkerClient", dict[str, Any]], None]
Death = Callable[["WorkerClient"], None]


class LoadedTemplate:
    """A template in one worker: how many sessions placed there use it (or are starting
    on it), and whether a ``load_template`` of it was answered (``ready``)."""

    __slots__ = ("ready", "users")

    def __init__(self) -> None:
        self.users = 0
        self.ready = False


def describe_exit(exitcode: int | None) -> str:
    """``exit code 1``, ``signal SIGKILL``, ``out of memory (exit code 75)``..."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    if exitcode == MEMORY_EXIT:
        return f"out of memory (exit code {exitcode})"
    return f"exit code {exitcode}"


class WorkerClient:
    """One worker process and the calls in flight to it.

    Thread-safe: any thread may ``call``, ``submit`` and ``wait``. Frames are
    delivered, and ``on_push`` (events, downs) runs, on the thread waiting for a
    reply of the frame's session (its caller), else on the reader thread or the
    helper thread; each session's in order, one at a time. ``on_death`` runs
    once, on the reader thread.

    Args:
        context: The multiprocessing context (``forkserver`` or ``spawn``).
        on_push: Called with every unsolicited frame, in the pipe's order for each
            session, and with every reply that carries its call's events
            (``"events"``), before the reply is delivered.
        on_death: Called once on the reader thread when the worker has died or
            was shut down, once every in-flight call is failed or queued to fail
            after its session's frames (``after_delivered`` orders what it does).
        setup: What the worker applies before it serves (memory limit, initializer).
        io: The pipe backend (``supervisor.workers._io``): with a shared one, a
            caller in ``wait`` reads the pipe whenever nobody else does; with the
            portable one, only while the reader thread is not polling it.
    """

    def __init__(
        self,
        context: BaseContext,
        on_push: Push,
        on_death: Death,
        setup: WorkerSetup | None = None,
        io: PipeIO = DEFAULT,
    ) -> None:
        parent_conn, child_conn = context.Pipe(duplex=True)
        self._conn: Connection = parent_conn
        process: BaseProcess = context.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(child_conn, setup or WorkerSetup(io=io.name)),
            name="sessionvisor-worker",
            daemon=True,
        )
        self.process = process
        try:
            process.start()
        finally:
            child_conn.close()
        self.pid: int | None = process.pid
        self.exit_status: str | None = None  # set once dead
        self.exitcode: int | None = None  # set once dead
        self.ready = False  # set (once) when the worker said it serves
        self._settled = threading.Event()  # set once ready, or dead
        # The templates loaded (or being loaded) in this worker, by key (guarded by the pool,
        # which unloads one that no session placed here uses any more).
        self.templates: dict[str, LoadedTemplate] = {}
        self.sessions = 0  # sessions placed here (guarded by the pool)
        self._on_push = on_push
        self._on_death = on_death
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _futures and _dead; never held while writing
        # Writes to the pipe, one frame at a time. Apart from ``_lock``: a request larger
        # than the socket's buffer is written only as fast as the worker reads, and the
        # worker may be waiting for this process to read (its own write blocked): the
        # thread reading the pipe must be able to hand replies over meanwhile.
        self._write_lock = threading.Lock()
        self._futures: dict[int, Reply] = {}
        # Calls failed before their reply was delivered, their session ended by a subscriber
        # of the events they wrote ahead (``_cut``), with that error; their reply is dropped.
        self._cut_calls: dict[int, SessionDown] = {}
        self._dead = False
        self._closing = False
        self._init_reading(parent_conn.fileno())
        # The reader thread's wait: pipe and sentinel. With a shared backend a caller
        # pauses the pipe in it while the caller reads.
        self._io = io
        self._read_timeout = -1.0  # the socket's SO_RCVTIMEO, in seconds (0: none)
        try:
            self._epoll = io.poller(parent_conn.fileno(), process.sentinel)
            # Portable backend: what the reader thread waits on while a caller reads the
            # pipe (which nothing can take out of ``_epoll``'s set): the sentinel, and a
            # pipe a caller that stops reading writes to (``_hand_on_pipe``).
            self._wake_fds: tuple[int, int] | None = None
            self._sentinel_poll: Poller | None = None
            if not io.shared:
                self._wake_fds = _nonblocking_pipe()
                self._sentinel_poll = io.poller(process.sentinel, self._wake_fds[0])
            # A caller's wait while it holds the pipe: a blocking ``read`` on the socket
            # itself, bounded by its receive timeout (see ``_read_turn``).
            self._sock = socket.socket(fileno=os.dup(self._fd))  # a socket pair (POSIX)
            self._reader = threading.Thread(
                target=self._read, name=f"sessionvisor-worker-{self.pid}-reader", daemon=True
            )
            self._reader.start()
        except BaseException:
            self._abandon()
            raise

    def _init_reading(self, fd: int) -> None:
        """The state of who reads the pipe and who delivers what was read."""
        # Who reads the pipe: ``_holder`` is the ident of the thread reading one frame
        # off it (the reader thread, or a caller in ``wait``), or None; it hands the pipe
        # on before it delivers the frame (``_lanes``). ``_pipe_lock`` guards _holder,
        # _paused, _polling, _eof, _ending, _lanes, _parked and _epoll changes; ``_pipe``
        # (on it) is waited on by the reader thread only: for the pipe to be free again
        # before it polls (portable backend) or buries the worker (``_ending``).
        self._pipe_lock = threading.Lock()
        self._pipe = threading.Condition(self._pipe_lock)
        self._fd = fd
        self._holder: int | None = None
        self._paused = False  # the pipe is out of ``_epoll``'s set (shared backend)
        self._polling = False  # the reader thread waits in ``_epoll`` (portable: nobody reads)
        self._reader_waits = False  # the reader thread waits on ``_pipe`` for the pipe
        self._reader_ident: int | None = None
        self._eof = False  # a caller read the pipe's end: only the reader thread reads now
        self._ending = False  # the reader is burying the worker: nobody else reads
        self._lanes: dict[str | None, Lane] = {}  # frames read, not yet delivered, by session
        self._parked: collections.deque[Parked] = collections.deque()  # want the pipe
        self._reader_lanes = 0  # lanes the reader thread is delivering (see ``_dispatch``)
        self._helper: threading.Thread | None = None  # delivers lanes left without an owner
        self._orphans = threading.Condition(self._pipe_lock)  # one is left: wakes the helper

    def _abandon(self) -> None:
        """Undo a start whose reading side could not be set up (no file descriptor or thread
        left): kill and reap the worker, close what was opened for it. Left running, it
        would wait on its pipe for ever, which stayed open here."""
        self.kill()
        with contextlib.suppress(Exception):
            self.process.join(_JOIN_TIMEOUT)
        for opened in ("_epoll", "_sock", "_sentinel_poll"):
            resource = getattr(self, opened, None)
            if resource is not None:
                with contextlib.suppress(OSError):
                    resource.close()
        self._close_wake_fds()
        self._conn.close()
        with contextlib.suppress(ValueError):  # still running after the kill (not expected)
            self.process.close()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the worker serves (True) or died first (False; ``exit_status`` says how).

        Raises:
            TimeoutError: neither within ``timeout`` seconds.
        """
        if not self._settled.wait(timeout):
            raise TimeoutError(f"worker pid {self.pid} did not start within {timeout} s")
        return self.ready

    @property
    def alive(self) -> bool:
        """False once the worker is known dead (or shut down)."""
        return not self._dead

    def submit(
        self,
        op: str,
        payload: Any = None,
        on_reply: Callable[[Any], Any] | None = None,
        on_done: Callable[[Reply], None] | None = None,
    ) -> Reply:
        """Send a request; the ``Reply`` gets its payload or exception. Any thread.

        ``on_reply``, if given, turns a successful reply's payload into the
        ``Reply``'s value on the thread that delivers the reply, before any waiter
        sees it and before later frames of the call's session (a death included)
        are delivered; what it raises becomes the ``Reply``'s error. It runs even
        when nobody waits any more (the caller timed out). ``on_done``, if given,
        gets the settled ``Reply`` on the same thread, right after (or on this one,
        if the worker is dead already and none of the session's frames waits).
        """
        reply = Reply(on_reply, on_done)
        return self._write(self._request(op, payload, reply), reply)

    def _request(self, op: str, payload: Any, reply: Reply) -> bytes:
        """The request's bytes; ``reply`` numbered and keyed (the session it is about)."""
        call_id = next(self._ids)  # atomic; replies are matched by id, not by order
        reply._id = call_id
        if type(payload) is dict:
            session = payload.get("session")
            reply._key = session if type(session) is str else None
        reply._ordered = op not in _UNORDERED
        return pack({"id": call_id, "op": op, "payload": payload})

    def ask(
        self,
        op: str,
        payload: Any = None,
        on_reply: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """``submit``, then ``wait`` for the reply until it is in or ``timeout`` passes;
        returns the ``Reply``, settled unless the time ran out. Any thread.

        Unlike ``submit`` then ``wait``, this takes the pipe *before* it writes the
        request when nobody reads it: the reply cannot then be read by the reader
        thread, which would hand it over (a thread switch dearer than the round
        trip's own work) whenever this thread lost the processor between writing and
        taking the pipe, as it does when the woken worker preempts it. A request too
        large to go into the socket's buffer at once (``_LEAD_LIMIT``) is written
        first, as ``submit`` does: while a write blocks, the reader thread must stay
        free to read what the worker writes.
        """
        reply = Reply(on_reply)
        try:
            data = self._request(op, payload, reply)
            deadline = None if timeout is None else time.monotonic() + timeout
            if len(data) > _LEAD_LIMIT or not self._take_pipe():
                self._write(data, reply)
                self._await(reply, deadline)
                return reply
            try:
                self._write(data, reply)
            except BaseException:
                self._hand_on_pipe()
                raise
            self._await(reply, deadline)  # starts with the pipe held: it reads at once
            return reply
        finally:
            # This frame is in the traceback of a save that failed while ``_await`` delivered
            # the reply (see ``_drain``): kept as its local, the reply made a reference cycle.
            del reply

    def _write(self, data: bytes, future: Reply) -> Reply:
        """Register ``future`` as the reply of its request (``data``) and write the request."""
        call_id = future._id
        assert call_id is not None  # (numbered by ``_request``)
        with self._lock:
            dead = self._dead
            if not dead:
                self._futures[call_id] = future
        if dead:  # settled outside the lock: its ``on_done`` may submit again
            self._fail(future, self._crashed())
            return future
        with self._write_lock:
            # A broken pipe means the worker died: the reader fails this future with its
            # exit status when it buries it; once buried, the closed connection raises
            # here (``_bury`` closes it under this lock: no write goes to a reused fd).
            try:  # noqa: SIM105 (contextlib.suppress costs three Python calls per request)
                write_frame(self._conn, data)
            except OSError:
                pass
        return future

    def call(
        self,
        op: str,
        payload: Any = None,
        timeout: float | None = None,
        written: Callable[[], None] | None = None,
        *,
        kill_late: bool = True,
    ) -> Any:
        """Send a request and wait for its reply; ``written``, if given, is called once the
        request is on the pipe (frames written after it reach the worker after it).

        Raises:
            WorkerCrashed: the worker died before answering (or was dead).
            TimeoutError: no reply within ``timeout``; the worker is SIGKILLed
                (a stuck worker is replaced), so the call fails with WorkerCrashed
                right after unless the reply won the race. With ``kill_late=False``
                the worker is left alone and this ``TimeoutError`` is raised (a
                reply that comes later is dropped).
            Exception: what the operation raised in the worker (see
                ``_protocol.decode_error``).
        """
        future = self.submit(op, payload)
        try:
            if written is not None:
                written()
            try:
                return self.wait(future, timeout)
            except TimeoutError:
                if future.done() or not kill_late:
                    raise  # the error *is* the reply, or the caller only stops waiting
                logger.error(
                    "worker pid %s did not answer %r within %s s; killing it",
                    self.pid,
                    op,
                    timeout,
                    extra={"worker_pid": self.pid, "reason": "call_timeout"},
                )
                self.kill()
                return future.result(_JOIN_TIMEOUT)
        finally:
            del future  # (this frame is in the error's traceback, see ``Reply.result``)

    def wait(self, reply: Reply, timeout: float | None = None) -> Any:
        """``reply.result(timeout)``, reading the pipe on this thread whenever no other
        thread is reading it (see ``_await``).

        Raises what ``Reply.result`` raises.
        """
        try:
            if reply._done:
                return reply.result()
            self._await(reply, None if timeout is None else time.monotonic() + timeout)
            if reply._done:
                return reply.result()
            raise TimeoutError(f"no reply within {timeout} s")
        finally:
            del reply  # (this frame is in the error's traceback, see ``Reply.result``)

    def after_delivered(self, session_id: str | None, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the frames of ``session_id`` read so far are delivered: at once
        if none waits, else on the thread delivering them, right after them. The pool
        reports a session's death this way: after its last reply (and its checkpoint)."""
        self._after_lane(session_id, fn)

    def kill(self) -> None:
        """SIGKILL the worker (its death is then handled like any other). Idempotent."""
        with contextlib.suppress(Exception):
            self.process.kill()

    def shutdown(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Ask the worker to stop its sessions and exit; kill it if it does not; wait for the end.

        After this the process is joined and closed and the pipe is closed.
        """
        self.finish_shutdown(self.ask_to_shut_down(), time.monotonic() + timeout)

    def ask_to_shut_down(self) -> Reply | None:
        """Write the ``shutdown`` frame without waiting (``None``: the worker is dead), so
        that a pool's workers all stop their sessions at once; then ``finish_shutdown``."""
        self._closing = True
        if self._dead:
            return None
        try:
            return self.submit("shutdown")
        except Exception:
            return None

    def finish_shutdown(self, asked: Reply | None, deadline: float) -> None:
        """Wait until ``deadline`` for the worker to answer ``asked`` and exit. A worker that
        has not answered by then (a session's ``session_end`` hangs in it, say) is killed at
        once, as one that answered but does not exit is: the host already waited for its
        sessions' stops (``call_timeout``) and must not wait again per worker."""
        answered = False
        if asked is not None:
            with contextlib.suppress(Exception):
                asked.result(max(deadline - time.monotonic(), 0.0))
                answered = True
        if answered:
            self._reader.join(max(deadline - time.monotonic(), 0.0))
        if self._reader.is_alive():
            self.kill()
            self._reader.join(_JOIN_TIMEOUT)

    def _crashed(self, detail: str | None = None) -> WorkerCrashed:
        return WorkerCrashed(self.pid, detail or self.exit_status or "it is not running")

    # -- the reader thread --------------------------------------------------------

    def _read(self) -> None:
        fd = self._fd
        me = self._reader_ident = threading.get_ident()
        try:
            while True:
                if not self._before_poll():
                    break  # the sentinel, while a caller read the pipe
                try:
                    ready = self._epoll.poll()
                except BaseException:
                    with self._pipe_lock:
                        self._polling = False
                    raise
                with self._pipe_lock:  # (at once: with the portable backend no caller
                    self._polling = False  # reads between the poll and this read)
                    if any(ready_fd != fd for ready_fd in ready):
                        break  # the sentinel: drain what the worker wrote, then bury it
                    if self._holder is not None:
                        continue  # a caller read it first; the pipe is out of the set now
                    self._holder = me
                if not self._read_turn(me, _NO_LANE, None):
                    break
            self._drain_pipe(me)
        except Exception:  # pragma: no cover - a bug; never leave calls hanging
            logger.exception("reader of worker pid %s failed", self.pid)
        finally:
            with self._pipe:
                self._ending = True
                self._pipe.wait_for(lambda: self._holder in (None, me))
                self._holder = me
            self._bury(me)

    def _before_poll(self) -> bool:
        """Make the pipe the reader thread's to poll: in its poll set again (a caller that
        read it last put it back already), and, with the portable backend (where nothing
        pauses a poll), read by nobody else while it polls: while a caller reads it, the
        reader thread waits for the sentinel or the caller's hand-over. False: the
        sentinel (the worker is gone)."""
        while True:
            with self._pipe_lock:
                if self._io.shared or self._holder is None:
                    if self._paused and self._holder is None:
                        self._epoll.resume(self._fd)
                        self._paused = False
                    self._polling = True
                    return True
                self._reader_waits = True
            assert self._sentinel_poll is not None
            assert self._wake_fds is not None
            ready = self._sentinel_poll.poll()
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_fds[0], 512):
                    pass
            with self._pipe_lock:
                self._reader_waits = False
            if self.process.sentinel in ready:
                return False

    def _close_wake_fds(self) -> None:
        fds, self._wake_fds = getattr(self, "_wake_fds", None), None
        for fd in fds or ():
            with contextlib.suppress(OSError):
                os.close(fd)

    def _drain_pipe(self, me: int) -> None:
        """The worker is gone: read what it wrote before it went, into the lanes (delivered
        once every call still waiting has been failed: ``_bury``)."""
        with self._pipe:  # nobody else reads from now on
            self._ending = True
            self._wake_holder()
            self._pipe.wait_for(lambda: self._holder is None)
            self._holder = me
        while self._conn.poll():
            try:
                data = read_frame(self._conn)
            except (EOFError, OSError):
                return
            self._dispatch(unpack(data), me, _NO_LANE, deliver=False)

    def _wake_holder(self) -> None:
        """End the reading side of the socket (the worker's process has ended): a caller
        blocked reading it gets what the worker wrote, then the end of the pipe, at once,
        even when the worker's socket is still open elsewhere (a child the worker forked
        inherited it), which would otherwise keep the caller waiting for its timeout."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)

    # -- reading one frame, and handing the pipe on ----------------------------------

    def _read_turn(self, me: int, key: object, deadline: float | None) -> bool:
        """Read one frame (this thread holds the pipe) and dispatch it (``_dispatch``: the
        pipe is handed on before anything is delivered). False at the pipe's end. The reader
        thread reads without a deadline; a caller's read is bounded by the socket's
        receive timeout.

        The wait is a blocking ``read`` on the socket, not a poller: the kernel wakes a
        reader blocked in ``read`` as the synchronous partner of the writer, which a
        waiter in ``epoll_wait`` is not, and on this kind of machine that is ~10 us per
        round trip and lets the scheduler run both ends on one CPU, as it does for a
        plain ``Pipe``. The worker's death ends the read: its socket closes, or the
        reader thread, woken by the process sentinel, shuts the reading side down
        (``_wake_holder``).
        """
        if me != self._reader_ident:
            wait = 0.0  # no receive timeout
            if deadline is not None:
                wait = min(max(deadline - time.monotonic(), 0.0), _READ_SLICE)
            if wait != self._read_timeout:
                self._set_read_timeout(wait)
        try:
            data = read_frame(self._conn)
        except BlockingIOError:
            # No frame within the wait; or, on the reader thread, a caller took the pipe
            # between this thread's wake-up and its read and read the frame that woke it
            # (the receive timeout it left ended this read). Nothing is wrong.
            self._hand_on_pipe()
            return True
        except (EOFError, OSError):
            with self._pipe_lock:
                self._eof = True
            self._hand_on_pipe()
            return False
        except BaseException:
            self._hand_on_pipe()
            raise
        self._dispatch(unpack(data), me, key)
        return True

    def _set_read_timeout(self, seconds: float) -> None:
        """Set the socket's receive timeout (0: none); a blocking ``read`` of a frame's
        start then fails with ``BlockingIOError`` after ``seconds``."""
        whole = int(seconds)
        micros = int((seconds - whole) * 1_000_000)
        if seconds > 0 and not whole and not micros:
            micros = 1  # (0, 0) would mean no timeout at all
        timeval = struct.pack("@ll", whole, micros)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        self._read_timeout = seconds

    def _take_pipe(self) -> bool:
        """Hold the pipe for this thread if nobody reads it and a caller may (``_can_take``)."""
        with self._pipe_lock:
            if not self._can_take():
                return False
            self._take(threading.get_ident())
            return True

    def _can_take(self) -> bool:
        """Whether a caller may read the pipe now (the caller holds ``_pipe_lock``)."""
        return (
            self._holder is None
            and not (self._ending or self._eof or self._dead)
            and (self._io.shared or not self._polling)
        )

    def _take(self, ident: int) -> None:
        """Give the pipe to thread ``ident`` (the caller holds ``_pipe_lock``): out of the
        reader thread's poll set, which does not wake for it meanwhile."""
        self._holder = ident
        if self._io.shared and not self._paused:
            self._epoll.pause(self._fd)
            self._paused = True

    def _hand_on_pipe(self) -> None:
        """Stop holding the pipe (this thread read a frame, or gave up): to a parked waiter
        whose reply is still unread, else to the reader thread (the pipe back in its poll
        set; level-triggered, this wakes it only if a frame waits)."""
        with self._pipe_lock:
            self._hand_on_locked()

    def _hand_on_locked(self) -> None:
        """``_hand_on_pipe``, the caller holding ``_pipe_lock``."""
        self._holder = None
        if self._ending:
            self._pipe.notify_all()  # the reader thread waits to bury the worker
            return
        if self._reader_waits and self._wake_fds is not None:  # (portable backend)
            with contextlib.suppress(OSError):  # (full: a wake-up is pending anyway)
                os.write(self._wake_fds[1], b"w")
        for waiter in self._parked:
            if not waiter.reply._done and waiter.reply._id in self._futures:
                self._parked.remove(waiter)
                self._take(waiter.ident)
                waiter.wake()
                return
        if self._paused:
            self._epoll.resume(self._fd)
            self._paused = False

    # -- a caller waiting for its reply ------------------------------------------------

    def _await(self, reply: Reply, deadline: float | None) -> None:
        """Return once ``reply`` is settled or the deadline passed. Meanwhile this thread
        reads the pipe whenever nobody else does (and delivers what it reads), delivers
        the frames of ``reply``'s session that wait for it (it is delivering that
        session's frames already: a subscriber calling its own session), and otherwise
        sleeps until one of those changes (``Parked``)."""
        me = threading.get_ident()
        key = reply._key if reply._ordered else _NO_LANE
        try:
            while not reply._done:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                step = self._next_step(reply, me)
                if step is None:
                    self._read_turn(me, key, deadline)
                elif isinstance(step, Lane):
                    self._drain(step, reply._key, me)
                else:
                    try:
                        if not reply._done:
                            step.wait(left)
                    finally:
                        self._unpark(step)
        finally:
            self._release_if_held(me)
            if reply._ordered:
                self._pass_on_lane(reply._key)
            # This frame is in the traceback of a save that failed while it delivered the
            # reply (see ``_drain``): kept as its local, the reply made a reference cycle.
            del reply

    def _next_step(self, reply: Reply, me: int) -> Lane | Parked | None:
        """What ``_await`` does next: read the pipe (None: this thread holds it now), deliver
        a lane (this thread owns it now), or sleep (registered as a ``Parked``).

        A thread handed the pipe while it slept reads only if its reply is still unread: a
        reply read by another thread is settled by the thread delivering it, and this one
        would meanwhile block in ``read`` (until a frame or its timeout) instead of waking.
        """
        while True:
            with self._pipe_lock:
                unread = reply._id in self._futures
                if self._holder == me:
                    if unread:
                        return None
                else:
                    lane = self._lanes.get(reply._key) if reply._ordered else None
                    if lane is not None and lane.items and lane.owner in (None, me):
                        self._claim(lane, me)
                        return lane
                    if unread and self._can_take():
                        self._take(me)
                        return None
                    return self._park(reply, me)
            self._hand_on_pipe()  # its reply was read meanwhile: the pipe goes on

    def _park(self, reply: Reply, me: int) -> Parked:
        """Register this thread as waiting for ``reply`` (the caller holds ``_pipe_lock``).
        Its reply's settling, the pipe's hand-over and a frame of its session that waits
        for it wake it (see ``_await``)."""
        parked = Parked(me, reply)
        self._parked.append(parked)
        if reply._parked is None:
            reply._parked = []
        reply._parked.append(parked)
        return parked

    def _unpark(self, parked: Parked) -> None:
        with self._pipe_lock:
            with contextlib.suppress(ValueError):
                self._parked.remove(parked)
            waiters = parked.reply._parked
            if waiters is not None:
                with contextlib.suppress(ValueError):
                    waiters.remove(parked)

    def _pass_on_lane(self, key: str | None) -> None:
        """A thread leaving ``_await`` (its reply settled, or its time up) passes on the frames
        of its session that wait for a deliverer: it may have been woken for them
        (``_wake_lane_waiters``) while it slept, after its reply was settled or its wait ran
        out, and it will not deliver them. Another thread waiting there is woken instead,
        else the helper thread delivers them; left, they waited for the next frame of the
        session (a non-blocking call's completion or a session's ``down`` never came)."""
        if self._lanes.get(key) is None:  # (nothing was queued for it while it slept)
            return
        with self._pipe_lock:
            lane = self._lanes.get(key)
            if lane is None or not lane.items or lane.owner is not None:
                return
            if self._wake_lane_waiters(lane, key):
                return
        self._orphaned()

    def _release_if_held(self, me: int) -> None:
        """Hand the pipe on if this thread holds it (handed over while it stopped waiting)."""
        if self._holder == me:  # (only this thread, not parked now, makes that true or false)
            self._hand_on_pipe()

    # -- delivering frames, in each session's order -------------------------------------

    def _dispatch(
        self, frame: dict[str, Any], me: int, key: object, *, deliver: bool = True
    ) -> None:
        """Put a frame this thread read (it holds the pipe) into its session's lane, hand
        the pipe on, and deliver the lane if this thread should (``_delivers``; the reader
        thread delivers what nobody waits for); else the frame waits in the lane for its
        owner, for the thread waiting for a reply there (woken), or for the helper thread
        (``_orphaned``). ``key``: the lane this thread waits for a reply in, if any.
        ``deliver=False``: the worker is gone and its last frames are queued only
        (``_bury`` delivers them)."""
        lane_key, item = self._item(frame)
        if item is not None and item[1] is not None and not item[1]._ordered:
            if deliver:
                self._hand_on_pipe()
            try:
                self._deliver(*item)  # no order to keep (``_UNORDERED``)
            finally:
                del item  # (as in ``_drain``: this frame may be in a failed call's traceback)
            return
        mine: Lane | None = None
        orphaned = False
        with self._pipe_lock:
            if item is not None:
                lane = self._lanes.get(lane_key)
                if lane is None:
                    lane = self._lanes[lane_key] = Lane()
                lane.items.append(item)
                if not deliver:
                    pass  # (the worker's last frames: ``_bury`` wakes the waiters)
                elif self._delivers(lane, lane_key, me, key):
                    self._claim(lane, me)
                    mine = lane
                elif not self._wake_lane_waiters(lane, lane_key) and lane.owner is None:
                    if me == self._reader_ident and not self._reader_lanes:
                        self._claim(lane, me)  # nobody waits for it: the reader thread
                        mine = lane
                    else:
                        orphaned = True
            if deliver and (mine is not None or me == self._reader_ident):
                # (A caller that delivers nothing reads on: ``_await`` finds it holding.)
                self._hand_on_locked()
        # The lane holds the entry now; kept here, its reply would be in a reference cycle
        # with the error of a save that fails while ``_drain`` delivers it (see ``_drain``).
        del item
        if mine is not None:
            self._drain(mine, lane_key, me)
        elif orphaned:
            self._orphaned()

    def _delivers(self, lane: Lane, lane_key: str | None, me: int, key: object) -> bool:
        """Whether this thread, waiting for a reply in lane ``key``, delivers ``lane`` (in
        which it just put a frame) itself (the caller holds ``_pipe_lock``): only if it is
        that lane, free or its own (then nested, as a session's own thread would answer
        it). Any other lane is left to the thread waiting for a reply in it (woken), else
        to the reader thread when that read the frame, else to the helper thread
        (``_orphaned``).

        A thread never delivers another session's frames while it waits: their callbacks
        (subscribers, a checkpoint's save) would then wait for its own call, and its call
        for them. A subscriber of that session calling back into whatever this thread
        waits for (a session it delivers, a start it waits for on a supervisor's thread)
        would wait for ever, though no session waits for itself; in thread mode each
        session has its own thread. The frames of the caller's own session (its reply,
        its events) are delivered on the caller's thread, as in thread mode a session's
        are on its own."""
        if lane_key != key:
            return False
        return lane.owner is None or lane.owner == me

    def _claim(self, lane: Lane, me: int) -> None:
        """Make this thread ``lane``'s deliverer (the caller holds ``_pipe_lock``)."""
        if not lane.depth:
            self._reader_lanes += me == self._reader_ident
        lane.owner = me
        lane.depth += 1

    def _orphaned(self) -> None:
        """A lane was left without a deliverer: wake the helper thread, which delivers such
        lanes (started the first time one is left, it serves until the worker is gone).
        Left so: a frame nobody waits for (an event pushed, a non-blocking call's reply)
        read by a thread waiting for its own reply while the reader thread is busy; or
        what a thread delivering a lane left in it when it stopped early (an exception
        out of a delivery) or stopped waiting.

        Once the worker is dead too: the reader thread delivers the lanes left at its end
        (``_deliver_leftovers``) and ends, skipping those another thread delivers then.
        Before, a lane that thread left afterwards was never delivered: the pool's report
        of the session's death (never restarted, shown active) and the failures of calls
        written since (a non-blocking one waited out its timeout, or for ever when
        ``call_timeout`` came first). A helper thread started then delivers what is left
        and ends."""
        with self._pipe_lock:
            if self._helper is not None:
                self._orphans.notify()
                return
            helper = self._helper = threading.Thread(
                target=self._help, name=f"sessionvisor-worker-{self.pid}-delivery", daemon=True
            )
        try:
            helper.start()
        except RuntimeError:  # no thread to be had: the reader thread delivers them
            logger.warning("could not start a delivery thread for worker pid %s", self.pid)
            with self._pipe_lock:
                self._helper = None

    def _help(self) -> None:
        """The helper thread: deliver the lanes left without a deliverer, until the worker is
        gone and none is left."""
        me = threading.get_ident()
        while True:
            with self._pipe_lock:
                self._orphans.wait_for(lambda: self._dead or self._orphan() is not None)
                found = self._orphan()
                if found is None:
                    self._helper = None
                    return
                key, lane = found
                self._claim(lane, me)
            self._drain(lane, key, me)

    def _orphan(self) -> tuple[str | None, Lane] | None:
        """A lane with frames and no deliverer (the caller holds ``_pipe_lock``)."""
        waiting = self._lanes.items()
        return next(((k, ln) for k, ln in waiting if ln.owner is None and ln.items), None)

    def _deliver_orphans(self, me: int) -> None:
        """Deliver every lane left without a deliverer, one after the other."""
        while True:
            with self._pipe_lock:
                found = self._orphan()
                if found is None:
                    return
                key, lane = found
                self._claim(lane, me)
            self._drain(lane, key, me)

    def _item(self, frame: dict[str, Any]) -> tuple[str | None, Item | None]:
        """A frame's lane (its session's) and entry; a ``poke`` is answered here instead.
        A reply's call is taken off the table of calls in flight here, as it is read."""
        call_id = frame.get("id")
        future: Reply | None = None
        if call_id is None:
            if frame.get("op") == POKE:  # a session in the worker waits to be woken
                self._poke_back()
                return None, None
        else:
            with self._lock:
                future = self._futures.pop(call_id, None)
                if future is None and self._cut_calls.pop(call_id, None) is not None:
                    return None, None  # failed already (``_cut``): nothing left to deliver
        if future is not None:
            return future._key, (frame, future, None)
        session = frame.get("session")
        return (session if type(session) is str else None), (frame, None, None)

    def _wake_lane_waiters(self, lane: Lane, key: str | None) -> bool:
        """Wake the threads waiting for a reply of ``key`` that may deliver ``lane`` (the
        caller holds ``_pipe_lock``): its owner, or anyone when it has none. True if any.
        A thread whose reply is settled is not one: it leaves without delivering."""
        woken = False
        for waiter in self._parked:
            reply = waiter.reply
            if (
                reply._key == key
                and reply._ordered
                and not reply._done
                and lane.owner in (None, waiter.ident)
            ):
                waiter.wake()
                woken = True
        return woken

    def _drain(self, lane: Lane, key: str | None, me: int) -> None:
        """Deliver ``lane``'s entries in order until it is empty (this thread owns it)."""
        left = False
        try:
            while True:
                with self._pipe_lock:
                    if not lane.items:
                        self._leave(lane, key, me)
                        left = True
                        return
                    frame, future, fn = lane.items.popleft()
                try:
                    self._deliver(frame, future, fn)
                finally:
                    del future  # (as in ``_deliver_entry``: in a failed save's traceback)
        finally:
            if not left:  # an exception: entries may be left, for another deliverer
                with self._pipe_lock:
                    orphaned = self._leave(lane, key, me)
                if orphaned:
                    self._orphaned()

    def _leave(self, lane: Lane, key: str | None, me: int) -> bool:
        """This thread stops delivering ``lane`` (the caller holds ``_pipe_lock``); the lane
        is forgotten once nobody delivers it and it is empty. True if entries are left that
        no waiting thread takes (``_orphaned``)."""
        lane.depth -= 1
        if lane.depth:
            return False
        lane.owner = None
        self._reader_lanes -= me == self._reader_ident
        if not lane.items:
            if self._lanes.get(key) is lane:
                del self._lanes[key]
            return False
        return not self._wake_lane_waiters(lane, key)

    def _fail(self, future: Reply, error: BaseException) -> None:
        """Fail a call the worker will not answer (it is dead), after the frames of its
        session still being delivered if it is ordered: a stop must not be seen over
        before the session's last turn is saved."""
        if future._ordered:
            self._after_lane(future._key, functools.partial(future._settle, None, error))
        else:
            future._settle(None, error)

    def _after_lane(self, key: str | None, fn: Callable[[], None]) -> None:
        """Run ``fn`` after the frames of ``key`` still to be delivered, or now if none."""
        with self._pipe_lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.items.append((None, None, fn))
                self._wake_lane_waiters(lane, key)
                return
        fn()

    def _deliver(
        self,
        frame: dict[str, Any] | None,
        future: Reply | None,
        fn: Callable[[], None] | None,
    ) -> None:
        """Deliver one lane entry (``_deliver_entry``). On the reader or helper thread nothing
        it raises goes further: it is logged and the thread goes on. Before, a
        ``BaseException`` ended the reader thread (the worker was then killed: every session
        of it crashed) or the helper thread (lanes left later waited for the worker's death).
        On a caller's thread it is raised on, as the call's own exception would be."""
        try:
            self._deliver_entry(frame, future, fn)
        except BaseException:
            current = threading.current_thread()
            if current is not self._reader and current is not self._helper:
                raise
            logger.exception("delivering a frame of worker pid %s failed", self.pid)
        finally:
            del future  # (as in ``_deliver_entry``: this frame is in a failed save's traceback)

    def _deliver_entry(
        self,
        frame: dict[str, Any] | None,
        future: Reply | None,
        fn: Callable[[], None] | None,
    ) -> None:
        """Deliver one lane entry: a pushed frame, a reply (its events first), or ``fn``.

        A subscriber that ends its session (``_push``) fails the reply whose events it was
        handed with ``SessionDown``: the reply is not delivered (no checkpoint of the turn
        is saved), as in thread mode, where the exit ends the turn before its save. Events
        a call wrote ahead of its reply (an ``events`` frame naming the call) fail that call
        so too (``_cut``), whether its reply is read already or not."""
        if fn is not None:
            try:
                fn()
            except Exception:
                logger.exception("handling the death of worker pid %s failed", self.pid)
            return
        if frame is None:  # pragma: no cover - entries hold a frame or a function
            return
        if frame.get("id") is None:
            if frame.get("op") == "ready":
                self.ready = True
                self._settled.set()
            ended = self._push(frame)
            if ended is not None:
                self._cut(frame.get("call"), ended)
            return
        if future is not None and self._cut_off(future):
            return
        if "events" in frame:  # events the call published, before its reply
            _hold_turn_finished(frame)
            ended = self._push(frame)
            if ended is not None:
                if future is not None:
                    future._settle(None, ended)
                return
        if future is None:
            return  # a late reply to a call already failed
        try:
            if frame.get("ok"):
                future._deliver(frame.get("payload"))
            else:
                future._settle(None, decode_error(frame.get("error") or {}))
        finally:
            # This frame is in the traceback of what ``on_reply`` raised (see
            # ``Reply._deliver``): kept as its local, the reply made a reference cycle.
            del future

    def _cut(self, call_id: object, error: SessionDown) -> None:
        """Fail call ``call_id`` with ``error`` now: a subscriber ended its session on events
        the call wrote ahead of its reply (``None``: they came from no call). Its reply is
        not delivered, whichever order it comes in: still unread, it is dropped when read
        (``_item``); read already, it waits in the session's lane behind the frame being
        delivered, and is failed instead of delivered (``_cut_off``). Before, that reply
        was handed out as a success, its turn saved, although the session had ended."""
        if type(call_id) is not int:
            return
        with self._lock:
            future = self._futures.pop(call_id, None)
            self._cut_calls[call_id] = error
        if future is not None:
            future._settle(None, error)

    def _cut_off(self, future: Reply) -> bool:
        """Fail ``future``, whose reply is being delivered, if ``_cut`` marked it (True)."""
        if not self._cut_calls:  # (the usual case: no lock taken)
            return False
        with self._lock:
            error = self._cut_calls.pop(future._id, None) if future._id is not None else None
        if error is None:
            return False
        future._settle(None, error)
        return True

    def _poke_back(self) -> None:
        """Answer the worker's ``poke``: the frame ends a session's read of its pipe."""
        if self._dead:
            return
        with self._write_lock:
            try:  # noqa: SIM105 (as in ``_write``)
                write_frame(self._conn, _POKE)
            except OSError:
                pass  # the worker died (the reader buries it), or was buried

    def _push(self, frame: dict[str, Any]) -> SessionDown | None:
        """Hand ``frame`` to ``on_push``. What that raises never goes further: an
        ``Exception`` is logged; any other ``BaseException`` (an event subscriber's
        ``SystemExit``: ``EventBuffer`` raises only those that end a session) ends the
        frame's session alone, as in thread mode (``end_session``), and the ``SessionDown``
        a call of that session then fails with is returned."""
        try:
            self._on_push(self, frame)
        except Exception:
            logger.exception("handling %r from worker pid %s failed", frame.get("op"), self.pid)
        except BaseException as exc:
            session = frame.get("session")
            return self.end_session(session if type(session) is str else None, exc)
        return None

    def end_session(self, session_id: str | None, exc: BaseException) -> SessionDown:
        """``exc`` (a ``SystemExit``, say), raised on the host's side while a frame of
        ``session_id`` was delivered, ends that session alone, as it would on its own thread
        in thread mode: ``on_push`` gets a ``down`` of it (the pool crashes its proxy, the
        supervisor restarts it from its last checkpoint). Returns the error the call being
        delivered fails with (``SessionDown`` of a call that ran, caused by ``exc``).

        Never raises: it runs on whichever thread delivers the session's frames (the
        reader thread too, which must not end before the worker does)."""
        reason = f"{exc!r} raised on the host delivering its frames"
        logger.error(
            "%s, delivering a frame of session %r from worker pid %s: ending that session",
            repr(exc),
            session_id,
            self.pid,
            exc_info=exc,
        )
        down = SessionDown(reason, started=True)
        down.__cause__ = exc
        if session_id is not None:
            try:
                down_frame = {"op": "down", "session": session_id, "reason": reason, "host": True}
                self._on_push(self, down_frame)
            except BaseException:
                logger.exception("ending session %r failed", session_id)
        return down

    def _bury(self, me: int) -> None:
        """The worker is gone: reap it, fail what was in flight, close the pipe, tell the
        pool, deliver what nobody else delivers. Each session's failures come after the
        frames of that session still being delivered (a stop is not seen over before the
        session's last checkpoint is saved), as does its death (``after_delivered``)."""
        self.process.join(_JOIN_TIMEOUT)
        if self.process.exitcode is None:  # EOF without exit (should not happen): make sure
            self.kill()
            self.process.join(_JOIN_TIMEOUT)
        self.exitcode = self.process.exitcode
        self.exit_status = describe_exit(self.exitcode)
        with self._lock:
            self._dead = True
            futures, self._futures = self._futures, {}
        crashed = self._crashed()
        for future in futures.values():
            self._fail(future, crashed)
        self._settled.set()
        with contextlib.suppress(OSError):  # a write blocked on a pipe that a child of the
            self._sock.shutdown(socket.SHUT_RDWR)  # worker keeps open fails now
        with self._write_lock:  # no write is under way, and none starts on its fd again
            self._conn.close()
        self._epoll.close()
        if self._sentinel_poll is not None:
            self._sentinel_poll.close()
        self._close_wake_fds()
        self._sock.close()
        with contextlib.suppress(ValueError):
            self.process.close()
        if not self._closing:
            logger.warning(
                "worker pid %s died: %s",
                self.pid,
                self.exit_status,
                extra={"worker_pid": self.pid},
            )
        try:
            self._on_death(self)
        except Exception:
            logger.exception("death handler of worker pid %s failed", self.pid)
        self._deliver_leftovers(me)

    def _deliver_leftovers(self, me: int) -> None:
        """Deliver the lanes nobody delivers (the worker's last frames, read by this thread
        at its end), one after the other. A thread waiting for a reply in one of them may
        take it first (they are all woken): a callback of one lane may wait for another."""
        with self._pipe_lock:
            for waiter in self._parked:
                waiter.wake()
            self._orphans.notify_all()  # the helper thread ends
        self._deliver_orphans(me)


def _nonblocking_pipe() -> tuple[int, int]:
    """A pipe whose ends neither read nor write blocks (a wake-up: one byte is enough)."""
    fds = os.pipe()
    for fd in fds:
        os.set_blocking(fd, False)
    return fds


def _hold_turn_finished(frame: dict[str, Any]) -> None:
    """Keep a turn's ``turn_finished`` out of the events published with its reply when the
    reply carries a checkpoint for the host to save: it moves into the payload
    (``"turn_finished"``), and ``SessionLink.finish_send`` publishes it once the save is
    done. A turn whose save fails then has an ``error`` and no ``turn_finished``, as in
    thread mode (metrics counted it as finished and failed, tracing as a success, and a
    streamed send could end on it)."""
    payload = frame.get("payload")
    events = frame.get("events")
    if not (
        frame.get("ok")
        and isinstance(payload, dict)
        and payload.get("checkpoint") is not None
        and isinstance(events, list)
        and events
    ):
        return
    last = events[-1]
    kind, data = last if type(last) is list and len(last) == 2 else (None, None)
    if kind == "turn_finished" and type(data) is dict:
        payload["turn_finished"] = data
        frame["events"] = events[:-1]
