"""Splitting a snapshot into a small *body* and its message bytes, and joining them back.

The SQLite store keeps a session's messages once, in an append-only log, and
each checkpoint as a body plus "the first N bytes of the log". This module is
the pure part of that scheme:

* ``split`` encodes the snapshot with ``state["messages"]`` replaced by
  ``None`` (the body) and encodes the message list separately; the log bytes
  are that list's msgpack array *without* its header, i.e. the message
  encodings back to back, so a longer conversation's bytes start with a
  shorter one's.
* ``join`` decodes the body, decodes the log prefix under a fresh array
  header and puts the list back, then builds the snapshot through
  ``Snapshot.from_dict``, so migrations see the whole snapshot.

The sizes line up exactly: ``None`` is one byte, so
``len(body) - 1 + len(array)`` is the size of ``snapshot.serialize()``.
Pure functions, thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from actors import (
    MigrationRegistry,
    Snapshot,
    SnapshotDecodeError,
    decode_plain,
    encode_plain,
)
from actors._codec import check_keys, pack_plain

__all__ = ["KnownLog", "SplitSnapshot", "assemble", "digest", "join", "split"]


@dataclass(frozen=True, slots=True)
class SplitSnapshot:
    """A snapshot cut for storage.

    Attributes:
        body: Encoded snapshot; with ``messages=None`` in the state when
            ``messages`` is not None, else the complete ``serialize()`` bytes.
        messages: The message encodings back to back, or None when the state
            has no message list.
        count: Number of messages.
        size: Length of ``snapshot.serialize()``.
        extends: Whether ``messages`` starts with the ``known`` log given to ``split``.
    """

    body: bytes
    messages: memoryview | None
    count: int
    size: int
    extends: bool = False


@dataclass(frozen=True, slots=True)
class KnownLog:
    """Message bytes ``split`` produced before: a log the next save is likely to extend.

    Attributes:
        data: The encodings of the first ``count`` messages, back to back.
        count: How many messages ``data`` holds.
    """

    data: bytes | memoryview
    count: int


def _array_header_length(first: int) -> int:
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    raise AssertionError(f"not a msgpack array header: {first:#x}")  # pragma: no cover


def split(snapshot: Snapshot, known: KnownLog | None = None) -> SplitSnapshot:
    """Cut ``snapshot`` into body and message bytes.

    Strict as ``serialize``. With ``known`` (a log an earlier ``split`` returned),
    when the new message bytes start with exactly ``known.data``, the dict keys
    of the first ``known.count`` messages are not walked again: equal msgpack
    bytes mean values of equal types (a ``str`` key and any other key encode
    differently), and those bytes were checked in full when first produced.
    Everything is still encoded; only the Python-level key walk is saved.

    Raises:
        actors.SnapshotEncodeError: a value is not plain (path as in ``serialize``).
    """
    plain = snapshot.to_dict()
    state = plain["state"]
    messages = state.get("messages")
    if type(messages) is not list:
        body = encode_plain(plain)
        return SplitSnapshot(body, None, 0, len(body))
    plain["state"] = {**state, "messages": None}
    body = encode_plain(plain)
    root = "state.messages"
    array = pack_plain(messages, root=root)
    start = _array_header_length(array[0])
    extends = (
        known is not None and known.count <= len(messages) and array.startswith(known.data, start)
    )
    check_keys(messages, root=root, start=known.count if extends and known else 0)
    view = memoryview(array)[start:]
    return SplitSnapshot(body, view, len(messages), len(body) - 1 + len(array), extends)


def digest(data: bytes | memoryview) -> bytes:
    """The digest the log and checkpoints are checked with (SHA-256)."""
    return hashlib.sha256(data).digest()


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
) -> Snapshot:
    """Rebuild the snapshot ``split`` cut (``messages=None``: the body is complete).

    Raises:
        SnapshotDecodeError: anything malformed.
    """
    plain = decode_plain(body)
    if messages is not None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise SnapshotDecodeError(f"message count must be a non-negative int, got {count!r}")
        state = plain.get("state") if isinstance(plain, dict) else None
        if not isinstance(state, dict) or state.get("messages", 0) is not None:
            raise SnapshotDecodeError("body has no message placeholder in its state")
        header: bytes = msgpack.Packer().pack_array_header(count)
        state["messages"] = decode_plain(header + messages)
    return Snapshot.from_dict(plain, migrations=migrations)
