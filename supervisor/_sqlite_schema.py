"""Opening a checkpoint database: connection settings and the versioned schema.

Tables (schema version 5, recorded in ``PRAGMA user_version``):

* ``checkpoints``: one row per checkpoint: metadata columns for ``list``, the
  encoded body, which prefix of which message log it uses
  (``log_gen``/``log_bytes``/``log_count``/``log_digest``; NULL when the body
  holds the messages), ``parts``, the references of the state parts taken out
  of the body (NULL: none), and ``body_check``, the checksum of body, log
  reference and part references (``_message_log.seal``), verified on every load.
* ``message_chunks``: the append-only message logs, as chunks keyed by
  ``(session_id, gen, start)``; ``start`` is the chunk's byte offset in its log.
* ``message_logs``: per session, the current log generation, its length, its
  digest and, in ``chunks``, how many saves appended to it (which chunks
  merge follows from that count, ``_log_chunks``; before, the column counted
  chunks, and a store written so goes on from that count).
* ``state_parts``: large plugin and provider states (``_state_parts``), once
  per session and content, keyed by ``(session_id, digest)`` (SHA-256 of
  ``data``); ``newest`` is the newest checkpoint id that uses the part.
* ``store_meta``: facts about the store by name; an encrypted store has
  ``encryption`` (the format, ``aes-256-gcm``) and ``store_id`` (16 random
  bytes, part of every encrypted row's identity).
* ``encryption_keys``: per key id an encrypted store may still hold rows
  under, a check value made with that key (``Envelopes.check_value``), so
  that opening it with other bytes under that id is refused at once.

How the conversation columns are stored, plaintext or encrypted, is
``_row_codec``'s business.

The schema is created on first use inside ``BEGIN IMMEDIATE``, so several
processes opening a new file at once create it exactly once. Migrations:
version 1 (before checksums) gains ``body_check``, computed for every row as
found: a row damaged before the migration would go unnoticed by it (it is
still checked by decoding and the log digest), every change after it is caught.
Version 2 gains the two encryption tables, empty: the store stays plaintext.
Version 3 gains ``state_parts`` and the ``parts`` column; its rows keep their
bodies (NULL ``parts``) and their seals, which cover no parts. Version 5 adds
a second kind of ``body_check`` (a row whose messages a session encoded
itself, see ``_message_log.seal``); rows keep theirs, so the migration only
records the version, and an older sessionvisor refuses the store as newer
instead of each such row as damaged.

Identity: a store is marked with ``PRAGMA application_id = APPLICATION_ID``
when created, and a marker file ``<path>.sessionvisor`` is written beside it.
Only a missing or empty file with no marker becomes a new store; an empty or
missing file *with* a marker (the store was truncated or deleted), another
program's database, or a file that is not a database raise ``StoreCorrupted``
without changing anything. A version-1 store (unmarked, but with our tables
and ``user_version = 1``) is marked when it migrates.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from supervisor._message_log import seal
from supervisor.errors import (
    SnapshotTooLarge,
    StoreBusy,
    StoreCorrupted,
    StoreFull,
    StoreUnavailable,
    SupervisorError,
)

__all__ = [
    "APPLICATION_ID",
    "MARKER_SUFFIX",
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "check_file_identity",
    "damaged",
    "file_identity",
    "is_damage",
    "is_too_big",
    "lost_store",
    "open_database",
    "open_error",
    "reporting_store_errors",
    "stored_schema",
    "too_long",
]

SCHEMA_VERSION = 5
APPLICATION_ID = 0x73765331
"""``PRAGMA application_id`` of every sessionvisor checkpoint store (the bytes ``svS1``)."""
MARKER_SUFFIX = ".sessionvisor"
"""Suffix of the marker file beside a store (``checkpoints.db.sessionvisor``)."""
_TABLES = frozenset(("checkpoints", "message_chunks", "message_logs"))
SYNCHRONOUS_MODES = frozenset(("NORMAL", "FULL", "EXTRA"))
# The WAL is checkpointed into the database once it holds about 1,000 pages (SQLite's own
# default, about 4 MiB) and truncated back to 4 MiB if a checkpoint found it longer: its
# footprint while the store is open is bounded, and closing the store removes it. Each
# checkpoint copies the WAL's pages into the database and syncs the database file, so a
# smaller WAL costs every save: at 64 pages (256 KiB) every ninth save or so paid a
# checkpoint in its commit, and a save took 1.3-1.5x as long on average (the first save of
# a new session, or a long session's per-turn step: ``bench_checkpoint_step``).
_WAL_LIMIT_PAGES = 1000
_WAL_LIMIT_BYTES = 4 * 1024 * 1024

_STATE_PARTS = """
    CREATE TABLE state_parts (
        session_id TEXT NOT NULL,
        digest BLOB NOT NULL,
        newest TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (session_id, digest)
    )
"""
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
        body_check BLOB,
        parts BLOB,
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
    _STATE_PARTS,
)
_DDL_3 = (
    "CREATE TABLE store_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    "CREATE TABLE encryption_keys (key_id TEXT PRIMARY KEY, key_check BLOB NOT NULL)",
)


def stored_schema(conn: sqlite3.Connection, path: str) -> int | None:
    """The schema version of the store in the database ``conn`` has open at ``path``, or
    ``None`` if the file holds no store yet (opening it would create one); reads only.

    Raises:
        StoreCorrupted: the file is neither a store nor new (truncated, foreign).
        SupervisorError: it is a store of a schema newer than this code supports.
    """
    identity = file_identity(conn)
    if check_file_identity(path, identity, os.path.exists(path + MARKER_SUFFIX)):
        return None
    return identity[1]


def file_identity(conn: sqlite3.Connection) -> tuple[int, int, frozenset[str]]:
    """The file's ``(application_id, user_version, table names)``; writes nothing."""
    app: int = conn.execute("PRAGMA application_id").fetchone()[0]
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return app, version, frozenset(name for (name,) in tables)


def check_file_identity(path: str, identity: tuple[int, int, frozenset[str]], marked: bool) -> bool:
    """Whether the file is a new store to create (else one of ours to open as it is).

    Raises:
        StoreCorrupted: the file is neither ours nor new (see the module docstring).
        SupervisorError: it is ours, of a schema newer than this code supports.
    """
    app, version, tables = identity
    if app == APPLICATION_ID or (app == 0 and version == 1 and tables >= _TABLES):
        if version > SCHEMA_VERSION:
            raise SupervisorError(
                f"checkpoint database {path} has schema version {version}, newer than the "
                f"supported {SCHEMA_VERSION}; upgrade sessionvisor to open it"
            )
        return version == 0
    if app == 0 and version == 0 and not tables:
        if marked:
            raise StoreCorrupted(
                path,
                "is empty, but its marker file says a store was created there "
                "(truncated, or replaced by an empty file)",
                _RESTORE,
            )
        return True
    raise StoreCorrupted(
        path,
        f"is another program's SQLite database (application_id {app}, "
        f"user_version {version}, tables {sorted(tables)}), not a sessionvisor store",
        "point the store at another file, or move that one away",
    )


_RESTORE = (
    "restore it (and its -wal file) from a backup; to start over with an empty store "
    f"instead, delete it and the marker file beside it ending in {MARKER_SUFFIX!r}"
)


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Add ``body_check`` and seal every existing row as found (see the module docstring)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN body_check BLOB")
    ids = [row_id for (row_id,) in conn.execute("SELECT id FROM checkpoints").fetchall()]
    for row_id in ids:
        body, *ref = conn.execute(
            "SELECT body, log_gen, log_bytes, log_count, log_digest FROM checkpoints WHERE id = ?",
            (row_id,),
        ).fetchone()
        check = seal(body, tuple(ref)) if isinstance(body, bytes) else None
        conn.execute("UPDATE checkpoints SET body_check = ? WHERE id = ?", (check, row_id))


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Add ``state_parts`` and the ``parts`` column (see the module docstring)."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN parts BLOB")
    conn.execute(_STATE_PARTS)


def _ensure_schema(conn: sqlite3.Connection, path: str, marked: bool) -> None:
    app, version, _ = file_identity(conn)
    if (app, version) == (APPLICATION_ID, SCHEMA_VERSION):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        identity = file_identity(conn)  # again: another process may have created it meanwhile
        if check_file_identity(path, identity, marked):
            for statement in (*_DDL, *_DDL_3):
                conn.execute(statement)
        else:
            if identity[1] == 1:
                _migrate_1_to_2(conn)
            if identity[1] <= 2:
                for statement in _DDL_3:
                    conn.execute(statement)
            if identity[1] <= 3:
                _migrate_3_to_4(conn)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
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
    A file that is not a store is refused before anything is written to it.

    Raises:
        StoreCorrupted: the file is not a store (see the module docstring).
        StoreUnavailable: it cannot be opened or created (e.g. a read-only directory).
        SupervisorError: the file's schema is newer than this code supports.
        StoreBusy: it stayed locked by another writer past ``busy_timeout``.
    """
    name = os.fspath(path)
    if os.path.isdir(name):
        raise StoreUnavailable(
            name,
            IsADirectoryError(f"{name!r} is a directory"),
            "give the path of a file in it (AgentHost(data_dir=...) keeps checkpoints.db in "
            "its directory)",
        )
    marker = name + MARKER_SUFFIX
    # The marker is read first: it is written only once the file holds the schema, so
    # a file found empty or missing after it was seen is truly empty, not being created.
    marked = os.path.exists(marker)
    lost = lost_store(name) if marked else None
    if lost is not None:
        raise lost
    try:
        conn = sqlite3.connect(
            _as_file_name(name), timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.OperationalError as exc:
        raise StoreUnavailable(name, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        try:
            check_file_identity(name, file_identity(conn), marked)  # before WAL changes the file
            _enable_wal(conn, busy_timeout)
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_LIMIT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT_BYTES}")
            _ensure_schema(conn, name, marked)
        except sqlite3.DatabaseError as exc:
            raise open_error(name, exc) from exc
        if not marked:
            _write_marker(marker)
    except BaseException:
        conn.close()
        raise
    return conn


def _as_file_name(name: str) -> str:
    """``name`` in the form SQLite opens as that file: SQLite built with URI file names on
    (as Debian's is) reads a name starting with ``file:`` as a URI, so that ``file::memory:``
    would be a temporary database and ``file:x.db`` the file ``x.db``, away from the marker
    file beside ``name``. Such a (relative) name gets ``./`` in front; others are unchanged."""
    return os.path.join(os.curdir, name) if name.startswith("file:") else name


_DAMAGE_CODES = frozenset((sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB))
"""SQLite's primary result codes for a file whose pages are damaged (``database disk
image is malformed``) or that is no database (``file is not a database``)."""


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the database file is damaged (as opposed to locked, full,
    read-only or closed: conditions that pass, with the data intact)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _DAMAGE_CODES  # an extended code keeps its primary in 8 bits
    text = str(exc)
    return "malformed" in text or "not a database" in text


def damaged(path: str, exc: sqlite3.Error) -> StoreCorrupted:
    """The error for damage SQLite found in the store at ``path`` while it was in use.

    Only what the damaged pages hold is unreadable (a checkpoint whose rows lie
    elsewhere still loads), but what else is damaged is unknown until the file
    is checked, and a write may damage it further: the fix says how to check
    it and how to get a sound file back.
    """
    return StoreCorrupted(
        path,
        f"is damaged: SQLite reports {str(exc)!r}",
        "stop the hosts using it, run 'sessionvisor doctor' on its data directory (it runs "
        "PRAGMA integrity_check), then restore it and its -wal file from a backup, or save "
        "what is still readable with the sqlite3 shell's '.recover' into a new file",
    )


def lost_store(path: str | os.PathLike[str]) -> StoreCorrupted | None:
    """The error opening ``path`` raises because the store there was deleted (the file is
    missing, its marker file is not), else ``None``. For tools that must tell a data
    directory no host has written yet from one whose store was lost."""
    name = os.fspath(path)
    if os.path.exists(name) or not os.path.exists(name + MARKER_SUFFIX):
        return None
    return StoreCorrupted(name, "is missing, but its marker file says a store was there", _RESTORE)


class _Locked(StoreBusy):
    """``StoreBusy`` for an SQLite store another connection kept locked past the store's
    ``busy_timeout`` (``SQLITE_BUSY``). Its own message: ``StoreBusy``'s speaks of a
    PostgreSQL server."""

    def __init__(self, path: str, error: BaseException) -> None:
        SupervisorError.__init__(
            self,
            f"checkpoint store {path!r} stayed locked by another connection for longer than "
            f"the store's busy_timeout ({error}): another process writes the file, or holds "
            "a long transaction (a tool, a backup, encrypt_existing); the transaction that "
            "waited wrote nothing. Retry it; if this persists, find that process, or open "
            "the store with a longer busy_timeout",
        )
        self.where = repr(path)
        self.action = "a transaction"


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection kept the database locked past the busy
    timeout (``SQLITE_BUSY``: nothing was done, and a retry may succeed)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_BUSY
    return "database is locked" in str(exc)


@contextmanager
def reporting_store_errors(path: str) -> Iterator[None]:
    """Raise damage SQLite finds in the store at ``path`` within as ``StoreCorrupted``
    (``damaged``), a full disk or database as ``StoreFull`` and a lock held by another
    connection past the busy timeout as ``StoreBusy``, SQLite's error as the cause;
    other errors pass unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        reported = store_error(path, exc)
        if reported is exc:
            raise
        raise reported from exc


def store_error(path: str, exc: BaseException) -> BaseException:
    """What ``reporting_store_errors`` raises for ``exc`` met in the store at ``path``:
    ``exc`` itself, or the store's error that says it (``exc`` not yet its cause: the
    caller raises it ``from exc``, or sets ``__cause__`` when it hands it over unraised)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return exc
    if is_damage(exc):
        return damaged(path, exc)
    if is_full(exc):
        return StoreFull(repr(path), exc)
    if is_busy(exc):
        return _Locked(path, exc)
    return exc


def is_full(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the disk or the database is full (``SQLITE_FULL``: the write
    failed whole, and the file is intact)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_FULL
    return "database or disk is full" in str(exc)


def is_too_big(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite refusing a value longer than its length limit."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_TOOBIG
    return "too big" in str(exc)


def too_long(sid: str, size: int, limit: int) -> SnapshotTooLarge:
    """The error of a save one of whose values SQLite cannot store: the body (the state but
    its messages), or a plugin's or the provider's state, is over ``limit`` bytes (the
    message log is stored in pieces under it, so its length is no limit)."""
    error = SnapshotTooLarge(sid, size, limit)
    error.args = (
        f"snapshot of session {sid!r} ({size} bytes) holds a value SQLite cannot store: its "
        f"state apart from the messages, or one plugin's or the provider's state, is over "
        f"the {limit} bytes SQLite stores in one value (SQLITE_LIMIT_LENGTH); nothing was "
        "stored. Keep large data out of the session state (store it elsewhere and keep a "
        "reference to it)",
    )
    return error


def open_error(path: str, exc: sqlite3.DatabaseError) -> Exception:
    """The error to raise for an SQLite error while opening ``path``."""
    text = str(exc)
    if is_damage(exc):
        return StoreCorrupted(path, f"is not a readable SQLite database ({text})", _RESTORE)
    if is_full(exc):
        return StoreFull(repr(path), exc)
    if is_busy(exc):
        return _Locked(path, exc)
    if "locked" in text or "busy" in text:
        return exc
    return StoreUnavailable(path, exc)  # unable to open, readonly, disk I/O error...


def _write_marker(marker: str) -> None:
    """Record beside the store that it exists (see the module docstring).

    Raises:
        StoreUnavailable: the marker cannot be written.
    """
    text = (
        f"sessionvisor checkpoint store, marked {datetime.now(UTC).isoformat(timespec='seconds')}."
        "\nWhile this file exists, an empty or missing store beside it is an error, not a new"
        " store.\n"
    )
    try:
        with open(marker, "x", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreUnavailable(marker, exc) from exc
