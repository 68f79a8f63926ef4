"""Opening a SQLite store's one connection: its options checked first, then the file
opened to write (``_sqlite_schema``: created or migrated, and its encryption checked
against the keys, ``_store_encryption``) or to read only (``_sqlite_read_only``).
"""

from __future__ import annotations

import os
import sqlite3

from supervisor._encryption_keys import EncryptionKeys
from supervisor._row_codec import RowCodec
from supervisor._sqlite_read_only import open_read_only
from supervisor._sqlite_schema import SYNCHRONOUS_MODES, open_database, reporting_store_errors
from supervisor._store_encryption import open_rows

__all__ = ["check_options", "open_connection"]

_NOT_FILES = ("", ":memory:")
"""Paths SQLite opens as temporary, in-memory databases rather than files."""


def check_options(
    path: str | os.PathLike[str], synchronous: str, busy_timeout: float, encryption: object
) -> None:
    """Refuse a path that names no file, an unknown ``synchronous``, a negative
    ``busy_timeout``, and ``encryption`` that is not ``EncryptionKeys`` (or ``None``).

    Raises:
        ValueError, TypeError: one of them is wrong; the message says what suits.
    """
    if os.fspath(path) in _NOT_FILES:
        raise ValueError(
            f"SQLiteCheckpointStore needs a file to be durable; {os.fspath(path)!r} would "
            "be a temporary database that is gone once closed. Give a file path, or use "
            "MemoryCheckpointStore for checkpoints kept in memory"
        )
    if synchronous.upper() not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
    if busy_timeout < 0:
        raise ValueError(f"busy_timeout must be >= 0, got {busy_timeout}")
    if encryption is not None and not isinstance(encryption, EncryptionKeys):
        raise TypeError(f"encryption must be an EncryptionKeys, got {type(encryption).__name__}")


def open_connection(
    path: str | os.PathLike[str],
    *,
    read_only: bool,
    synchronous: str,
    busy_timeout: float,
    encryption: EncryptionKeys | None,
) -> tuple[sqlite3.Connection, RowCodec]:
    """The store's connection and the codec of its rows (plaintext or sealed). A
    connection to write closes again when the keys do not suit the store.

    Raises:
        What ``SQLiteCheckpointStore`` lists for opening.
    """
    name = os.fspath(path)
    if read_only:
        return open_read_only(name, busy_timeout=busy_timeout, keys=encryption)
    conn = open_database(path, synchronous=synchronous, busy_timeout=busy_timeout)
    try:
        with reporting_store_errors(name):
            rows = open_rows(conn, name, encryption)
    except BaseException:
        conn.close()
        raise
    return conn, rows
