"""``WorkerRuntime``: the ``SessionRuntime`` that runs sessions in worker processes.

``AgentHost(workers=N)`` builds one. Each incarnation is placed on a worker
(``WorkerPool``) and represented here by a ``WorkerSession`` proxy actor, which
the registry, monitors and supervisor treat as the session; calls go to the
worker from the caller's thread through the incarnation's ``SessionLink``.
"""

from __future__ import annotations

from typing import Any

import pykka

from actors import Send, TakeSnapshot
from supervisor._runtime import Done, NotDelivered, Request, SessionLaunch, WorkerInfo
from supervisor._timer import CallTimer
from supervisor.workers._pool import WorkerPool
from supervisor.workers._proxy import SessionLink, start_in_worker

__all__ = ["WorkerRuntime"]


class WorkerRuntime:
    """Runs sessions in the worker processes of ``pool``, which it then owns (``close``
    shuts it down). Thread-safe."""

    def __init__(self, pool: WorkerPool) -> None:
        self._pool = pool

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
            return link.send(request.text, request.tag, timeout)
        if isinstance(request, TakeSnapshot):
            return link.snapshot(request.label, timeout)
        return link.history(timeout)

    def submit(  # noqa: PLR0917 (the seam's signature)
        self,
        session_id: str,
        ref: pykka.ActorRef[Any],
        request: Request,
        timeout: float,
        done: Done,
        timer: CallTimer,
    ) -> None:
        """Write ``request`` on the worker's pipe; ``done`` gets the outcome on the thread
        that reads the reply (see ``SessionRuntime.submit``)."""
        link: SessionLink | None = self._pool.link_of(session_id, ref)
        if link is None:
            done(None, NotDelivered(f"session {session_id!r} has left its worker"))
        elif isinstance(request, Send):
            link.submit_send(request.text, request.tag, timeout, done, timer)
        elif isinstance(request, TakeSnapshot):
            link.submit_snapshot(request.label, timeout, done, timer)
        else:
            link.submit_history(timeout, done, timer)

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

    def close(self) -> None:
        """Shut every worker down and join it."""
        self._pool.close()


WorkerRuntime.__module__ = "supervisor.workers"
