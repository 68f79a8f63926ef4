"""Splitting a snapshot into a small *body*, its message bytes and its state parts, and back.

The SQLite store keeps a session's messages once, in an append-only log, its
large plugin and provider states once per content (``_state_parts``), and
each checkpoint as a body plus "the first N bytes of the log" plus the
digests of its parts. This module is the pure part of that scheme:

* ``split`` encodes the snapshot with ``state["messages"]`` and each large
  state part replaced by ``None`` (the body); the log bytes are the message
  list's msgpack array *without* its header, i.e. the message encodings back
  to back, so a longer conversation's bytes start with a shorter one's. A
  snapshot of a running session brings those encodings with it
  (``actors.snapshot.encoded_messages``): nothing of its history is encoded again.
* ``seal`` and ``verify`` give each stored body its checksum, over the body,
  its message-log reference and its part references, so a damaged or edited
  row is refused. The seal also records whether the messages are a session's
  own encodings (``SplitSnapshot.checked``): ``join`` then vouches for them
  (``actors.snapshot.mark_checked``), and a resume does not check them again.
* ``join`` decodes the body, puts the parts back, decodes the log prefix under
  a fresh array header and puts the list back, then builds the snapshot
  through ``Snapshot.from_dict``, so migrations see the whole snapshot.

The sizes line up exactly: ``None`` is one byte, so ``len(body) - 1 +
len(array)``, less one byte and plus the size of each part, is the size of
``snapshot.serialize()``. Pure functions, thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

from actors import (
    SNAPSHOT_MIGRATIONS,
    MigrationRegistry,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    decode_plain,
)
from actors._codec import array_header, check_keys, pack_plain
from actors._history import EncodedMessages
from actors._record import record
from actors.snapshot import mark_checked, storage_dict
from supervisor._state_parts import StatePart, put_parts, take_parts
from supervisor.checkpoint_store import SnapshotTooNew

__all__ = [
    "SEAL_KINDS",
    "KnownLog",
    "LogRef",
    "MessageBytes",
    "SplitSnapshot",
    "assemble",
    "check_identity",
    "check_version",
    "digest",
    "in_checkpoint",
    "join",
    "seal",
    "split",
    "verify",
]

LogRef = tuple[Any, Any, Any, Any]
"""A checkpoint's message-log reference as stored: ``(gen, bytes, count, digest)``, or Nones."""

_SEAL_BLAKE2B = b"\x01"
"""Tag of a seal that is an unkeyed BLAKE2b-128 checksum."""
_SEAL_BLAKE2B_CHECKED = b"\x02"
"""Tag of the same checksum over a row whose messages a session encoded itself
(``checked``); the hash covers the claim too, so changing the tag breaks the seal."""
SEAL_KINDS = frozenset((_SEAL_BLAKE2B, _SEAL_BLAKE2B_CHECKED))
"""The tag bytes of plaintext seals."""
_SEAL_PERSON = b"sv-checkpoint"


@record
class KnownLog:
    """Message bytes an earlier ``split`` produced: a log the next save is likely to extend.

    Attributes:
        count: How many messages the log holds.
        length: Its length in bytes.
        data: The encodings of those messages, back to back; ``None`` when the
            log is known by its ``lineage`` instead.
        lineage: The ``EncodedMessages.parts`` list the log was made from, if it
            was: a snapshot whose encodings share that list agrees with the log
            on its first ``count`` messages without a byte being compared.
    """

    count: int
    length: int
    data: bytes | memoryview | None = None
    lineage: object | None = None


class MessageBytes:
    """The message bytes of a split snapshot: the log a checkpoint needs.

    The whole log is built only when asked for (``whole``): a save that
    extends the log it wrote last needs only what follows it (``after``).
    Immutable once made; thread-safe.
    """

    __slots__ = ("_encoded", "_tail", "_tail_from", "_whole", "count", "length")

    def __init__(
        self,
        count: int,
        length: int,
        *,
        whole: memoryview | None,
        encoded: EncodedMessages | None,
        tail_from: int = -1,
        tail: bytes | memoryview = b"",
    ) -> None:
        self.count = count
        self.length = length
        self._whole = whole
        self._encoded = encoded
        self._tail_from = tail_from
        self._tail = tail

    def whole(self) -> memoryview:
        """All of the log's bytes."""
        if self._whole is None:
            assert self._encoded is not None
            self._whole = memoryview(self._encoded.data())
        return self._whole

    def after(self, start: int) -> bytes | memoryview:
        """The log's bytes from byte ``start`` on."""
        if start == self._tail_from:
            return self._tail
        return self.whole()[start:]

    def known(self) -> KnownLog:
        """These bytes as a ``KnownLog``, for the next ``split`` of the session."""
        if self._encoded is not None:
            return KnownLog(self.count, self.length, None, self._encoded.parts)
        return KnownLog(self.count, self.length, self.whole())


@record
class SplitSnapshot:
    """A snapshot cut for storage.

    Attributes:
        body: Encoded snapshot; with ``messages=None`` in the state when
            ``messages`` is not None, else holding the messages (if any).
        messages: The message encodings back to back, or None when the state
            has no message list or an empty one (a new session's first checkpoint
            then needs no log).
        count: Number of messages.
        size: Length of ``snapshot.serialize()``.
        extends: Whether ``messages`` starts with the ``known`` log given to ``split``.
        parts: The plugin and provider states taken out of the body (``None`` there),
            to be stored once per content (see ``_state_parts``).
        checked: Whether ``messages`` are the encodings a session made of its own
            ``Message`` objects (``encoded_messages``): valid messages, as
            ``Message.to_dict`` writes them. Not so for encodings made here.
    """

    body: bytes
    messages: MessageBytes | None
    count: int
    size: int
    extends: bool = False
    parts: tuple[StatePart, ...] = ()
    checked: bool = False


def _array_header_length(first: int) -> int:
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    raise AssertionError(f"not a msgpack array header: {first:#x}")  # pragma: no cover


def split(
    snapshot: Snapshot, known: KnownLog | None = None, *, parts: bool = True
) -> SplitSnapshot:
    """Cut ``snapshot`` into body and message bytes.

    Strict as ``serialize``. A snapshot of a running session carries its
    messages encoded already (``actors.encoded_messages``): those bytes are
    used as they are, and when they share ``known``'s lineage only the
    messages after ``known.count`` are even joined. Otherwise the messages are
    encoded here; when their bytes start with exactly ``known.data``, the dict
    keys of the first ``known.count`` messages are not walked again: equal
    msgpack bytes mean values of equal types (a ``str`` key and any other key
    encode differently), and those bytes were checked in full when first produced.
    With ``parts=False`` large states stay in the body (an encrypted store's choice).

    Raises:
        actors.SnapshotEncodeError: a value is not plain (path as in ``serialize``).
    """
    try:
        return _split(snapshot, known, parts)
    except SnapshotEncodeError:
        snapshot.serialize()  # raises the error a full encoding reports (the same type)
        raise  # pragma: no cover - serialize refuses whatever a piece of it refused


def _split(snapshot: Snapshot, known: KnownLog | None, take: bool) -> SplitSnapshot:
    plain, encoded = storage_dict(snapshot)  # a running session's message list is not made
    state = plain["state"] = dict(plain["state"])
    parts = take_parts(state) if take else ()
    # each part left a None (one byte) in the body
    parts_size = sum(len(part.data) - 1 for part in parts) if parts else 0
    messages: list[Any] = []
    if encoded is not None:
        count = encoded.count
        if not count:
            state["messages"] = messages
    else:
        held = state.get("messages")
        if type(held) is list:
            messages = held
        count = len(messages)
    if not count:  # nothing for a log: the body holds the messages (if any)
        body = _encoded_body(plain)
        return SplitSnapshot(body, None, 0, len(body) + parts_size, parts=parts)
    state["messages"] = None
    body = _encoded_body(plain)
    if encoded is not None:
        log, extends = _reused(encoded, known)
    else:
        log, extends = _encoded_here(messages, known)
    size = len(body) - 1 + len(array_header(count)) + log.length + parts_size
    return SplitSnapshot(body, log, count, size, extends, parts, checked=encoded is not None)


def _encoded_body(plain: dict[str, Any]) -> bytes:
    """``encode_plain(plain)`` of a snapshot's ``to_dict``, whose keys, and the keys of its
    ``state`` and ``metadata``, are ``str`` already (``Snapshot`` refuses any other): only
    the containers inside those two have their keys walked.

    Raises:
        SnapshotEncodeError: a value is not plain (the path may be less precise than
            ``serialize``'s: ``split`` asks it for the error to raise).
    """
    body = pack_plain(plain)
    for part in ("state", "metadata"):
        for value in plain[part].values():
            if type(value) in _CONTAINERS and value:
                check_keys(value, root=part)
    return body


_CONTAINERS = (dict, list, tuple)


def _reused(encoded: EncodedMessages, known: KnownLog | None) -> tuple[MessageBytes, bool]:
    """The log of a snapshot whose messages are encoded already."""
    count = encoded.count
    if known is not None and known.count <= count and known.lineage is encoded.parts:
        tail = encoded.data(known.count)
        length = known.length + len(tail)
        return MessageBytes(
            count, length, whole=None, encoded=encoded, tail_from=known.length, tail=tail
        ), True
    data = encoded.data()
    whole = memoryview(data)
    if (
        known is not None
        and known.data is not None
        and known.count <= count
        and data.startswith(known.data)
    ):
        return MessageBytes(
            count, len(data), whole=whole, encoded=encoded,
            tail_from=known.length, tail=whole[known.length :],
        ), True  # fmt: skip
    return MessageBytes(count, len(data), whole=whole, encoded=encoded), False


def _encoded_here(messages: list[Any], known: KnownLog | None) -> tuple[MessageBytes, bool]:
    root = "state.messages"
    array = pack_plain(messages, root=root)
    start = _array_header_length(array[0])
    extends = (
        known is not None
        and known.data is not None
        and known.count <= len(messages)
        and array.startswith(known.data, start)
    )
    check_keys(messages, root=root, start=known.count if extends and known else 0)
    view = memoryview(array)[start:]
    if extends and known is not None:
        tail = view[known.length :]
        return MessageBytes(
            len(messages), len(view), whole=view, encoded=None, tail_from=known.length, tail=tail
        ), True
    return MessageBytes(len(messages), len(view), whole=view, encoded=None), False


def digest(data: bytes | memoryview) -> bytes:
    """The digest the log and checkpoints are checked with (SHA-256)."""
    return hashlib.sha256(data).digest()


def seal(body: bytes, ref: LogRef, parts: bytes | None = None, *, checked: bool = False) -> bytes:
    """The checksum stored with a checkpoint body: a tag byte, then BLAKE2b-128 of the
    message-log reference ``ref``, the state part references ``parts`` (if any) and
    the body; with ``checked`` (see ``SplitSnapshot.checked``) another tag, and the
    claim hashed with the rest.

    It covers everything ``load`` reads from the row to rebuild the snapshot;
    the session and checkpoint ids are inside the body. The tag says how the
    rest was computed, so that a keyed MAC (with encryption) can be a second
    kind later, and rows of both kinds can be told apart. A row without parts
    is sealed as before parts existed.
    """
    covered: list[Any] = list(ref) if parts is None else [*ref, parts]
    if checked:
        covered.append("checked")
    # ``pack_plain``: ``msgpack.packb``'s bytes for these plain values, by a reused packer
    hasher = hashlib.blake2b(pack_plain(covered), digest_size=16, person=_SEAL_PERSON)
    hasher.update(body)
    return (_SEAL_BLAKE2B_CHECKED if checked else _SEAL_BLAKE2B) + hasher.digest()


def verify(check: object, body: object, ref: LogRef, parts: object = None) -> bool:
    """Check a stored body and reference against their stored ``seal``; whether it was
    sealed as ``checked``.

    Raises:
        SnapshotDecodeError: the seal is missing, of an unknown kind, or does
            not match: the row was damaged or edited since it was saved.
    """
    if not isinstance(body, bytes):
        raise SnapshotDecodeError(f"stored body is {type(body).__name__}, not bytes")
    if not isinstance(check, bytes) or check[:1] not in SEAL_KINDS:
        raise SnapshotDecodeError("stored checksum is missing or of an unknown kind")
    if parts is not None and not isinstance(parts, bytes):
        raise SnapshotDecodeError(f"stored part references are {type(parts).__name__}, not bytes")
    checked = check[:1] == _SEAL_BLAKE2B_CHECKED
    if not hmac.compare_digest(check, seal(body, ref, parts, checked=checked)):
        raise SnapshotDecodeError(
            "checksum mismatch: the stored checkpoint was damaged or edited after it was saved"
        )
    return checked


def assemble(chunks: Sequence[tuple[Any, Any]], length: int, expected: bytes) -> bytes:
    """Concatenate log chunks ``(start, data)`` into the first ``length`` bytes and verify them.

    Raises:
        SnapshotDecodeError: a chunk is missing or damaged, or the bytes do not
            match the digest recorded with the checkpoint.
    """
    parts = []
    offset = 0
    for start, data in chunks:
        if start != offset or not isinstance(data, bytes):
            raise SnapshotDecodeError(f"message log chunk at byte {offset} is missing or damaged")
        parts.append(data)
        offset += len(data)
        if offset >= length:
            break
    if offset < length:
        raise SnapshotDecodeError(f"message log holds {offset} bytes, checkpoint needs {length}")
    log = b"".join(parts)[:length]
    if digest(log) != expected:
        raise SnapshotDecodeError("message log bytes do not match the checkpoint's digest")
    return log


def join(
    body: object,
    messages: bytes | None,
    count: int,
    migrations: MigrationRegistry | None = None,
    parts: Sequence[tuple[str, str | None, bytes]] = (),
    *,
    checked: bool = False,
) -> Snapshot:
    """Rebuild the snapshot ``split`` cut (``messages=None``: the body holds them).

    ``parts`` are the state parts ``split`` took out, as ``(kind, name, data)``,
    each checked against its digest already (``_state_parts.checked``). With
    ``checked`` (what ``verify`` found, the log bytes verified against their
    digest) the messages are vouched for (``mark_checked``), with their log bytes,
    unless a migration ran, which may have changed them.

    Raises:
        SnapshotTooNew: the body is of a snapshot schema newer than ``migrations`` reads.
        SnapshotDecodeError: anything malformed.
    """
    plain = decode_plain(body)
    registry = SNAPSHOT_MIGRATIONS if migrations is None else migrations
    check_version(plain, registry)
    if parts:
        put_parts(plain, parts)
    if messages is not None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise SnapshotDecodeError(f"message count must be a non-negative int, got {count!r}")
        state = plain.get("state") if isinstance(plain, dict) else None
        if not isinstance(state, dict) or state.get("messages", 0) is not None:
            raise SnapshotDecodeError("body has no message placeholder in its state")
        header = array_header(count)
        state["messages"] = decode_plain(header + messages)
    current = isinstance(plain, dict) and plain.get("schema_version") == registry.current_version
    snapshot = Snapshot.from_dict(plain, migrations=migrations)
    if checked and current and messages is not None:
        mark_checked(snapshot, messages)
    return snapshot


def check_version(plain: object, registry: MigrationRegistry) -> None:
    """Refuse a decoded snapshot of a schema newer than ``registry`` reads, as
    ``SnapshotTooNew`` (not damage: see there); anything else passes (``Snapshot.from_dict``
    checks the rest).

    Raises:
        SnapshotTooNew: its ``schema_version`` is newer than ``registry.current_version``.
    """
    found = plain.get("schema_version") if isinstance(plain, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > registry.current_version:
        raise SnapshotTooNew(
            f"schema_version {found} is newer than the supported version "
            f"{registry.current_version}: a newer sessionvisor wrote it; upgrade sessionvisor "
            "to read it"
        )


def check_identity(snapshot: Snapshot, session_id: str, checkpoint_id: str) -> None:
    """Refuse a row that holds another checkpoint's bytes (one copied over another).

    Raises:
        SnapshotDecodeError: ``snapshot`` is not checkpoint ``checkpoint_id`` of ``session_id``.
    """
    if (snapshot.session_id, snapshot.checkpoint_id) != (session_id, checkpoint_id):
        raise SnapshotDecodeError(
            f"stored bytes belong to checkpoint {snapshot.checkpoint_id!r} "
            f"of session {snapshot.session_id!r}"
        )


def in_checkpoint(
    error: SnapshotDecodeError, session_id: str, checkpoint_id: str
) -> SnapshotDecodeError:
    """``error`` again, naming the checkpoint it was found in (for ``load``'s caller); of
    its class when that is ``SnapshotTooNew``."""
    kind = SnapshotTooNew if isinstance(error, SnapshotTooNew) else SnapshotDecodeError
    return kind(f"checkpoint {checkpoint_id!r} of session {session_id!r}: {error.reason}")
