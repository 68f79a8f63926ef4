"""Opening a checkpoint database: connection settings and the versioned schema.

Tables (schema version 1, recorded in ``PRAGMA user_version``):

* ``checkpoints``: one row per checkpoint: metadata columns for ``list``, the
  encoded body, and which prefix of which message log it uses
  (``log_gen``/``log_bytes``/``log_count``/``log_digest``; NULL when the body
  is complete).
* ``message_chunks``: the append-only message logs, as chunks keyed by
  ``(session_id, gen, start)``; ``start`` is the chunk's byte offset in its log.
* ``message_logs``: per session, the current log generation, its length, its
  digest and its chunk count.

The schema is created on first use inside ``BEGIN IMMEDIATE``, so several
processes opening a new file at once create it exactly once.
"""

from __future__ import annotations

import os
import sqlite3
import time

from supervisor.errors import SupervisorError

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "open_database"]

SCHEMA_VERSION = 1
SYNCHRONOUS_MODES = frozenset(("NORMAL", "FULL", "EXTRA"))
# A small WAL keeps the file's footprint close to its content while it is open: checkpoint
# it into the database about every 256 KiB and truncate it back to that size afterwards.
_WAL_LIMIT_PAGES = 64
_WAL_LIMIT_BYTES = 256 * 1024

_DDL = (
    """
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        saved_at_us INTEGER NOT NULL,
        label TEXT,
        size INTEGER NOT NULL,
        body BLOB NOT NULL,
        log_gen INTEGER,
        log_bytes INTEGER,
        log_count INTEGER,
        log_digest BLOB,
        UNIQUE (session_id, checkpoint_id)
    )
    """,
    """
    CREATE TABLE message_chunks (
        session_id TEXT NOT NULL,
        gen INTEGER NOT NULL,
        start INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (session_id, gen, start)
    )
    """,
    """
    CREATE TABLE message_logs (
        session_id TEXT PRIMARY KEY,
        gen INTEGER NOT NULL,
        length INTEGER NOT NULL,
        digest BLOB NOT NULL,
        chunks INTEGER NOT NULL
    )
    """,
)


def _user_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    if _user_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(conn)
        if version == 0:
            for statement in _DDL:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version > SCHEMA_VERSION:
            raise SupervisorError(
                f"checkpoint database {path} has schema version {version}, newer than the "
                f"supported {SCHEMA_VERSION}; upgrade sessionvisor to open it"
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch to WAL, retrying while another process does the same on a new file.

    SQLite does not call the busy handler for this switch (it could deadlock),
    so two processes creating one file at once can see "database is locked";
    the switch is retried with a short back-off until ``busy_timeout``.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def open_database(
    path: str | os.PathLike[str], *, synchronous: str, busy_timeout: float
) -> sqlite3.Connection:
    """Open (creating if needed) a checkpoint database in WAL mode.

    The connection is in autocommit mode (transactions are explicit), may be
    used from any thread (the caller serializes access), waits up to
    ``busy_timeout`` seconds for other writers, and has the schema in place.

    Raises:
        SupervisorError: the file's schema is newer than this code supports.
        sqlite3.DatabaseError: the file is not a database, or is locked too long.
    """
    name = os.fspath(path)
    conn = sqlite3.connect(
        name, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        _enable_wal(conn, busy_timeout)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_LIMIT_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT_BYTES}")
        _ensure_schema(conn, name)
    except BaseException:
        conn.close()
        raise
    return conn
