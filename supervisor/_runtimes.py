"""Choosing an ``AgentHost``'s ``SessionRuntime`` from its constructor's options, once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from supervisor._runtime import SessionRuntime
from supervisor._thread_runtime import ThreadRuntime
from supervisor.workers import WorkerPool, WorkerRuntime

__all__ = ["runtime_for"]


def runtime_for(
    workers: int | None,
    clock: Callable[[], float],
    *,
    memory_limit: int | None,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
    call_timeout: float | None,
    start_method: str | None,
    max_restarts: int,
    max_seconds: float,
    io: str,
) -> SessionRuntime:
    """A ``ThreadRuntime`` when ``workers`` is ``None``, else a ``WorkerRuntime`` of that size
    with the other options (``AgentHost``'s ``worker_*`` options, named without the prefix).

    Raises:
        ValueError: a worker option given without ``workers`` (the message names it),
            or an invalid one.
        WorkerStartError: the workers could not start.
    """
    if workers is not None:
        pool = WorkerPool(
            workers,
            memory_limit=memory_limit,
            initializer=initializer,
            initargs=initargs,
            call_timeout=call_timeout,
            start_method=start_method,
            max_restarts=max_restarts,
            max_seconds=max_seconds,
            clock=clock,
            io=io,
        )
        return WorkerRuntime(pool)
    given = {
        "worker_memory_limit": memory_limit,
        "worker_initializer": initializer,
        "worker_initargs": initargs or None,
        "worker_call_timeout": call_timeout,
        "worker_start_method": start_method,
        "worker_io": None if io == "auto" else io,
    }
    named = [name for name, value in given.items() if value is not None]
    if named:
        raise ValueError(
            f"{', '.join(named)} only apply to worker processes; pass workers=N to run "
            "sessions in worker processes, or drop them"
        )
    return ThreadRuntime()
