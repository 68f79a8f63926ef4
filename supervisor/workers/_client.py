"""``WorkerClient``: the parent's end of one worker process.

Calls are multiplexed over the worker's pipe: each gets a request id and a
``Reply`` (a one-shot, lock-based future); frames are matched to replies by id,
and unsolicited pushes (events, session downs) go to a callback. The reader
thread waits on the pipe *and* the process sentinel together (one ``epoll``
object kept for the worker's life), so a worker's death is noticed at once,
without polling: every call still in flight then fails with ``WorkerCrashed``
naming the pid and the exit code or signal, and the death callback runs.

A caller waiting for its reply reads the pipe itself when no other thread is
reading it (``wait``; ``ask`` takes the pipe before it even writes the
request): it takes the pipe out of the reader thread's ``epoll`` set, reads
and delivers frames (anyone's) until its own reply is in, and puts the pipe
back. The reader thread is not woken at all, so an uncontended call
costs no thread hand-off in this process; with several callers, one reads and
the others are handed their replies as before. Frames are read and delivered by
one thread at a time, in order.

Why not ``concurrent.futures.Future`` and ``multiprocessing.connection.wait``:
a ``send`` round trip is a handful of pipe writes and thread wake-ups, and on
a small machine the Python work the reader does between handing over a reply
and blocking again delays the woken caller (it needs the GIL). A ``Future``
(condition variable, waiter lists) and a selector built per ``wait`` call cost
about 60 us per round trip there; a pre-acquired lock released by the reader
and a persistent poll object cost a few.
"""

from __future__ import annotations

import contextlib
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
from supervisor.workers._io import DEFAULT, PipeIO
from supervisor.workers._memory_limit import MEMORY_EXIT
from supervisor.workers._protocol import POKE, decode_error, pack, unpack
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

Push = Callable[["WorkerClient", dict[str, Any]], None]
Death = Callable[["WorkerClient"], None]


class Reply:
    """The reply to one call: settled once, by the reader thread (or at the worker's death).

    Thread-safe. Any number of threads may wait in ``result``. The waiting is a
    lock the constructor acquires and ``_settle`` releases: the cheapest wake-up
    CPython has. ``on_done``, if given, is called with the reply once it is
    settled, on the settling thread (a non-blocking call's completion: nobody waits).
    """

    __slots__ = ("_done", "_error", "_gate", "_on_done", "_on_reply", "_value")

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

    def done(self) -> bool:
        """True once the reply (or the failure) is in."""
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The reply payload; raises the call's error, or ``TimeoutError`` after ``timeout``."""
        if not self._done:
            if not self._gate.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
                raise TimeoutError(f"no reply within {timeout} s")
            self._gate.release()  # let any other waiter through too
        if self._error is not None:
            raise self._error
        return self._value

    def _deliver(self, value: Any) -> None:
        """Settle with a successful reply's payload, passed through ``on_reply`` first."""
        on_reply = self._on_reply
        if on_reply is None:
            self._settle(value, None)
            return
        try:
            result = on_reply(value)
        except Exception as exc:
            self._settle(None, exc)
        else:
            self._settle(result, None)

    def _settle(self, value: Any, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done = True
        self._gate.release()
        on_done = self._on_done
        if on_done is not None:
            try:
                on_done(self)
            except Exception:
                logger.exception("a reply's completion handler failed")


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
    delivered, and ``on_push`` (events, downs) runs, on whichever thread reads
    the pipe: the reader thread, or a caller in ``wait``. ``on_death`` runs
    once, on the reader thread.

    Args:
        context: The multiprocessing context (``forkserver`` or ``spawn``).
        on_push: Called with every unsolicited frame, in the pipe's order, and with
            every reply that carries its call's events (``"events"``), before the
            reply is delivered.
        on_death: Called once on the reader thread when the worker has died or
            was shut down, after every in-flight call has failed.
        setup: What the worker applies before it serves (memory limit, initializer).
        io: The pipe backend (``supervisor.workers._io``): with a shared one, a
            caller in ``wait`` reads the pipe itself; else only the reader thread does.
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
        self._dead = False
        self._closing = False
        # Who reads the pipe: ``_holder`` is the ident of the thread reading it
        # (the reader thread for one frame at a time, or a caller in ``wait``),
        # or None. A caller takes the pipe out of ``_epoll`` while it reads.
        # ``_pipe_lock`` guards _holder, _depth, _ending and _epoll changes; ``_pipe`` (on
        # it) is waited on only by the reader thread once ``_ending``, so a caller stepping
        # down notifies it only then.
        self._pipe_lock = threading.Lock()
        self._pipe = threading.Condition(self._pipe_lock)
        self._fd = parent_conn.fileno()
        self._holder: int | None = None
        self._depth = 0  # nested ``wait``s of the holding caller (a callback that calls)
        self._ending = False  # the reader is burying the worker: nobody else reads
        # The reader thread's wait: pipe and sentinel. With a shared backend a caller
        # pauses the pipe in it while the caller reads.
        self._io = io
        self._read_timeout = -1.0  # the socket's SO_RCVTIMEO, in seconds (0: none)
        try:
            self._epoll = io.poller(parent_conn.fileno(), process.sentinel)
            # The holding thread's own wait (a caller's, or the reader thread's when a
            # callback it runs while delivering calls the worker again): a blocking ``read``
            # on the socket itself, bounded by its receive timeout (see ``_read_until``).
            self._sock = socket.socket(fileno=os.dup(self._fd))  # a socket pair (POSIX)
            self._reader = threading.Thread(
                target=self._read, name=f"sessionvisor-worker-{self.pid}-reader", daemon=True
            )
            self._reader.start()
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Undo a start whose reading side could not be set up (no file descriptor or thread
        left): kill and reap the worker, close what was opened for it. Left running, it
        would wait on its pipe for ever, which stayed open here."""
        self.kill()
        with contextlib.suppress(Exception):
            self.process.join(_JOIN_TIMEOUT)
        for opened in ("_epoll", "_sock"):
            resource = getattr(self, opened, None)
            if resource is not None:
                with contextlib.suppress(OSError):
                    resource.close()
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
        ``Reply``'s value on the thread that reads the reply, before any waiter
        sees it and before later frames (a death included) are handled; what it
        raises becomes the ``Reply``'s error. It runs even when nobody waits any
        more (the caller timed out). ``on_done``, if given, gets the settled
        ``Reply`` on the same thread, right after (or on this one, if the worker
        is dead already).
        """
        call_id = next(self._ids)  # atomic; replies are matched by id, not by order
        data = pack({"id": call_id, "op": op, "payload": payload})
        return self._write(call_id, data, Reply(on_reply, on_done))

    def ask(
        self,
        op: str,
        payload: Any = None,
        on_reply: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """``submit``, then read the pipe on this thread (as ``wait`` does) until the reply
        is in or ``timeout`` passes; returns the ``Reply``, settled unless the time ran
        out or another thread was reading the pipe (``wait`` for it then). Any thread.

        Unlike ``submit`` then ``wait``, this takes the pipe *before* it writes the
        request: the reply cannot then be read by the reader thread, which would hand
        it over (a thread switch dearer than the round trip's own work) whenever this
        thread lost the processor between writing and taking the pipe, as it does when
        the woken worker preempts it. A request too large to go into the socket's
        buffer at once (``_LEAD_LIMIT``) is written first, as ``submit`` does: while a
        write blocks, the reader thread must stay free to read what the worker writes.
        """
        call_id = next(self._ids)
        data = pack({"id": call_id, "op": op, "payload": payload})
        if len(data) > _LEAD_LIMIT or not self._lead():
            return self._write(call_id, data, Reply(on_reply))
        try:
            reply = self._write(call_id, data, Reply(on_reply))
            self._read_until(reply, None if timeout is None else time.monotonic() + timeout)
        finally:
            self._step_down()
        return reply

    def _write(self, call_id: int, data: bytes, future: Reply) -> Reply:
        """Register ``future`` as the reply of request ``call_id`` and write the request."""
        with self._lock:
            dead = self._dead
            if not dead:
                self._futures[call_id] = future
        if dead:  # settled outside the lock: its ``on_done`` may submit again
            future._settle(None, self._crashed())
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

    def wait(self, reply: Reply, timeout: float | None = None) -> Any:
        """``reply.result(timeout)``, reading the pipe on this thread while no other thread is.

        Raises what ``Reply.result`` raises.
        """
        if reply._done:
            return reply.result()
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._lead():
            try:
                self._read_until(reply, deadline)
            finally:
                self._step_down()
        if deadline is None:
            return reply.result()
        try:
            return reply.result(max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            if reply.done():
                raise  # the error *is* the reply
            raise TimeoutError(f"no reply within {timeout} s") from None

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
        fd = self._conn.fileno()
        me = threading.get_ident()
        try:
            while True:
                ready = self._epoll.poll()
                if any(ready_fd != fd for ready_fd in ready):
                    break  # the sentinel: drain what the worker wrote, then bury it
                with self._pipe:
                    if self._holder is not None:
                        continue  # a caller read it first; the pipe is out of the set now
                    self._holder, self._depth = me, 1
                try:
                    if not self._read_one():
                        break
                except BlockingIOError:
                    # A caller took the pipe between this thread's wake-up and its read, and
                    # read the frame that woke it; the receive timeout it left ended this
                    # read. Nothing is wrong: wait for the next frame.
                    pass
                finally:
                    with self._pipe:
                        self._holder, self._depth = None, 0
                        self._pipe.notify_all()
            with self._pipe:  # nobody else reads from now on
                self._ending = True
                self._wake_holder()
                self._pipe.wait_for(lambda: self._holder is None)
                self._holder, self._depth = me, 1
            while self._conn.poll() and self._read_one():
                pass
        except Exception:  # pragma: no cover - a bug; never leave calls hanging
            logger.exception("reader of worker pid %s failed", self.pid)
        finally:
            with self._pipe:
                self._ending = True
                self._pipe.wait_for(lambda: self._holder in (None, me))
            self._bury()

    def _wake_holder(self) -> None:
        """End the reading side of the socket (the worker's process has ended): a caller
        blocked reading it gets what the worker wrote, then the end of the pipe, at once,
        even when the worker's socket is still open elsewhere (a child the worker forked
        inherited it), which would otherwise keep the caller waiting for its timeout."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)

    def _read_one(self) -> bool:
        """Read and deliver one frame (the caller holds the pipe); False at the pipe's end.

        Raises:
            BlockingIOError: no frame began within the socket's receive timeout.
        """
        try:
            data = read_frame(self._conn)
        except BlockingIOError:
            raise  # a bounded read by a caller timed out: not the pipe's end
        except (EOFError, OSError):
            return False
        self._deliver(unpack(data))
        return True

    # -- a caller reading its own reply ---------------------------------------------

    def _lead(self) -> bool:
        """Hold the pipe for this thread if nobody else does (again, if it already does)."""
        me = threading.get_ident()
        with self._pipe_lock:
            if self._holder == me:
                self._depth += 1  # a callback run by this thread's delivery waits in turn
                return True
            if not self._io.shared or self._holder is not None or self._ending or self._dead:
                return False
            self._holder = me
            self._depth = 1
            self._epoll.pause(self._fd)  # the reader thread stays asleep
            return True

    def _step_down(self) -> None:
        with self._pipe_lock:
            self._depth -= 1
            if self._depth:
                return
            self._holder = None
            if self._ending:
                self._pipe.notify_all()  # the reader thread waits to bury the worker
            else:
                # Level-triggered: this wakes the reader thread only if a frame waits.
                self._epoll.resume(self._fd)

    def _read_until(self, reply: Reply, deadline: float | None) -> None:
        """Deliver frames until ``reply`` is settled, the deadline passes, or the pipe ends
        (the reader thread then buries the worker, which settles ``reply``).

        The wait is a blocking ``read`` on the socket, bounded by its receive timeout,
        not a poller: the kernel wakes a reader blocked in ``read`` as the synchronous
        partner of the writer, which a waiter in ``epoll_wait`` is not, and on this
        kind of machine that is ~10 us per round trip and lets the scheduler run both
        ends on one CPU, as it does for a plain ``Pipe``. The worker's death ends the
        read: its socket closes, or the reader thread, woken by the process sentinel,
        shuts the reading side down (``_wake_holder``).
        """
        while not reply._done:
            if deadline is None:
                wait = 0.0  # no receive timeout
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                wait = min(left, _READ_SLICE)
            if wait != self._read_timeout:
                self._set_read_timeout(wait)
            try:
                if not self._read_one():
                    return
            except BlockingIOError:
                continue  # no frame within ``wait``: look at the deadline again
            except Exception:  # pragma: no cover - a bug; never leave calls hanging
                logger.exception("reading worker pid %s failed; killing it", self.pid)
                self.kill()
                return

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

    def _deliver(self, frame: dict[str, Any]) -> None:
        call_id = frame.get("id")
        if call_id is None:
            if frame.get("op") == POKE:  # a session in the worker waits to be woken
                self._poke_back()
                return
            if frame.get("op") == "ready":
                self.ready = True
                self._settled.set()
            self._push(frame)
            return
        if "events" in frame:  # events the call published, before its reply
            _hold_turn_finished(frame)
            self._push(frame)
        with self._lock:
            future = self._futures.pop(call_id, None)
        if future is None:
            return  # a late reply to a call already failed
        if frame.get("ok"):
            future._deliver(frame.get("payload"))
        else:
            future._settle(None, decode_error(frame.get("error") or {}))

    def _poke_back(self) -> None:
        """Answer the worker's ``poke``: the frame ends a session's read of its pipe."""
        if self._dead:
            return
        with self._write_lock:
            try:  # noqa: SIM105 (as in ``_write``)
                write_frame(self._conn, _POKE)
            except OSError:
                pass  # the worker died (the reader buries it), or was buried

    def _push(self, frame: dict[str, Any]) -> None:
        try:
            self._on_push(self, frame)
        except Exception:
            logger.exception("handling %r from worker pid %s failed", frame.get("op"), self.pid)

    def _bury(self) -> None:
        """The worker is gone: reap it, fail what was in flight, close the pipe, tell the pool."""
        self.process.join(_JOIN_TIMEOUT)
        if self.process.exitcode is None:  # EOF without exit (should not happen): make sure
            self.kill()
            self.process.join(_JOIN_TIMEOUT)
        self.exitcode = self.process.exitcode
        self.exit_status = describe_exit(self.exitcode)
        with self._lock:
            self._dead = True
            futures, self._futures = self._futures, {}
        for future in futures.values():
            future._settle(None, self._crashed())
        self._settled.set()
        with contextlib.suppress(OSError):  # a write blocked on a pipe that a child of the
            self._sock.shutdown(socket.SHUT_RDWR)  # worker keeps open fails now
        with self._write_lock:  # no write is under way, and none starts on its fd again
            self._conn.close()
        self._epoll.close()
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
