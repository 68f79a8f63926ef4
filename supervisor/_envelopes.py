"""AES-256-GCM envelopes: how one stored value is encrypted and read back.

An envelope is::

    0xC1 | 0x01 | len(key_id) | key_id | nonce (12 bytes) | ciphertext | tag (16 bytes)

``0xC1`` is the one byte msgpack never uses, so an envelope can never be
taken for a plaintext snapshot body or message (those start with a msgpack
map header); ``0x01`` is the format (AES-256-GCM). The nonce is 96 random bits
per encryption. The associated data is the header (so the key id cannot be
changed) followed by the caller's ``aad``, the identity of the row the value
belongs to: a value moved to another row fails to decrypt. The GCM tag is the
value's MAC: a changed bit anywhere fails it too.

``cryptography`` is imported when the first ``Envelopes`` is built, never at
module import, so the rest of the package works without it.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import msgpack

from actors import SnapshotDecodeError
from supervisor._encryption_keys import EncryptionKeys
from supervisor.errors import EncryptionKeyError, EncryptionUnavailable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["MAGIC", "Envelopes", "envelope_key_id", "is_envelope"]

MAGIC = 0xC1
"""First byte of every envelope (msgpack's reserved, never-used byte)."""
_FORMAT = 0x01
_NONCE = 12
_TAG = 16


def is_envelope(value: object) -> bool:
    """Whether a stored value is an envelope (else plaintext, or damaged)."""
    return isinstance(value, bytes) and value[:2] == bytes((MAGIC, _FORMAT))


def envelope_key_id(value: object) -> str | None:
    """The key id an envelope names, or ``None`` when ``value`` is not a (whole) envelope."""
    try:
        return _parse(value, "value")[0]
    except SnapshotDecodeError:
        return None


def _cryptography() -> tuple[type[AESGCM], type[Exception]]:
    """``cryptography``'s AES-GCM class and its authentication failure, imported now."""
    try:
        from cryptography.exceptions import InvalidTag  # noqa: PLC0415
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415
    except ImportError as exc:
        raise EncryptionUnavailable(exc) from exc
    return AESGCM, InvalidTag


class Envelopes:
    """Encrypts values under a ring's current key and decrypts them under any trusted key.

    Only *trusted* keys decrypt: keys whose bytes were checked against the
    check value the store recorded for their id (``trust``), so a value that
    then fails to decrypt is damage (``SnapshotDecodeError``), never a wrong
    key. The store trusts every key it records when it opens, and a key
    recorded later (by another process) before it reads a value naming it;
    an envelope naming a key still untrusted names one the store never
    recorded, which only a damaged or edited value can.

    Thread-safe: cipher objects are immutable; the trusted set is guarded.

    Args:
        keys: The ring.
        path: The store's path, for error messages.

    Raises:
        EncryptionUnavailable: ``cryptography`` is not installed.
    """

    def __init__(self, keys: EncryptionKeys, path: str) -> None:
        self._aesgcm, self._invalid_tag = _cryptography()
        self.keys = keys
        self._path = path
        self._trusted: dict[str, AESGCM] = {}
        self._lock = threading.Lock()
        current = keys._key_for(keys.current_id)
        assert current is not None
        self._current_cipher = self._aesgcm(current)
        self._current_header = _header(keys.current_id)

    # --- values ---------------------------------------------------------------------------

    def seal(self, data: bytes | memoryview, aad: bytes) -> bytes:
        """``data`` in an envelope under the current key, bound to ``aad``."""
        nonce = os.urandom(_NONCE)
        header = self._current_header
        return b"".join((header, nonce, self._current_cipher.encrypt(nonce, data, header + aad)))

    def open(self, value: object, aad: bytes, what: str) -> bytes:
        """The plaintext of the envelope ``value`` stored for the row ``aad`` names.

        Raises:
            SnapshotDecodeError: ``value`` is not an envelope (plaintext in an
                encrypted store, or damaged), names a key that is not trusted
                (see above), or fails authentication; the message starts with ``what``.
        """
        key_id, header, body = _parse(value, what)
        cipher = self._trusted.get(key_id)
        if cipher is None:
            raise SnapshotDecodeError(
                f"{what} names key {key_id!r}, which this store never recorded: it was "
                "damaged or edited"
            )
        try:
            plain: bytes = cipher.decrypt(body[:_NONCE], body[_NONCE:], header + aad)
        except self._invalid_tag:
            raise SnapshotDecodeError(
                f"{what} fails authentication under key {key_id!r}: it was damaged, edited, "
                "or moved from another row"
            ) from None
        return plain

    # --- keys -----------------------------------------------------------------------------

    def check_value(self, key_id: str) -> bytes:
        """A value proving knowledge of key ``key_id`` (an envelope of nothing under it).

        The store records it per key id, so that opening the store with another
        key under that id is told apart from damage.
        """
        key = self.keys._key_for(key_id)
        assert key is not None
        nonce = os.urandom(_NONCE)
        header = _header(key_id)
        tag = self._aesgcm(key).encrypt(nonce, b"", header + _CHECK_AAD)
        return header + nonce + tag

    def is_trusted(self, key_id: str) -> bool:
        """Whether ``key_id``'s key has been checked and may decrypt."""
        return key_id in self._trusted

    def trust(self, key_id: str, check: bytes) -> None:
        """Check the ring's key ``key_id`` against the store's recorded ``check`` and trust it.

        Raises:
            EncryptionKeyError: the ring lacks the key, or its bytes differ.
        """
        key = self.keys._key_for(key_id)
        if key is None:
            raise EncryptionKeyError(
                self._path,
                key_id,
                "is used by this store but missing from the key ring; add it back (old keys "
                "stay needed until rotate_keys() has re-encrypted every row under the current key)",
            )
        cipher = self._aesgcm(key)
        try:
            named, header, body = _parse(check, "key check")
            if named != key_id:
                raise SnapshotDecodeError("key check names another key")
            cipher.decrypt(body[:_NONCE], body[_NONCE:], header + _CHECK_AAD)
        except (SnapshotDecodeError, self._invalid_tag):
            raise EncryptionKeyError(
                self._path,
                key_id,
                "is not the key this store recorded under that id; put the right key back "
                "under that id (a new key needs a new id)",
            ) from None
        with self._lock:
            self._trusted[key_id] = cipher


_CHECK_AAD = msgpack.packb(["sessionvisor key check"])


def _header(key_id: str) -> bytes:
    raw = key_id.encode("ascii")
    return bytes((MAGIC, _FORMAT, len(raw))) + raw


def _parse(value: object, what: str) -> tuple[str, bytes, memoryview]:
    """``(key_id, header, nonce + ciphertext + tag)`` of an envelope.

    Raises:
        SnapshotDecodeError: ``value`` is not an envelope.
    """
    if not is_envelope(value):
        raise SnapshotDecodeError(
            f"{what} is not encrypted, but this store is: it was written by a process without "
            "the keys, or edited; to encrypt plaintext rows run "
            "SQLiteCheckpointStore.encrypt_existing(path, keys)"
        )
    assert isinstance(value, bytes)
    end = 3 + value[2] if len(value) > 2 else 3
    if len(value) < end + _NONCE + _TAG:
        raise SnapshotDecodeError(f"{what} is a truncated envelope")
    try:
        key_id = value[3:end].decode("ascii")
    except UnicodeDecodeError:
        raise SnapshotDecodeError(f"{what} has a damaged key id") from None
    return key_id, value[:end], memoryview(value)[end:]
