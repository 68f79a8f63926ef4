"""What the SQLite store writes into each column that holds conversation data, and how it
reads it back: in plaintext (``PlainRows``) or encrypted (``SealedRows``).

The store chooses one when it opens and calls it for every value; nothing
else in the store asks whether it is encrypted. The columns concerned:

====================== ===================================== ================================
column                 plaintext                             encrypted
====================== ===================================== ================================
checkpoints.body       the body (snapshot without messages)  envelope of log digest + body
checkpoints.log_digest SHA-256 of the log prefix it uses     NULL (the digest is in the body)
checkpoints.body_check ``\\x01`` + BLAKE2b-128 (``seal``)     ``\\x02``: the envelope's GCM tag
                                                              is the MAC
message_chunks.data    message encodings                     envelope of them
message_logs.digest    SHA-256 of the whole current log      envelope of it
checkpoints.parts      references to its state parts         NULL: no state parts
state_parts.data       large plugin/provider states          (none)
====================== ===================================== ================================

An encrypted store keeps large plugin and provider states inside the
encrypted body instead of as shared parts (``_state_parts``): a part is
keyed by the SHA-256 of its plaintext, and that digest in clear would let
anyone holding a guessed state confirm it.

Every envelope's associated data names its row (store id, table, session,
checkpoint id or log generation and offset, and the log reference columns
left in clear), so a value copied into another row, another session's or
another store's, fails to decrypt. The digests stay SHA-256 over the
plaintext, as without encryption, but are never stored in clear: a clear
digest would let anyone holding a guessed conversation confirm it. (A digest
over ciphertext would change with every merge of chunks, which re-encrypts
them; a keyed digest would tie each log generation to the key that
started it.)

Thread-safe: both classes hold only immutable state and thread-safe parts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any, Protocol

import msgpack

from actors import SnapshotDecodeError
from supervisor import _message_log
from supervisor._envelopes import Envelopes, envelope_key_id, is_envelope
from supervisor._message_log import LogRef
from supervisor.errors import StoreEncrypted

__all__ = ["SEAL_AEAD", "SEAL_QUARANTINED", "PlainRows", "RowCodec", "SealedRows"]

SEAL_AEAD = b"\x02"
"""``body_check`` of an encrypted row: its MAC is the GCM tag inside the body's envelope."""
SEAL_QUARANTINED = b"\x03"
"""``body_check`` of a row found damaged when its store was encrypted: kept, encrypted as
it was found, and refused on load."""


class RowCodec(Protocol):
    """The stored form of checkpoint bodies, message-log chunks and log digests."""

    @property
    def encrypted(self) -> bool:
        """Whether values are stored encrypted."""
        ...

    def before_write(self, db: sqlite3.Connection) -> None:
        """Check, inside a save's write transaction, that this codec may still write the store."""
        ...

    def trust_keys(self, db: sqlite3.Connection, values: Iterable[object]) -> None:
        """Inside the transaction that read ``values``: check the keys they name that were
        recorded since the store opened, so that opening them later needs no database.

        Raises:
            EncryptionKeyError: (encrypted) such a key is missing from the ring or wrong.
        """
        ...

    def checkpoint(
        self,
        sid: str,
        cid: str,
        body: bytes,
        ref: LogRef,
        parts: bytes | None = None,
        *,
        checked: bool = False,
    ) -> tuple[Any, Any, bytes]:
        """The stored ``(body, log_digest, body_check)`` of a checkpoint using log ``ref`` and
        the state parts ``parts`` names (``_state_parts.part_refs``); ``checked`` as
        ``SplitSnapshot.checked``, which a codec may record or drop."""
        ...

    def open_checkpoint(self, sid: str, cid: str, stored: tuple[Any, ...]) -> tuple[Any, Any, bool]:
        """``(body, log digest, checked)`` from a row's ``(body, gen, bytes, count,
        log_digest, check, parts)``; ``checked``: as recorded by ``checkpoint``.

        Raises:
            SnapshotDecodeError: the row is damaged, edited, or of the other kind.
            EncryptionKeyError: (encrypted) its key is missing or wrong.
        """
        ...

    def chunk(self, sid: str, gen: int, start: int, data: bytes | memoryview) -> Any:
        """The stored form of the log chunk of generation ``gen`` at byte ``start``."""
        ...

    def open_chunk(self, sid: str, gen: int, start: int, stored: Any) -> Any:
        """The chunk's message bytes (``assemble`` checks their type and digest)."""
        ...

    def log_digest(self, sid: str, gen: int, length: int, digest: bytes) -> bytes:
        """The stored form of the current log's digest."""
        ...

    def open_log_digest(self, sid: str, gen: int, length: int, stored: Any) -> bytes | None:
        """The current log's digest, or ``None`` when it cannot be read (a new log then starts).

        Raises:
            EncryptionKeyError: (encrypted) its key is missing or wrong.
        """
        ...


class PlainRows:
    """Values as they are, each checkpoint row sealed with its BLAKE2b checksum."""

    encrypted = False

    def __init__(self, path: str) -> None:
        self._path = path

    def before_write(self, db: sqlite3.Connection) -> None:
        """Refuse to write plaintext into a store encrypted since this instance opened it.

        Raises:
            StoreEncrypted: another process encrypted the store meanwhile.
        """
        if db.execute("SELECT 1 FROM store_meta WHERE name = 'encryption'").fetchone():
            key_ids = db.execute("SELECT key_id FROM encryption_keys ORDER BY key_id").fetchall()
            raise StoreEncrypted(self._path, tuple(key_id for (key_id,) in key_ids))

    def trust_keys(self, db: sqlite3.Connection, values: Iterable[object]) -> None:
        pass

    def checkpoint(
        self,
        sid: str,
        cid: str,
        body: bytes,
        ref: LogRef,
        parts: bytes | None = None,
        *,
        checked: bool = False,
    ) -> tuple[Any, Any, bytes]:
        return body, ref[3], _message_log.seal(body, ref, parts, checked=checked)

    def open_checkpoint(self, sid: str, cid: str, stored: tuple[Any, ...]) -> tuple[Any, Any, bool]:
        """As ``RowCodec.open_checkpoint``.

        Raises:
            StoreEncrypted: the row is encrypted: another process encrypted the
                store since this instance opened it without keys (a configuration
                error, not damage to skip).
        """
        body, gen, length, count, digest, check, parts = stored
        key_id = envelope_key_id(body)
        if key_id is not None and check in (SEAL_AEAD, SEAL_QUARANTINED):
            raise StoreEncrypted(self._path, (key_id,))
        checked = _message_log.verify(check, body, (gen, length, count, digest), parts)
        return body, digest, checked

    def chunk(self, sid: str, gen: int, start: int, data: bytes | memoryview) -> Any:
        return data

    def open_chunk(self, sid: str, gen: int, start: int, stored: Any) -> Any:
        return stored

    def log_digest(self, sid: str, gen: int, length: int, digest: bytes) -> bytes:
        return digest

    def open_log_digest(self, sid: str, gen: int, length: int, stored: Any) -> bytes | None:
        return stored if isinstance(stored, bytes) else None


class SealedRows:
    """Values in AES-256-GCM envelopes (``_envelopes``), bound to their rows.

    Args:
        envelopes: Encrypts under the ring's current key, decrypts under trusted ones.
        store_id: The store's random id (``store_meta``), part of every row's identity.
        key_check: The current key's check value, re-recorded by ``before_write``.
    """

    encrypted = True

    def __init__(self, envelopes: Envelopes, store_id: bytes, key_check: bytes) -> None:
        self.envelopes = envelopes
        self._store_id = store_id
        self._current = (envelopes.keys.current_id, key_check)

    def before_write(self, db: sqlite3.Connection) -> None:
        """Record the current key, in case a ``rotate_keys`` elsewhere retired it meanwhile."""
        db.execute("INSERT OR IGNORE INTO encryption_keys VALUES (?, ?)", self._current)

    def trust_keys(self, db: sqlite3.Connection, values: Iterable[object]) -> None:
        envelopes = self.envelopes
        for value in values:
            key_id = envelope_key_id(value)
            if key_id is None or envelopes.is_trusted(key_id):
                continue
            row = db.execute(
                "SELECT key_check FROM encryption_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            if row is not None:  # else never recorded: opening the value says it is damaged
                envelopes.trust(key_id, bytes(row[0]))

    def _aad(self, *row: object) -> bytes:
        aad: bytes = msgpack.packb([self._store_id, *row])
        return aad

    def quarantine(self, sid: str, cid: str, stored: tuple[Any, ...]) -> tuple[Any, Any, bytes]:
        """The stored form of a plaintext row that failed its checksum: its columns as found,
        encrypted (so its text leaves the file), marked so that ``load`` refuses it."""
        plain = msgpack.packb(list(stored))
        return (
            self.envelopes.seal(plain, self._aad("quarantined", sid, cid)),
            None,
            SEAL_QUARANTINED,
        )

    def checkpoint(
        self,
        sid: str,
        cid: str,
        body: bytes,
        ref: LogRef,
        parts: bytes | None = None,
        *,
        checked: bool = False,  # not recorded: a resume checks what it decrypts
    ) -> tuple[Any, Any, bytes]:
        if parts is not None:
            raise ValueError("an encrypted store keeps state parts in the body (see the module)")
        gen, length, count, digest = ref
        inner = b"" if digest is None else digest
        plain = b"".join((bytes((len(inner),)), inner, body))
        aad = self._aad("checkpoint", sid, cid, gen, length, count)
        return self.envelopes.seal(plain, aad), None, SEAL_AEAD

    def open_checkpoint(self, sid: str, cid: str, stored: tuple[Any, ...]) -> tuple[Any, Any, bool]:
        body, gen, length, count, digest, check, parts = stored
        if check == SEAL_QUARANTINED:
            raise SnapshotDecodeError(
                "it was already damaged when the store was encrypted (its checksum failed in "
                "encrypt_existing); it is kept, encrypted, for inspection"
            )
        if check != SEAL_AEAD:
            if isinstance(check, bytes) and check[:1] in _message_log.SEAL_KINDS:
                raise SnapshotDecodeError(
                    "it is stored in plaintext, but this store is encrypted: it was written by "
                    "a process without the keys, or edited; to encrypt plaintext rows run "
                    "SQLiteCheckpointStore.encrypt_existing(path, keys)"
                )
            raise SnapshotDecodeError("stored checksum is missing or of an unknown kind")
        if digest is not None:
            raise SnapshotDecodeError("an encrypted row has a message-log digest in clear")
        if parts is not None:
            raise SnapshotDecodeError("an encrypted row names state parts stored in clear")
        aad = self._aad("checkpoint", sid, cid, gen, length, count)
        plain = self.envelopes.open(body, aad, "stored body")
        size = plain[0] if plain else -1
        if size not in (0, 32) or (size == 0) != (gen is None):
            raise SnapshotDecodeError("decrypted body has a malformed message-log digest")
        return plain[1 + size :], (plain[1 : 1 + size] if size else None), False

    def chunk(self, sid: str, gen: int, start: int, data: bytes | memoryview) -> Any:
        return self.envelopes.seal(data, self._aad("chunk", sid, gen, start))

    def open_chunk(self, sid: str, gen: int, start: int, stored: Any) -> Any:
        aad = self._aad("chunk", sid, gen, start)
        return self.envelopes.open(stored, aad, f"message log chunk at byte {start}")

    def log_digest(self, sid: str, gen: int, length: int, digest: bytes) -> bytes:
        return self.envelopes.seal(digest, self._aad("log", sid, gen, length))

    def open_log_digest(self, sid: str, gen: int, length: int, stored: Any) -> bytes | None:
        if not is_envelope(stored):
            return None
        try:
            return self.envelopes.open(stored, self._aad("log", sid, gen, length), "log digest")
        except SnapshotDecodeError:
            return None
