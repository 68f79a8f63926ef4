"""``WorkerRuntime``: the ``SessionRuntime`` that runs sessions in worker processes.

``AgentHost(workers=N)`` builds one. Each incarnation is placed on a worker
(``WorkerPool``) and represented here by a ``WorkerSession`` proxy actor, which
the registry, monitors and supervisor treat as the session; calls go to the
worker from the caller's thread through the incarnation's ``SessionLink``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pykka

from actors import Send, TakeSnapshot
from supervisor._runtime import NotDelivered, Request, SessionLaunch, WorkerInfo
from supervisor.workers._io import named as io_named
from supervisor.workers._pool import WorkerPool
from supervisor.workers._proxy import SessionLink, start_in_worker

__all__ = ["WorkerRuntime"]


class WorkerRuntime:
    """Runs sessions in ``size`` worker processes. Thread-safe.

    Args:
        size: Number of worker processes (>= 1).
        memory_limit, initializer, initargs, call_timeout, start_method,
        max_restarts, max_seconds, clock: as ``WorkerPool`` takes them (the
            ``worker_*`` options of ``AgentHost``).
        io: How the two ends read a worker's pipe: ``"auto"`` (the platform's
            best, chosen once at import) or ``"portable"`` (reader threads only,
            as where ``epoll`` is missing; for tests of that path).
    """

    def __init__(
        self,
        size: int,
        *,
        memory_limit: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        call_timeout: float | None = None,
        start_method: str | None = None,
        max_restarts: int = 50,
        max_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        io: str = "auto",
    ) -> None:
        self._pool = WorkerPool(
            size,
            memory_limit=memory_limit,
            initializer=initializer,
            initargs=initargs,
            call_timeout=call_timeout,
            start_method=start_method,
            max_restarts=max_restarts,
            max_seconds=max_seconds,
            clock=clock,
            io=io_named(io),
        )

    def start(self, launch: SessionLaunch) -> pykka.ActorRef[Any]:
        """Place the session on a worker, start it there and its proxy here."""
        return start_in_worker(self._pool, launch)

    def call(
        self, session_id: str, ref: pykka.ActorRef[Any], request: Request, timeout: float
    ) -> Any:
        """Carry ``request`` to the worker of incarnation ``ref`` (see ``SessionRuntime``)."""
        link: SessionLink | None = self._pool.link_of(session_id, ref)
        if link is None:
            raise NotDelivered(f"session {session_id!r} has left its worker")
        if isinstance(request, Send):
            return link.send(request.text, timeout)
        if isinstance(request, TakeSnapshot):
            return link.snapshot(request.label, timeout)
        return link.history(timeout)

    def workers(self) -> list[WorkerInfo]:
        return self._pool.info()

    def wait_ready(self, timeout: float | None) -> bool:
        return self._pool.wait_for_workers(timeout)

    @property
    def deaths(self) -> int:
        return self._pool.deaths

    @property
    def gave_up(self) -> bool:
        return self._pool.gave_up

    @property
    def pool(self) -> WorkerPool:
        """The worker pool (for tests and benchmarks that inspect workers)."""
        return self._pool

    def close(self) -> None:
        """Shut every worker down and join it."""
        self._pool.close()


WorkerRuntime.__module__ = "supervisor.workers"
