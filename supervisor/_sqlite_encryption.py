"""The SQLite store's key operations on a whole file: encrypting a plaintext store in
place (``encrypt_file``), and re-encrypting an open store under its ring's current key
(``rotate``).

Both rewrite rows in one transaction (``_store_encryption``), then the file itself
(``VACUUM``, the WAL emptied: ``scrub``), so that no old page keeps the plaintext or
values under a retired key.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import AbstractContextManager
from typing import Protocol

from supervisor._encryption_keys import EncryptionKeys
from supervisor._envelopes import Envelopes
from supervisor._log_cache import LogCache
from supervisor._row_codec import RowCodec, SealedRows
from supervisor._sqlite_schema import open_database, reporting_store_errors
from supervisor._store_encryption import encrypt_rows, reencrypt_rows, scrub
from supervisor.errors import SupervisorError

__all__ = ["KeyedStore", "encrypt_file", "rotate"]


def encrypt_file(path: str | os.PathLike[str], keys: EncryptionKeys, busy_timeout: float) -> int:
    """Encrypt the plaintext rows of the store at ``path`` under ``keys.current_id``, then
    rewrite the file; returns how many checkpoints it encrypted (see
    ``SQLiteCheckpointStore.encrypt_existing``).

    Raises:
        FileNotFoundError: there is no store at ``path`` (none is created).
        EncryptionKeyError, EncryptionUnavailable, StoreCorrupted, StoreUnavailable: as
            ``encrypt_existing`` says.
    """
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(
            f"no checkpoint store at {name!r} to encrypt; check the path (a new store is "
            "encrypted by opening it with encryption=keys)"
        )
    conn = open_database(name, synchronous="FULL", busy_timeout=busy_timeout)
    try:
        with reporting_store_errors(name):
            envelopes = Envelopes(keys, name)
            conn.execute("BEGIN IMMEDIATE")
            try:
                count = encrypt_rows(conn, name, envelopes)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            scrub(conn, name)
    finally:
        conn.close()
    return count


class KeyedStore(Protocol):
    """What ``rotate`` uses of ``SQLiteCheckpointStore``."""

    path: str
    _rows: RowCodec
    _lock: threading.Lock
    _logs: LogCache

    def _open_connection(self) -> sqlite3.Connection: ...

    def _transaction(self, mode: str) -> AbstractContextManager[sqlite3.Connection]: ...


def rotate(store: KeyedStore) -> int:
    """Re-encrypt every row of ``store`` under its ring's current key, then rewrite the
    file; returns how many checkpoints were re-encrypted (see
    ``SQLiteCheckpointStore.rotate_keys``).

    Raises:
        SupervisorError: the store is not encrypted.
    """
    rows = store._rows
    if not isinstance(rows, SealedRows):
        raise SupervisorError(
            f"{store!r} is not encrypted, so it has no keys to rotate; encrypt it with "
            "SQLiteCheckpointStore.encrypt_existing(path, keys)"
        )
    with store._transaction("IMMEDIATE") as db:
        count = reencrypt_rows(db, rows)
    with store._lock, reporting_store_errors(store.path):
        scrub(store._open_connection(), store.path)
    store._logs.clear()
    return count
