"""The asyncio floors of the concurrency benchmark: its workload with no framework at all.

Each of N asyncio tasks waits like the model does (``asyncio.sleep``), then makes
its turn durable by writing one row, as large as the turn's checkpoint, to a
SQLite database in WAL mode with the store's ``synchronous`` setting. SQLite calls
block, so they run on one executor thread that owns the connection (SQLite
admits one writer at a time anyway); the event loop's thread never waits on disk.

* ``per_turn_commits``: every row is its own transaction (``BEGIN IMMEDIATE``,
  insert, ``COMMIT``: with ``synchronous=FULL`` one WAL fsync each), in the order
  the tasks ask.
* ``group_commits``: the rows that arrive while a transaction is being written
  wait and go together in the next one; each task returns only once the
  transaction holding its own row has committed, and a failed transaction fails
  every task in it.

Not thread-safe: each call runs on one event loop; the connection is used by the
writer thread only while the loop waits for it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks._common import bare_sqlite

__all__ = ["group_commits", "open_floor_db", "per_turn_commits"]

Row = tuple[str, str, bytes]
"""``(session_id, checkpoint_id, data)``."""


def open_floor_db(path: Path, synchronous: str) -> sqlite3.Connection:
    """A new database at ``path`` in WAL mode with ``synchronous``, with one table of rows.

    The connection may be used from another thread (one at a time); close it when done.
    """
    conn = bare_sqlite(path, synchronous, check_same_thread=False)
    conn.execute(
        "CREATE TABLE checkpoints (session_id TEXT, checkpoint_id TEXT, data BLOB,"
        " PRIMARY KEY (session_id, checkpoint_id))"
    )
    return conn


def _commit(conn: sqlite3.Connection, rows: list[Row]) -> None:
    """Insert ``rows`` in one transaction; durable (per ``synchronous``) when it returns."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany("INSERT INTO checkpoints VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


async def per_turn_commits(conn: sqlite3.Connection, n: int, delay: float, data: bytes) -> int:
    """Run ``n`` turns at once, each committing its own row; returns the transaction count."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-writer") as writer:

        async def turn(index: int) -> None:
            await asyncio.sleep(delay)
            await loop.run_in_executor(writer, _commit, conn, [(f"s{index}", "1", data)])

        await asyncio.gather(*(turn(i) for i in range(n)))
    return n


class _GroupCommitter:
    """Batches rows that arrive while a transaction is being written. Not thread-safe:
    lives on one event loop."""

    def __init__(self, conn: sqlite3.Connection, writer: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._writer = writer
        self._pending: list[tuple[Row, asyncio.Future[None]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.transactions = 0

    async def save(self, row: Row) -> None:
        """Return once ``row`` is committed; raise what failed its transaction."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((row, done))
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        await done

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await loop.run_in_executor(
                        self._writer, _commit, self._conn, [row for row, _ in batch]
                    )
                except Exception as exc:
                    for _, done in batch:
                        if not done.done():  # a waiter may have been cancelled
                            done.set_exception(exc)
                    continue
                self.transactions += 1
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
        finally:
            self._drainer = None


async def group_commits(conn: sqlite3.Connection, n: int, delay: float, data: bytes) -> int:
    """Run ``n`` turns at once, their rows group-committed; returns the transaction count."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-writer") as writer:
        committer = _GroupCommitter(conn, writer)

        async def turn(index: int) -> None:
            await asyncio.sleep(delay)
            await committer.save((f"s{index}", "1", data))

        await asyncio.gather(*(turn(i) for i in range(n)))
    return committer.transactions
