"""``PoolCommit``: saves that arrive together share one PostgreSQL transaction.

The SQLite store's ``GroupCommit`` idea over a pool of connections: every
commit waits for a WAL flush on the server, which costs more than the few
statements of a checkpoint. A save is queued; a thread that gets one of the
``lanes`` (at most as many as the pool has connections) becomes a *leader*:
it takes every save queued so far and runs them on one connection. Alone, a
save runs as its own autocommit statements (one round trip for the usual
save); several run inside one ``BEGIN`` ... ``COMMIT``. While every lane is
busy, arrivals queue, and the next leader takes them all: under load the
batches grow by themselves, and with idle lanes nothing waits (a save that
finds nothing queued and a lane free runs at once, without queueing itself).
A queued save waits for a lane at most ``lane_wait`` seconds: past it, unless a
leader took it into a batch meanwhile, it leaves the queue unwritten and raises
what ``busy(lane_wait)`` returns (the store's ``StoreBusy`` for a busy pool), so
saves stuck on a server that stopped answering cannot hold up the others' callers
without limit. ``lane_wait`` is one budget: a leader waits for its connection only
for what its wait for the lane left of it. A save taken into a batch waits for that
batch's commit, which the connection bounds (the store's connections give up on a
server that stays silent).

A save whose write raises a Python error (``OwnershipLost``: the fence
refused it, which writes nothing) fails alone and the batch goes on. A
database error aborts PostgreSQL's transaction: the batch is rolled back and
each of its saves is run again alone, so only the one at fault fails. A
broken connection fails every save of the batch with that error (their
callers may retry: a save is idempotent). Each caller returns only once the
commit holding its own write is done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from time import monotonic
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import psycopg

__all__ = ["PoolCommit"]

T = TypeVar("T")


class _Pending(Generic[T]):
    """One queued write and, once its batch has run, its outcome."""

    __slots__ = ("done", "error", "result", "taken", "write")

    def __init__(self, write: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> None:
        self.write = write
        self.taken = False
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class PoolCommit:
    """Runs writes in shared transactions over pooled connections. Thread-safe.

    Args:
        lanes: Batches that may run at once (each holds one pooled connection).
        connection: Lends an autocommit connection for one batch (a context manager),
            waiting for one at most the seconds it is given.
        database_error: The driver's base class of errors raised by the server or
            the connection (``psycopg.Error``); other exceptions of a write are its own.
        lane_wait: Seconds a write waits for a lane and then a connection, in all, before
            it gives up.
        busy: Makes the exception raised by a write that gave up, from ``lane_wait``.
    """

    def __init__(
        self,
        lanes: int,
        connection: Callable[[float], AbstractContextManager[psycopg.Connection[tuple[Any, ...]]]],
        database_error: type[BaseException],
        *,
        lane_wait: float,
        busy: Callable[[float], BaseException],
    ) -> None:
        self._lanes = threading.BoundedSemaphore(lanes)
        self._lane_wait = lane_wait
        self._busy = busy
        self._connection = connection
        self._database_error = database_error
        self._queued: list[_Pending[Any]] = []
        self._queue_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.commits = 0
        """Commits so far: one per batch (a lone save's statements count as one)."""

    def run(self, write: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        """Run ``write`` on a pooled connection, in a batch, and return its result once the
        batch is committed.

        Raises:
            Exception: what ``write`` raised (its changes undone), or what failed the
                batch's connection (nothing of the batch may have been committed), or
                ``busy(lane_wait)``: no lane came free in time (nothing written).
        """
        deadline = monotonic() + self._lane_wait
        with self._queue_lock:  # nothing queued and a lane free: run it alone, at once
            alone = not self._queued and self._lanes.acquire(blocking=False)
        if alone:
            try:
                return self._run_alone(write)
            finally:
                self._lanes.release()
        pending: _Pending[T] = _Pending(write)
        with self._queue_lock:
            self._queued.append(pending)
        if not self._lanes.acquire(timeout=self._lane_wait):
            with self._queue_lock:
                if not pending.taken:  # no batch has it: leave unwritten
                    self._queued.remove(pending)
                    raise self._busy(self._lane_wait)
        else:
            try:
                with self._queue_lock:
                    batch: list[_Pending[Any]] = []
                    if not pending.taken:  # no leader took it yet: lead all that waits
                        batch, self._queued = self._queued, []
                        for queued in batch:
                            queued.taken = True
                if batch:  # the connection: within what the wait for the lane left
                    self._commit(batch, max(0.0, deadline - monotonic()))
            finally:
                self._lanes.release()
        pending.done.wait()  # set by the batch that took it, once its commit is over
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]  # set by the batch that ran it

    def _run_alone(self, write: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        """A batch of one, without queueing it: ``_commit`` of ``[write]``, on the caller's lane."""
        with self._connection(self._lane_wait) as conn:
            try:
                result = write(conn)
            except self._database_error:
                if conn.broken or conn.closed:
                    raise  # not committed
                self._count()
                raise
            except Exception:
                self._count()
                raise
        self._count()
        return result

    def _count(self) -> None:
        with self._count_lock:
            self.commits += 1

    def _commit(self, batch: list[_Pending[Any]], wait: float) -> None:
        try:
            with self._connection(wait) as conn:
                if len(batch) == 1:
                    self._run_one(conn, batch[0])
                elif not self._run_together(conn, batch):
                    for pending in batch:  # a statement failed: each alone, to find which
                        pending.error = None
                        self._run_one(conn, pending)
            self._count()
        except BaseException as exc:
            for pending in batch:
                if pending.error is None:
                    pending.error = exc
                pending.result = None
        finally:
            for pending in batch:
                pending.done.set()

    def _run_one(self, conn: psycopg.Connection[tuple[Any, ...]], pending: _Pending[Any]) -> None:
        """Run one write in autocommit mode; a database error of a live connection is its own."""
        try:
            pending.result = pending.write(conn)
        except self._database_error as exc:
            if conn.broken or conn.closed:
                raise  # the connection: every save left in the batch fails with it
            pending.error = exc
        except Exception as exc:
            pending.error = exc

    def _run_together(
        self, conn: psycopg.Connection[tuple[Any, ...]], batch: list[_Pending[Any]]
    ) -> bool:
        """Run the batch in one transaction; False if a database error rolled it back."""
        try:
            with conn.transaction():
                for pending in batch:
                    try:
                        pending.result = pending.write(conn)
                    except self._database_error:
                        raise
                    except Exception as exc:  # refused by our own checks: nothing written
                        pending.error = exc
        except self._database_error:
            if conn.broken or conn.closed:
                raise
            return False
        return True
