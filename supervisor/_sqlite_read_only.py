"""Opening an SQLite checkpoint store read-only (``SQLiteCheckpointStore(read_only=True)``).

For tools that read a store beside a host that may be serving it and must
change nothing: no marker file, no schema created or migrated, nothing
written to ``store_meta`` or ``encryption_keys``, and no ``-wal`` file folded
into the database.

The connection: when a ``-wal`` file is there (a host has the store open, or
stopped without closing it), a read-only one (SQLite URI ``mode=ro``), which
never checkpoints the ``-wal`` file into the database nor removes it. When
none is there, a read-only connection would leave the ``-wal`` and ``-shm``
files it makes behind, unable to remove them; the connection then may write
but refuses to (``PRAGMA query_only``), and SQLite removes the two files when
it closes, as the last connection to a store does. (Should a host open the
store, write and close it again while this connection is open, this
connection's close copies that host's ``-wal`` file into the database, as the
host's own close would have: no data changes.) Neither kind creates the file.

Keys (``open_sealed_rows``): every key the store records must be in the ring
with the recorded bytes, as for a writing open; the ring's current key need
not be one of them, and is not recorded.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from supervisor._encryption_keys import EncryptionKeys
from supervisor._envelopes import Envelopes
from supervisor._row_codec import PlainRows, RowCodec, SealedRows
from supervisor._sqlite_schema import (
    MARKER_SUFFIX,
    SCHEMA_VERSION,
    check_file_identity,
    file_identity,
    lost_store,
    open_error,
)
from supervisor._store_encryption import sealed_store_id
from supervisor.errors import StoreEncrypted, StoreReadOnly, StoreUnavailable

__all__ = ["open_read_only", "refuse"]


def open_read_only(
    path: str, *, busy_timeout: float, keys: EncryptionKeys | None
) -> tuple[sqlite3.Connection, RowCodec]:
    """A connection that reads the store at ``path`` (see the module docstring) and the
    codec its rows need; keys given for a plaintext store are not used (reading it
    stores nothing in plaintext).

    Raises:
        StoreCorrupted: the file is missing or empty but its marker says a store was
            there, or it is not a store.
        StoreUnavailable: there is no file (nor marker), or it cannot be opened.
        StoreReadOnly: the file holds no store yet, or one of an older schema.
        SupervisorError: its schema is newer than this code supports.
        StoreEncrypted, EncryptionKeyError, EncryptionUnavailable: as a writing open.
    """
    marked = os.path.exists(path + MARKER_SUFFIX)  # first, as a writing open reads it
    lost = lost_store(path)
    if lost is not None:
        raise lost
    if not os.path.isfile(path):  # never create it; SQLite finds a directory a "disk I/O error"
        if os.path.isdir(path):
            problem = "is a directory"
        else:
            problem = "is not a regular file" if os.path.exists(path) else "does not exist"
        raise StoreUnavailable(
            path,
            FileNotFoundError(f"{path!r} {problem}"),
            "give the path of an existing store (read_only=True never creates one)",
        )
    conn = _connect(path, busy_timeout)
    try:
        try:
            found = file_identity(conn)
            if check_file_identity(path, found, marked):
                raise StoreReadOnly(
                    path,
                    "the file holds no store yet, and creating one would write to it",
                    "open it without read_only=True (a host does) to create the store, or "
                    "give the path of an existing one",
                    schema_version=0,
                )
            if found[1] < SCHEMA_VERSION:
                raise StoreReadOnly(
                    path,
                    f"it holds schema version {found[1]}, older than the {SCHEMA_VERSION} this "
                    "code reads, and migrating it would write to it",
                    "open it once without read_only=True (start a host of this version on it) "
                    "to migrate it, or read it with the sessionvisor that wrote it",
                    schema_version=found[1],
                )
            rows = _rows(conn, path, keys)
        except sqlite3.DatabaseError as exc:
            raise open_error(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn, rows


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """The connection of the module docstring, in autocommit mode, for any thread."""
    idle = not any(os.path.exists(path + end) for end in ("-wal", "-journal"))
    uri = f"{Path(os.path.abspath(path)).as_uri()}?mode={'rw' if idle else 'ro'}"
    try:
        conn = sqlite3.connect(
            uri, uri=True, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.OperationalError as exc:
        raise StoreUnavailable(path, exc) from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise open_error(path, exc) from exc
    return conn


def _rows(conn: sqlite3.Connection, path: str, keys: EncryptionKeys | None) -> RowCodec:
    """The codec for the store ``conn`` reads (see ``open_read_only``)."""
    meta = dict(conn.execute("SELECT name, value FROM store_meta").fetchall())
    recorded: dict[str, bytes] = dict(
        conn.execute("SELECT key_id, key_check FROM encryption_keys ORDER BY key_id").fetchall()
    )
    encryption = meta.get("encryption")
    if encryption is None:
        return PlainRows(path)
    if keys is None:
        raise StoreEncrypted(path, tuple(recorded))
    store_id = sealed_store_id(path, meta)
    envelopes = Envelopes(keys, path)
    for key_id, check in recorded.items():
        envelopes.trust(key_id, check)  # EncryptionKeyError: missing, or other bytes
    current = keys.current_id
    # only ``before_write`` uses the current key's check value, and nothing here writes
    key_check = recorded.get(current) or envelopes.check_value(current)
    return SealedRows(envelopes, store_id, key_check)


def refuse(path: str, method: str) -> StoreReadOnly:
    """The error a read-only store raises for ``method``, which writes."""
    return StoreReadOnly(
        path,
        f"{method} writes",
        "open another SQLiteCheckpointStore on the file without read_only=True to change it",
    )
