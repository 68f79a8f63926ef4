"""Choosing an ``AgentHost``'s ``SessionRuntime`` from its constructor's options, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from supervisor._runtime import SessionRuntime
from supervisor._session_threads import DEFAULT_PARKED_THREADS, SessionThreads
from supervisor._thread_runtime import ThreadRuntime
from supervisor.workers import WorkerPool, WorkerRuntime

__all__ = ["WorkerOptions", "runtime_for"]


class WorkerOptions(TypedDict, total=False):
    """``AgentHost``'s options for its worker processes (with ``workers=N``; an error without).

    Keys:
        worker_memory_limit: RLIMIT_AS of each worker in bytes (address space, not
            resident memory: each session's thread reserves its stack, about 10 MiB
            per session); a tool allocating past it kills its worker (its sessions
            are resumed).
        worker_initializer: Called with ``*worker_initargs`` in each worker process,
            replacements included, before it hosts any session: set up logging,
            environment, caches (like ``ProcessPoolExecutor``'s ``initializer``). Sent
            with cloudpickle, so a lambda or closure works. If it raises, the worker
            cannot start: ``WorkerStartError``.
        worker_initargs: Arguments of ``worker_initializer`` (a tuple).
        worker_call_timeout: Seconds a call may take in a worker before the worker is
            SIGKILLed and replaced (default ``None``: no limit).
        worker_start_method: ``forkserver`` (default where available) or ``spawn``.
        worker_max_restarts: Worker deaths allowed within ``worker_max_seconds`` (on the
            host's ``clock``; default 50); beyond that the pool logs it and stops
            replacing workers, and sessions that need one fail to restart.
        worker_max_seconds: Window of ``worker_max_restarts`` (default 10.0).
        worker_io: How both ends read a worker's pipe: ``"auto"`` (default: the
            platform's best; on Linux a waiting caller, or an idle session in the
            worker, reads it itself) or ``"portable"`` (one reader thread per end, as
            on platforms without ``epoll``; for testing that path).
    """

    worker_memory_limit: int | None
    worker_initializer: Callable[..., object] | None
    worker_initargs: tuple[Any, ...]
    worker_call_timeout: float | None
    worker_start_method: str | None
    worker_max_restarts: int
    worker_max_seconds: float
    worker_io: str


WorkerOptions.__module__ = "supervisor"
_PREFIX = "worker_"


def runtime_for(
    workers: int | None,
    clock: Callable[[], float],
    options: WorkerOptions,
    parked_threads: int = DEFAULT_PARKED_THREADS,
) -> SessionRuntime:
    """A ``ThreadRuntime`` keeping up to ``parked_threads`` threads parked when ``workers``
    is ``None``, else a ``WorkerRuntime`` of that size with ``options`` (checked already:
    ``_host_policy.check_worker_options``).

    Raises:
        ValueError: an invalid worker option (the pool's own checks).
        WorkerStartError: the workers could not start.
    """
    if workers is not None:
        settings: dict[str, Any] = {k.removeprefix(_PREFIX): v for k, v in options.items()}
        return WorkerRuntime(WorkerPool(workers, clock=clock, **settings))
    return ThreadRuntime(SessionThreads(parked_threads))
