"""``WorkerClient``: the parent's end of one worker process.

Calls are multiplexed over the worker's pipe: each gets a request id and a
future; one reader thread per worker matches replies to futures and hands
unsolicited pushes (events, session downs) to a callback. The reader waits on
the pipe *and* the process sentinel together (``multiprocessing.connection.wait``),
so a worker's death is noticed at once, without polling: every call still in
flight then fails with ``WorkerCrashed`` naming the pid and the exit code or
signal, and the death callback runs.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from supervisor.errors import WorkerCrashed
from supervisor.workers._protocol import decode_error, pack, unpack
from supervisor.workers._worker import MEMORY_EXIT, worker_main

__all__ = ["WorkerClient", "describe_exit"]

logger = logging.getLogger("supervisor.workers")

_JOIN_TIMEOUT = 5.0

Push = Callable[["WorkerClient", dict[str, Any]], None]
Death = Callable[["WorkerClient"], None]


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

    Thread-safe: any thread may ``call``; replies are delivered by the reader
    thread, which also runs ``on_push`` (events, downs) and, once, ``on_death``.

    Args:
        context: The multiprocessing context (``forkserver`` or ``spawn``).
        on_push: Called on the reader thread with every unsolicited frame.
        on_death: Called once on the reader thread when the worker has died or
            was shut down, after every in-flight call has failed.
        memory_limit: RLIMIT_AS of the worker in bytes, or ``None``.
    """

    def __init__(
        self,
        context: BaseContext,
        on_push: Push,
        on_death: Death,
        memory_limit: int | None = None,
    ) -> None:
        parent_conn, child_conn = context.Pipe(duplex=True)
        self._conn: Connection = parent_conn
        process: BaseProcess = context.Process(  # type: ignore[attr-defined]
            target=worker_main,
            args=(child_conn, memory_limit),
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
        self.templates: set[str] = set()  # keys loaded in this worker (guarded by the pool)
        self.sessions = 0  # sessions placed here (guarded by the pool)
        self._on_push = on_push
        self._on_death = on_death
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _futures, _dead and writes to the pipe
        self._futures: dict[int, Future[Any]] = {}
        self._dead = False
        self._closing = False
        self._reader = threading.Thread(
            target=self._read, name=f"sessionvisor-worker-{self.pid}-reader", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        """False once the worker is known dead (or shut down)."""
        return not self._dead

    def submit(self, op: str, payload: Any = None) -> Future[Any]:
        """Send a request; the future gets its reply payload or exception."""
        future: Future[Any] = Future()
        with self._lock:
            if self._dead:
                future.set_exception(self._crashed())
                return future
            call_id = next(self._ids)
            self._futures[call_id] = future
            # A broken pipe means the worker died: the reader fails this future
            # with its exit status when it buries it (it takes this lock first).
            with contextlib.suppress(OSError):
                self._conn.send_bytes(pack({"id": call_id, "op": op, "payload": payload}))
        return future

    def call(self, op: str, payload: Any = None, timeout: float | None = None) -> Any:
        """Send a request and wait for its reply.

        Raises:
            WorkerCrashed: the worker died before answering (or was dead).
            TimeoutError: no reply within ``timeout``; the worker is SIGKILLed
                (a stuck worker is replaced), so the call fails with WorkerCrashed
                right after unless the reply won the race.
            Exception: what the operation raised in the worker (see
                ``_protocol.decode_error``).
        """
        future = self.submit(op, payload)
        try:
            return future.result(timeout)
        except FutureTimeout:
            logger.error(
                "worker pid %s did not answer %r within %s s; killing it", self.pid, op, timeout
            )
            self.kill()
            return future.result(_JOIN_TIMEOUT)

    def kill(self) -> None:
        """SIGKILL the worker (its death is then handled like any other). Idempotent."""
        with contextlib.suppress(Exception):
            self.process.kill()

    def shutdown(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Ask the worker to stop its sessions and exit; kill it if it does not; wait for the end.

        After this the process is joined and closed and the pipe is closed.
        """
        self._closing = True
        if not self._dead:
            with contextlib.suppress(Exception):
                self.submit("shutdown").result(timeout)
        self._reader.join(timeout)
        if self._reader.is_alive():
            self.kill()
            self._reader.join(_JOIN_TIMEOUT)

    def _crashed(self, detail: str | None = None) -> WorkerCrashed:
        return WorkerCrashed(self.pid, detail or self.exit_status or "it is not running")

    # -- the reader thread --------------------------------------------------------

    def _read(self) -> None:
        conn, sentinel = self._conn, self.process.sentinel
        try:
            while True:
                ready = wait([conn, sentinel])
                if conn not in ready and sentinel in ready:
                    break  # died with nothing left to read
                try:
                    data = conn.recv_bytes()
                except (EOFError, OSError):
                    break
                self._deliver(unpack(data))
        except Exception:  # pragma: no cover - a bug; never leave calls hanging
            logger.exception("reader of worker pid %s failed", self.pid)
        finally:
            self._bury()

    def _deliver(self, frame: dict[str, Any]) -> None:
        call_id = frame.get("id")
        if call_id is None:
            try:
                self._on_push(self, frame)
            except Exception:
                logger.exception("handling %r from worker pid %s failed", frame.get("op"), self.pid)
            return
        with self._lock:
            future = self._futures.pop(call_id, None)
        if future is None:
            return  # a late reply to a call already failed
        if frame.get("ok"):
            future.set_result(frame.get("payload"))
        else:
            future.set_exception(decode_error(frame.get("error") or {}))

    def _bury(self) -> None:
        """The worker is gone: reap it, fail what was in flight, close the pipe, tell the pool."""
        self.process.join(_JOIN_TIMEOUT)
        if self.process.exitcode is None:  # EOF without exit (should not happen): make sure
            self.kill()
            self.process.join(_JOIN_TIMEOUT)
        self.exit_status = describe_exit(self.process.exitcode)
        with self._lock:
            self._dead = True
            futures, self._futures = self._futures, {}
        for future in futures.values():
            future.set_exception(self._crashed())
        self._conn.close()
        with contextlib.suppress(ValueError):
            self.process.close()
        if not self._closing:
            logger.warning("worker pid %s died: %s", self.pid, self.exit_status)
        try:
            self._on_death(self)
        except Exception:
            logger.exception("death handler of worker pid %s failed", self.pid)
