"""Encryption at rest of an SQLite checkpoint store, store-wide: the checks when it opens,
the one-time migration of a plaintext store, and key rotation.

Opening (``open_rows``), whatever the store holds, fails closed:

========================== ====================== ======================================
store                      opened without keys    opened with keys
========================== ====================== ======================================
plaintext, empty           plaintext              becomes encrypted (marked in store_meta)
plaintext, with rows       plaintext              ``StoreNotEncrypted``: migrate first
encrypted                  ``StoreEncrypted``     every key id recorded in
                                                  ``encryption_keys`` must be in the
                                                  ring with the recorded bytes, else
                                                  ``EncryptionKeyError``; the current key
                                                  is recorded if new
========================== ====================== ======================================

``encrypt_rows`` (the migration) and ``reencrypt_rows`` (rotation) rewrite
rows in place inside the caller's transaction; ``scrub`` then rewrites the
file so that no old page keeps the values they replaced. Functions over a
connection the caller holds exclusively; not thread-safe on their own.
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from actors import SnapshotDecodeError, decode_plain, encode_plain
from supervisor._encryption_keys import EncryptionKeys
from supervisor._envelopes import Envelopes, envelope_key_id, is_envelope
from supervisor._row_codec import SEAL_AEAD, SEAL_QUARANTINED, PlainRows, RowCodec, SealedRows
from supervisor._state_parts import checked, put_parts, read_refs
from supervisor.errors import StoreEncrypted, StoreNotEncrypted, SupervisorError

__all__ = [
    "ENCRYPTION_FORMAT",
    "encrypt_rows",
    "open_rows",
    "reencrypt_rows",
    "scrub",
    "sealed_store_id",
]

ENCRYPTION_FORMAT = b"aes-256-gcm"
"""``store_meta.encryption`` of an encrypted store."""

logger = logging.getLogger("supervisor.store")


def open_rows(conn: sqlite3.Connection, path: str, keys: EncryptionKeys | None) -> RowCodec:
    """The codec the store must use, after the checks in the module docstring.

    Writes (in its own ``BEGIN IMMEDIATE`` transaction) only when it marks the
    store encrypted or records a new current key.

    Raises:
        StoreEncrypted, StoreNotEncrypted, EncryptionKeyError: see the module docstring.
        EncryptionUnavailable: keys were given and ``cryptography`` is missing.
        SupervisorError: the store is encrypted in a format this code does not know.
    """
    if keys is None:  # no write needed: read outside a write transaction
        if _meta(conn).get("encryption") is None:
            return PlainRows(path)
        raise StoreEncrypted(path, tuple(_recorded(conn)))
    envelopes = Envelopes(keys, path)  # EncryptionUnavailable before any write
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = _sealed_rows(conn, path, envelopes)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return rows


def sealed_store_id(path: str, meta: dict[str, Any]) -> bytes:
    """The store id of the encrypted store at ``path`` whose ``store_meta`` is ``meta``.

    Raises:
        SupervisorError: it is encrypted in a format this version does not know, or
            its store id is damaged.
    """
    encryption = meta.get("encryption")
    if encryption != ENCRYPTION_FORMAT:
        raise SupervisorError(
            f"checkpoint store {path!r} is encrypted as {encryption!r}, a format this version "
            "does not know; upgrade sessionvisor to open it"
        )
    store_id = meta.get("store_id")
    if not isinstance(store_id, bytes) or len(store_id) != 16:
        raise SupervisorError(
            f"checkpoint store {path!r} is encrypted but its store id is damaged; restore the "
            "store from a backup"
        )
    return store_id


def _sealed_rows(
    conn: sqlite3.Connection, path: str, envelopes: Envelopes, *, migrating: bool = False
) -> SealedRows:
    """Check (and if new, mark) the store for encryption, inside a write transaction."""
    meta = _meta(conn)
    encryption = meta.get("encryption")
    if encryption is None:
        if not migrating:
            checkpoints = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
            logs = conn.execute("SELECT EXISTS (SELECT 1 FROM message_chunks)").fetchone()[0]
            if checkpoints or logs:
                raise StoreNotEncrypted(path, checkpoints)
        meta = {"encryption": ENCRYPTION_FORMAT, "store_id": os.urandom(16)}
        conn.executemany("INSERT OR REPLACE INTO store_meta VALUES (?, ?)", meta.items())
    store_id = sealed_store_id(path, meta)
    for key_id, check in _recorded(conn).items():
        envelopes.trust(key_id, check)  # EncryptionKeyError: missing, or other bytes
    current = envelopes.keys.current_id
    key_check = _recorded(conn).get(current)
    if key_check is None:
        key_check = envelopes.check_value(current)
        conn.execute("INSERT INTO encryption_keys VALUES (?, ?)", (current, key_check))
        envelopes.trust(current, key_check)
    return SealedRows(envelopes, store_id, key_check)


def _meta(conn: sqlite3.Connection) -> dict[str, object]:
    return dict(conn.execute("SELECT name, value FROM store_meta").fetchall())


def _recorded(conn: sqlite3.Connection) -> dict[str, bytes]:
    return dict(conn.execute("SELECT key_id, key_check FROM encryption_keys").fetchall())


def encrypt_rows(conn: sqlite3.Connection, path: str, envelopes: Envelopes) -> int:
    """Mark the store encrypted (if not yet) and encrypt every plaintext value; returns how
    many checkpoints were encrypted. Runs inside the caller's write transaction.

    A plaintext checkpoint whose checksum fails is encrypted as it was found
    but marked damaged (``SEAL_QUARANTINED``, logged): encrypting it as a good
    row would make damaged data look authentic; leaving it would leave its
    text in the file. It stays unreadable, as it was. Log chunks need no such
    care: the checkpoints' log digests, encrypted with them, still catch damage.
    State parts are put back into the bodies that use them (an encrypted store
    keeps none, see ``_row_codec``), then deleted.
    """
    rows = _sealed_rows(conn, path, envelopes, migrating=True)
    encrypted = _reseal_checkpoints(
        conn,
        rows,
        PlainRows(path),
        lambda body, check: check not in (SEAL_AEAD, SEAL_QUARANTINED),
        quarantine=True,
    )
    conn.execute("DELETE FROM state_parts")
    _seal_logs(conn, rows, lambda value: not is_envelope(value))
    return encrypted


def reencrypt_rows(conn: sqlite3.Connection, rows: SealedRows) -> int:
    """Re-encrypt every value not under the ring's current key with it, then forget the
    other keys' records; returns how many checkpoints were re-encrypted. Runs inside the
    caller's write transaction.

    A value that does not decrypt (damaged) is left as it is: it stays unreadable.

    Raises:
        EncryptionKeyError: a value needs a key the ring lacks.
    """
    current = rows.envelopes.keys.current_id
    for key_id, check in _recorded(conn).items():  # and any recorded since the store opened
        rows.envelopes.trust(key_id, check)

    def stale(value: object) -> bool:
        key_id = envelope_key_id(value)
        return key_id is not None and key_id != current

    moved = _reseal_checkpoints(conn, rows, rows, lambda body, check: stale(body))
    _seal_logs(conn, rows, stale)
    conn.execute("DELETE FROM encryption_keys WHERE key_id <> ?", (current,))
    return moved


def _reseal_checkpoints(
    conn: sqlite3.Connection,
    rows: SealedRows,
    source: RowCodec,
    needs: Callable[[object, object], bool],
    *,
    quarantine: bool = False,
) -> int:
    """Read with ``source`` and write with ``rows`` each checkpoint whose ``(body,
    body_check)`` ``needs`` picks; returns how many. One that cannot be read is logged and
    left as it is, or with ``quarantine`` encrypted as found and marked damaged."""
    done = 0
    for row_id, sid, cid, *stored in conn.execute(
        "SELECT id, session_id, checkpoint_id, body, log_gen, log_bytes, log_count, log_digest,"
        " body_check, parts FROM checkpoints ORDER BY id"
    ).fetchall():
        if not needs(stored[0], stored[5]):
            continue
        try:
            body, digest, _ = source.open_checkpoint(sid, cid, tuple(stored))
            if stored[6] is not None:
                body = _with_parts(conn, sid, body, stored[6])
        except SnapshotDecodeError as exc:
            done_with = "encrypted as damaged" if quarantine else "left as it is"
            logger.warning("checkpoint %r of session %r %s: %s", cid, sid, done_with, exc.reason)
            if not quarantine:
                continue
            body, digest, check = rows.quarantine(sid, cid, tuple(stored))
        else:
            gen, length, count = stored[1:4]
            body, digest, check = rows.checkpoint(sid, cid, body, (gen, length, count, digest))
        conn.execute(
            "UPDATE checkpoints SET body = ?, log_digest = ?, body_check = ?, parts = NULL"
            " WHERE id = ?",
            (body, digest, check, row_id),
        )
        done += 1
    return done


def _with_parts(conn: sqlite3.Connection, sid: str, body: bytes, refs: object) -> bytes:
    """``body`` with the state parts ``refs`` names put back in: a body without parts.

    Raises:
        SnapshotDecodeError: the references, the body or a part is damaged or missing.
    """
    plain = decode_plain(body)
    found = []
    for kind, name, digest in read_refs(refs):
        row = conn.execute(
            "SELECT data FROM state_parts WHERE session_id = ? AND digest = ?", (sid, digest)
        ).fetchone()
        found.append((kind, name, checked(kind, name, digest, None if row is None else row[0])))
    put_parts(plain, found)
    return encode_plain(plain)


def _seal_logs(conn: sqlite3.Connection, rows: SealedRows, needs: Callable[[object], bool]) -> None:
    """Encrypt under the current key the chunks and log digests ``needs`` picks: plaintext
    ones in a migration, those under older keys in a rotation (opened first). One that
    cannot be opened is left: the digest of a checkpoint using it refuses it on load."""
    for sid, gen, start, data in conn.execute(
        "SELECT session_id, gen, start, data FROM message_chunks"
    ).fetchall():
        chunk = (
            _plain(data, functools.partial(rows.open_chunk, sid, gen, start))
            if needs(data)
            else None
        )
        if chunk is not None:
            conn.execute(
                "UPDATE message_chunks SET data = ? WHERE session_id = ? AND gen = ? AND start = ?",
                (rows.chunk(sid, gen, start, chunk), sid, gen, start),
            )
    for sid, gen, length, stored in conn.execute(
        "SELECT session_id, gen, length, digest FROM message_logs"
    ).fetchall():
        digest = (
            _plain(stored, functools.partial(rows.open_log_digest, sid, gen, length))
            if needs(stored)
            else None
        )
        if digest is not None:
            conn.execute(
                "UPDATE message_logs SET digest = ? WHERE session_id = ?",
                (rows.log_digest(sid, gen, length, digest), sid),
            )


def _plain(value: object, open_value: Callable[[object], object]) -> bytes | None:
    """A stored value's plaintext: the value itself when it is not an envelope, else what
    ``open_value`` makes of it; ``None`` when it cannot be read (damaged)."""
    if is_envelope(value):
        try:
            value = open_value(value)
        except SnapshotDecodeError:
            return None
    return value if isinstance(value, bytes) else None


def scrub(conn: sqlite3.Connection, path: str) -> None:
    """Rewrite the file (``VACUUM``) and empty the WAL, so that no free page or old WAL frame
    still holds a value the caller replaced. Outside any transaction.

    Another connection still reading an old snapshot can keep WAL frames alive;
    that is logged, and running the operation again once it is gone finishes it.
    """
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:
        logger.warning(
            "%s: another connection kept old pages in the WAL file; run again once no other "
            "process has the store open, to remove them",
            path,
        )
