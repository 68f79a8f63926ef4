"""The PostgreSQL store's pool of connections: opening it, borrowing from it, and telling
a pool that stayed busy from a server that cannot be reached.

The driver's pool raises the same ``PoolTimeout`` in both cases. Which one it was is
told by what the borrowers saw during the wait (``PoolUse``), not by the pool's
statistics (which count connections still being made as there): busy raises
``PoolExhausted``, which the store reports as ``StoreBusy`` (``_pg_failures``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from supervisor._pg_connections import connection_class

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PoolExhausted", "PoolUse", "PooledStore", "borrowed", "lanes_busy", "open_pool"]


def open_pool(
    pool_driver: Any,
    conninfo: str,
    connect_kwargs: dict[str, Any],
    configure: Callable[[psycopg.Connection[tuple[Any, ...]]], None],
    *,
    size: int,
    timeout: float,
    name: str,
) -> psycopg_pool.ConnectionPool[Any]:
    """A store's pool, open: up to ``size`` connections of ``connection_class()`` made with
    ``connect_kwargs`` and then ``configure``, waited for at most ``timeout`` seconds."""
    pool: psycopg_pool.ConnectionPool[Any] = pool_driver.ConnectionPool(
        conninfo,
        connection_class=connection_class(),
        configure=configure,
        min_size=1,
        max_size=size,
        kwargs=connect_kwargs,
        open=False,
        name=name,
        timeout=timeout,
    )
    pool.open()
    return pool


class PoolUse:
    """What the borrowers of a store's pool saw (``borrowed``): connections lent out now,
    and connections given back so far, unbroken (the server answered) or broken (it, or
    the network, failed). Thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._lent = 0
        self._answered = 0
        self._broke = 0

    def returns(self) -> tuple[int, int]:
        """The counts of connections given back so far: ``(unbroken, broken)``."""
        with self._lock:
            return self._answered, self._broke

    def busy_since(self, before: tuple[int, int]) -> bool:
        """Whether a wait for a connection that began at ``before`` (``returns()``) and
        timed out found the pool busy: no connection came back broken since, and either
        every one is lent out now or one came back unbroken (and went to another
        borrower queued first)."""
        with self._lock:
            if self._broke != before[1]:
                return False
            return self._answered != before[0] or self._lent >= self.size

    def lend(self) -> None:
        """A connection was lent out."""
        with self._lock:
            self._lent += 1

    def given_back(self, *, broken: bool) -> None:
        """A lent connection comes back (``broken``: unusable)."""
        with self._lock:
            self._lent -= 1
            if broken:
                self._broke += 1
            else:
                self._answered += 1


class PoolExhausted(Exception):
    """Raised by ``borrowed`` for a wait on a pool whose connections were all busy (its
    cause: the driver's ``PoolTimeout``); the store's retry (``_pg_failures.retrying``)
    turns it into ``PoolBusy``, naming the operation."""

    def __init__(self, size: int, waited: float) -> None:
        super().__init__(size, waited)
        self.size = size
        self.waited = waited


def lanes_busy(size: int, waited: float) -> PoolExhausted:
    """A save's wait for a group-commit lane (each holds a pooled connection) ran out:
    as a wait on the pool itself, which the store's retry makes a ``PoolBusy``."""
    exc = PoolExhausted(size, waited)
    exc.__cause__ = TimeoutError(f"the saves queued ahead held every connection for {waited:g} s")
    return exc


class PooledStore(Protocol):
    """What ``borrowed`` uses of ``PostgresCheckpointStore``."""

    _closed: bool
    _use: PoolUse
    _pool: psycopg_pool.ConnectionPool[Any]
    _pool_timeout: type[Exception]


@contextmanager
def borrowed(
    store: PooledStore, timeout: float | None = None
) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A connection of ``store``'s pool, for the ``with`` block, waited for at most
    ``timeout`` seconds (``None``: ``connect_timeout``; a save's group commit passes what
    is left of it).

    The pool raises ``PoolTimeout`` when no connection came within its wait: either
    every connection was busy, or none could be made (the server down or restarting:
    the pool's connections broke and new ones fail). Busy, told by ``PoolUse``: no
    connection came back broken and either all ``pool_size`` are lent out now or one
    came back unbroken (the server answered; it went to a borrower queued first). Busy
    raises ``PoolExhausted``, which the store's retry makes a ``StoreBusy`` naming the
    operation (at once, nothing written); otherwise the ``PoolTimeout`` goes on and
    becomes ``StoreUnreachable``.

    Raises:
        PoolExhausted: every connection of the pool stayed in use for the whole wait.
        psycopg_pool.PoolTimeout: no connection could be had (the server unreachable).
        ValueError: the store is closed.
    """
    if store._closed:
        raise ValueError(f"{store!r} is closed")
    use = store._use
    pool = store._pool
    before = use.returns()
    # getconn/putconn rather than connection(): its ``with conn`` would only commit an
    # autocommit connection (a no-op); putconn rolls back a transaction left open.
    try:
        conn = pool.getconn(timeout)
    except store._pool_timeout as exc:
        if use.busy_since(before):
            raise PoolExhausted(use.size, pool.timeout) from exc
        raise
    use.lend()
    try:
        yield conn
    finally:
        use.given_back(broken=conn.broken or conn.closed)
        pool.putconn(conn)
