"""``EncryptionKeys``: the named AES-256 keys a checkpoint store encrypts with.

A ring holds several keys by id, so that keys can be rotated: the *current*
key encrypts every new row; every key of the ring decrypts the rows written
under its id. Keys come from the caller (``EncryptionKeys({...})``), from an
environment variable (``from_env``) or from a callback (``from_callback``,
e.g. a secret manager). This module never imports ``cryptography``: a ring
can be built and validated without it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, NoReturn

from supervisor.errors import InvalidEncryptionKeys

__all__ = ["KEYS_VARIABLE", "KEY_BYTES", "EncryptionKeys", "KeyEntries", "KeyProvider"]

KEY_BYTES = 32
"""Length of every key: AES-256."""
KEYS_VARIABLE = "SESSIONVISOR_KEYS"
"""The environment variable ``EncryptionKeys.from_env`` reads by default."""
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_NEW_KEY_HINT = (
    'make one with: python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"'
)

KeyEntries = Mapping[str, bytes] | Iterable[tuple[str, bytes]]
"""Keys by id, as a mapping or ``(key_id, key)`` pairs; the first one is the current key."""
KeyProvider = Callable[[], KeyEntries]
"""A callback returning ``KeyEntries`` (see ``EncryptionKeys.from_callback``)."""


class EncryptionKeys:
    """Named 256-bit keys for encryption at rest: the current one encrypts, all decrypt.

    Give the keys as a mapping or as ``(key_id, key)`` pairs; the first entry
    is the current key unless ``current`` names another. A key id is 1-64
    characters of ``A-Z a-z 0-9 . _ -``; a key is exactly 32 random bytes
    (``EncryptionKeys.new_key()``). Key bytes never appear in a repr, a log
    line or an error message, and a ring refuses to be pickled, so it never
    travels to worker processes or into files by accident.

    Rotation: put a new key first (current) and keep the old ones; rows written
    under an old key stay readable. ``SQLiteCheckpointStore.rotate_keys()``
    re-encrypts every row under the current key, after which the old keys
    may be dropped.

    Thread-safe. Immutable, except that a ring built by ``from_callback`` adds
    the keys its provider returns when asked for a key id it lacks.

    Raises:
        InvalidEncryptionKeys: no key, a key id or key breaking the rules above,
            an id given twice, the same key under two ids, or ``current`` not in
            the ring.
    """

    __slots__ = ("_current", "_keys", "_lock", "_provider")

    VARIABLE: ClassVar[str] = KEYS_VARIABLE
    """The environment variable ``from_env`` reads by default (``SESSIONVISOR_KEYS``)."""

    def __init__(self, keys: KeyEntries, *, current: str | None = None) -> None:
        entries = _validated(keys)
        self._keys = dict(entries)
        self._current = entries[0][0] if current is None else current
        if self._current not in self._keys:
            raise InvalidEncryptionKeys(
                f"current key {self._current!r} is not among the keys given "
                f"({', '.join(repr(key_id) for key_id in self._keys)}); name one of them"
            )
        self._provider: KeyProvider | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(
        cls, variable: str = KEYS_VARIABLE, *, environ: Mapping[str, str] | None = None
    ) -> EncryptionKeys:
        """The keys in environment variable ``variable`` (default ``SESSIONVISOR_KEYS``).

        Format: comma-separated ``key_id:base64key`` entries, the current key
        first, e.g. ``SESSIONVISOR_KEYS="2025-06:q83v...=,2024-11:3Ta9...="``.
        Standard or URL-safe base64 of 32 bytes; spaces around entries are ignored.

        Args:
            variable: The variable's name.
            environ: Where to look it up; ``os.environ`` by default.

        Raises:
            InvalidEncryptionKeys: the variable is unset or empty, or an entry is
                malformed (the message names the entry by position and id only).
        """
        text = (os.environ if environ is None else environ).get(variable, "")
        if not text.strip():
            raise InvalidEncryptionKeys(
                f"environment variable {variable} is not set or empty; set it to "
                "'key_id:base64key[,key_id:base64key...]' with the current key first "
                f"({_NEW_KEY_HINT})"
            )
        entries = []
        for position, raw in enumerate(text.split(","), start=1):
            key_id, colon, encoded = raw.strip().partition(":")
            if not colon:
                raise InvalidEncryptionKeys(
                    f"entry {position} of {variable} has no ':'; write each entry as "
                    "key_id:base64key"
                )
            entries.append((key_id, _decode_base64(encoded.strip(), variable, position, key_id)))
        return cls(entries)

    @classmethod
    def from_callback(cls, provider: KeyProvider) -> EncryptionKeys:
        """The keys ``provider()`` returns (the current key first), e.g. from a secret manager.

        ``provider`` is called now, and called again each time a store asks the
        ring for a key id it lacks (a row another process wrote under a newer
        key): the ids it then returns are added for decryption; the current key
        stays the one from the first call. It is called on the thread that needs
        the key, never while the ring's lock is held but possibly while a store
        holds its own (it reads the key's record in the same transaction), so
        keep it quick; what it raises reaches that caller.

        Raises:
            InvalidEncryptionKeys: what ``provider`` returned breaks the rules.
        """
        ring = cls(provider())
        ring._provider = provider
        return ring

    @staticmethod
    def new_key() -> bytes:
        """32 fresh random bytes from the OS, fit to be a key."""
        return os.urandom(KEY_BYTES)

    @property
    def current_id(self) -> str:
        """The id of the key new rows are encrypted with."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id of the ring, the current one first."""
        with self._lock:
            rest = [key_id for key_id in self._keys if key_id != self._current]
        return (self._current, *rest)

    def _key_for(self, key_id: str) -> bytes | None:
        """The key named ``key_id``, asking the provider again (if any) when it is missing."""
        with self._lock:
            key = self._keys.get(key_id)
            provider = self._provider
        if key is not None or provider is None:
            return key
        fresh = dict(_validated(provider()))
        with self._lock:
            self._keys = {**fresh, **self._keys}  # keys already known (and checked) win
            return self._keys.get(key_id)

    def __repr__(self) -> str:
        return f"EncryptionKeys(current={self._current!r}, key_ids={self.key_ids!r})"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "EncryptionKeys cannot be pickled: keys never leave the process that loaded them; "
            "build the ring in each process that opens the store (e.g. EncryptionKeys.from_env())"
        )


def _validated(keys: KeyEntries) -> list[tuple[str, bytes]]:
    """The entries of ``keys`` as a list, checked against the rules of ``EncryptionKeys``."""
    if isinstance(keys, (str, bytes)):
        raise InvalidEncryptionKeys(
            "keys must be a mapping or (key_id, key) pairs, not a single "
            f"{type(keys).__name__}; for an environment variable use EncryptionKeys.from_env()"
        )
    pairs = list(keys.items()) if isinstance(keys, Mapping) else list(keys)
    if not pairs:
        raise InvalidEncryptionKeys(
            f"no encryption key was given; give at least one ({_NEW_KEY_HINT})"
        )
    seen: dict[bytes, str] = {}
    ids: set[str] = set()
    entries = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidEncryptionKeys("each key entry must be a (key_id, key) pair")
        key_id, key = pair
        if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
            raise InvalidEncryptionKeys(
                f"key id {key_id!r} is not 1-64 characters of A-Z a-z 0-9 . _ -; rename it"
            )
        if key_id in ids:
            raise InvalidEncryptionKeys(f"key id {key_id!r} is given twice; keep one entry per id")
        if not isinstance(key, bytes):
            raise InvalidEncryptionKeys(
                f"key {key_id!r} is of type {type(key).__name__}, not bytes; decode it first "
                "(e.g. base64.b64decode) or use EncryptionKeys.from_env()"
            )
        if len(key) != KEY_BYTES:
            raise InvalidEncryptionKeys(
                f"key {key_id!r} is {len(key)} bytes; AES-256-GCM needs exactly {KEY_BYTES} "
                f"random bytes ({_NEW_KEY_HINT})"
            )
        if key in seen:
            raise InvalidEncryptionKeys(
                f"keys {seen[key]!r} and {key_id!r} are the same key; give each id its own "
                "random key"
            )
        seen[key] = key_id
        ids.add(key_id)
        entries.append((key_id, key))
    return entries


def _decode_base64(encoded: str, variable: str, position: int, key_id: str) -> bytes:
    """The key of one ``from_env`` entry; the error never quotes the encoded key."""
    try:
        return base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        _bad_entry(variable, position, key_id)


def _bad_entry(variable: str, position: int, key_id: str) -> NoReturn:
    raise InvalidEncryptionKeys(
        f"entry {position} ({key_id!r}) of {variable} is not valid base64; write it as "
        f"key_id:base64key ({_NEW_KEY_HINT})"
    ) from None


for _cls in (EncryptionKeys,):
    _cls.__module__ = "supervisor"
