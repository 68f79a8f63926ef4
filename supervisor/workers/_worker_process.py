"""The worker process's entry point: ``worker_main`` and what it applies before it serves.

``worker_main`` is the process target (``WorkerClient`` starts it). It applies
the ``WorkerSetup`` the host sent (switch interval, memory limit, the host's
``worker_initializer``), serves the pipe (``WorkerServer``) until ``shutdown``
or the pipe's end, and leaves behind threads that did not stop.

The worker is split by concern: ``_worker_server`` routes frames and starts and
stops sessions, ``_remote_session`` is a session actor answering its calls,
``_frame_writer`` writes replies and events, ``_hosted_session`` is what the
worker keeps of each session, and ``_worker_pipe`` reads the pipe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

import cloudpickle

from supervisor.tuning import Scheduling
from supervisor.workers._io import named as io_named
from supervisor.workers._memory_limit import apply_memory_limit
from supervisor.workers._worker_server import WorkerServer

__all__ = ["EXIT_GRACE", "WorkerSetup", "worker_main"]

logger = logging.getLogger("supervisor.workers")

EXIT_GRACE = 2.0
"""Seconds a worker that stopped its sessions waits for its remaining threads before it
exits without them (see ``_leave_stuck_threads``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSetup:
    """What a worker applies before it serves (sent with the process, once).

    Attributes:
        memory_limit: RLIMIT_AS in bytes, or ``None``.
        initializer: cloudpickle bytes of ``(fn, args)``: the host's
            ``worker_initializer`` and ``worker_initargs``, or ``None``.
        io: The name of the pipe backend (``supervisor.workers._io``), the
            parent's: both ends of a pipe read it the same way.
        switch_interval: The interpreter's switch interval (``sys.setswitchinterval``)
            in the host's process when it made its workers, or ``None`` for Python's
            own: a worker's session threads are tuned as the host's are.
        scheduling: How the worker's threads run, or ``None`` to keep what it inherits:
            as the host's process ran before it was pinned to one CPU
            (``supervisor.tuning.pin_to_one_cpu``), on which a worker, a GIL of its
            own, would otherwise share the host's CPU.
    """

    memory_limit: int | None = None
    initializer: bytes | None = None
    io: str = "auto"
    switch_interval: float | None = None
    scheduling: Scheduling | None = None


def worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """Process target: apply ``setup``, serve the pipe until ``shutdown`` or EOF.

    A worker ignores SIGINT. Ctrl-C in a terminal signals the whole foreground
    process group, workers included; the host handles it (``KeyboardInterrupt``
    ends its ``with`` block) and its shutdown needs the workers alive to take
    the sessions' final checkpoints. A worker whose parent is gone exits on EOF,
    after stopping its sessions with reason ``HOST_LOST``.

    An initializer that raises ends the worker before it serves (the parent
    raises ``WorkerStartError``); its traceback goes to stderr.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if setup.scheduling is not None:  # before any thread of its own starts: they inherit it
        setup.scheduling.apply(0)
    if setup.switch_interval is not None:
        sys.setswitchinterval(setup.switch_interval)
    if setup.memory_limit is not None:
        apply_memory_limit(setup.memory_limit)
    if setup.initializer is not None:
        initializer, args = cloudpickle.loads(setup.initializer)
        initializer(*args)
    WorkerServer(conn, io_named(setup.io), setup.memory_limit).run()
    _leave_stuck_threads(EXIT_GRACE)


def _leave_stuck_threads(grace: float) -> None:
    """End the process at once if a thread of it has not ended within ``grace`` seconds.

    multiprocessing joins every non-daemon thread before a process exits, so a
    session thread stuck in a tool or a ``session_end`` hook that never returns (its
    stop was already waited for, and given up) would keep the worker alive for ever,
    and a worker whose host was killed would never exit. What is left is abandoned,
    as a host abandons a session thread that does not stop.
    """
    deadline = time.monotonic() + grace
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join(max(deadline - time.monotonic(), 0.0))
    stuck = [t.name for t in threading.enumerate() if t is not me and t.is_alive() and not t.daemon]
    if not stuck:
        return  # the usual end: multiprocessing's own exit
    logger.warning("worker pid %s exits leaving threads that did not stop: %s", os.getpid(), stuck)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)
