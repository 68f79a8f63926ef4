"""Strict msgpack encoding of plain values, the wire format of snapshots.

*Plain* means: ``None``, ``bool``, ``int`` (64-bit range), ``float``, ``str``,
``bytes`` (``bytearray``/``memoryview`` are written as bytes), ``list`` and
``tuple`` (both read back as ``list``), ``dict`` with ``str`` keys, and
timezone-aware ``datetime``. Exact types only: a ``str`` or ``dict`` subclass,
an enum member, a set or any other object is refused, so nothing is stored
that would read back as something else. Nothing is ever pickled.

Datetimes use msgpack's standard Timestamp extension (type -1), so any msgpack
library reads them; they read back as UTC datetimes equal to the original
instant. Any other extension type is refused when reading.

Encoding is fast when the value is plain (the C packer plus a level-by-level
key walk whose inner loops run in C) and only when it is not does a slower walk
run to name the path of the offending value. Decoding is done by msgpack's C
unpacker alone when the input holds no bytes value (the common case); input
with bytes values, or bad input, is decoded again with a per-map key check,
which also names the problem. Both functions are pure and thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from itertools import chain
from typing import Any

import msgpack

from actors.errors import SnapshotDecodeError, SnapshotEncodeError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "array_header",
    "check_keys",
    "check_plain",
    "cut_items",
    "decode_plain",
    "encode_plain",
    "join_path",
    "map_header",
    "pack_each",
    "pack_plain",
]

_MAX_DEPTH = 500  # the path-naming walk gives up here; msgpack's own limit is 511

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
"""The range of integers msgpack stores (int64's lowest, uint64's highest)."""
_SCALARS = frozenset((type(None), bool, int, float, str, bytes, bytearray, memoryview))
_CONTAINERS = frozenset((dict, list, tuple))
_chain = chain.from_iterable


class _Refused(Exception):
    """Raised inside the packer's ``default`` hook; triggers the slow path-naming walk."""


_PACK_ERRORS = (_Refused, TypeError, ValueError, OverflowError, RecursionError)
"""What ``msgpack.packb`` raises for a value that is not plain."""


def join_path(parent: str, key: object) -> str:
    """Path of ``key`` under ``parent``: ``a.b`` for string keys, ``a[3]`` for anything else."""
    if isinstance(key, str):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{key!r}]"


def array_header(count: int) -> bytes:
    """The msgpack header of an array of ``count`` items (the items' encodings follow it)."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def map_header(count: int) -> bytes:
    """The msgpack header of a map of ``count`` pairs (key and value encodings follow it)."""
    if count < 16:
        return bytes((0x80 | count,))
    if count < 1 << 16:
        return b"\xde" + count.to_bytes(2, "big")
    return b"\xdf" + count.to_bytes(4, "big")


def _default(obj: object) -> object:
    if type(obj) is tuple:
        return list(obj)
    raise _Refused


def _check_keys(value: object) -> None:
    """Raise TypeError if any dict under ``value`` has a non-``str`` key (fast, no paths).

    Breadth-first, one level at a time, so the per-node work runs in C: one
    ``str.join`` over every key of the level's dicts (it raises on the first
    non-``str`` key) and one comprehension keeping the child containers.
    Call it only on a value ``packb`` accepted: that rules out cycles.
    """
    level: list[Any]
    if type(value) is dict:  # the first level on its own: most often all there is (usage)
        "".join(value)
        if _CONTAINERS.isdisjoint(map(type, value.values())):
            return
        level = [child for child in value.values() if type(child) in _CONTAINERS]
    else:
        level = [value] if type(value) in _CONTAINERS else []
    while level:
        dicts = [node for node in level if type(node) is dict]
        children: Iterator[Any] = _chain(map(dict.values, dicts))
        if dicts:
            "".join(_chain(dicts))  # iterating a dict yields its keys
            if len(dicts) != len(level):
                children = chain(children, _chain([n for n in level if type(n) is not dict]))
        else:
            children = _chain(level)
        level = [child for child in children if type(child) in _CONTAINERS]


def _surrogate(text: str) -> str:
    """What is wrong with ``text`` if it cannot be UTF-8 ('' if it can)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"text with a lone surrogate at index {exc.start} ({text[exc.start]!r}, e.g. from an "
            "undecodable file name); escape it first, e.g. "
            "text.encode('utf-8', 'backslashreplace').decode()"
        )
    return ""


def _problem(value: Any, path: str, depth: int, active: set[int]) -> tuple[str, object, str]:
    """Find the first non-plain value under ``value``: (path, value, problem) or ('', None, '')."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is int and not INT_MIN <= value <= INT_MAX:
            return path, value, "integer out of the 64-bit range msgpack can store"
        if kind is str and (problem := _surrogate(value)):
            return path, value, problem
        return "", None, ""
    if kind is datetime:
        if value.utcoffset() is None:
            return path, value, "naive datetime; attach a timezone (e.g. datetime.UTC)"
        return "", None, ""
    if kind is not dict and kind is not list and kind is not tuple:
        return path, value, f"{kind.__module__}.{kind.__qualname__} is not a plain value"
    if depth >= _MAX_DEPTH:
        return path, value, f"containers nested deeper than {_MAX_DEPTH} levels"
    if id(value) in active:
        return path, value, "reference cycle: the container contains itself"
    active.add(id(value))
    try:
        if kind is dict:
            for key, child in value.items():
                child_path = join_path(path, key)
                if type(key) is not str:
                    return child_path, key, f"dict key {key!r} is not a str"
                if problem := _surrogate(key):
                    return child_path, key, f"dict key: {problem}"
                found = _problem(child, child_path, depth + 1, active)
                if found[2]:
                    return found
        else:
            for index, child in enumerate(value):
                found = _problem(child, join_path(path, index), depth + 1, active)
                if found[2]:
                    return found
    finally:
        active.discard(id(value))
    return "", None, ""


def _raise_problem(value: object, root: str, cause: BaseException) -> None:
    path, bad, problem = _problem(value, root, 0, set())
    if not problem:  # pragma: no cover - the packer refused something the walk accepts
        raise SnapshotEncodeError(root, value, f"msgpack refused the value: {cause}") from cause
    raise SnapshotEncodeError(path, bad, problem) from None


def check_plain(value: object, *, root: str = "") -> None:
    """Raise ``SnapshotEncodeError`` naming the path if ``value`` is not plain (slow walk)."""
    path, bad, problem = _problem(value, root, 0, set())
    if problem:
        raise SnapshotEncodeError(path, bad, problem)


def encode_plain(value: object, *, root: str = "") -> bytes:
    """Encode a plain value as msgpack bytes.

    Args:
        value: The value to encode (see the module docstring for what is plain).
        root: Path prefix used in error messages, e.g. ``state``.

    Returns:
        The msgpack bytes.

    Raises:
        SnapshotEncodeError: some value is not plain; its path and the reason are named.
    """
    packed = pack_plain(value, root=root)
    check_keys(value, root=root)
    return packed


_packers: list[msgpack.Packer] = []
"""Idle packers, reused: ``msgpack.packb`` builds a new ``Packer`` and its buffer per call,
half the cost of encoding a small value (a checkpoint body, a message). A thread takes
one with ``pop`` and puts it back with ``append`` (both atomic), so no two threads ever
share one; a packer whose encoding failed is dropped."""

POOLED_ENCODING_MAX = 1 << 20
"""A packer whose last encoding was longer (bytes) is dropped, not kept: its buffer grew to
that length, and msgpack never shrinks it."""


def _packb(value: object) -> bytes:
    """msgpack with the options of every snapshot encoding (``pack_plain``, ``pack_each``)."""
    try:
        packer = _packers.pop()
    except IndexError:
        packer = msgpack.Packer(
            use_bin_type=True, strict_types=True, datetime=True, default=_default
        )
    packed: bytes = packer.pack(value)
    if len(packed) <= POOLED_ENCODING_MAX:
        _packers.append(packer)
    return packed


def pack_each(values: list[Any]) -> list[bytes] | None:
    """``[pack_plain(v) for v in values]`` in one ``packb`` call: the list is encoded as an
    array, whose items are encoded exactly as each alone, then cut at their boundaries.

    For many small values known to be plain (a resumed history), where a call per value
    costs more than its bytes. ``None`` if any value cannot be encoded: the caller then
    takes ``pack_plain`` value by value, which names the one refused.
    """
    try:
        data = _packb(values)
    except _PACK_ERRORS:
        return None
    parts = cut_items(data, len(values), array=True)
    assert parts is not None  # packb's own array of exactly that many items
    return parts


def cut_items(data: bytes, count: int, *, array: bool = False) -> list[bytes] | None:
    """The encodings of ``count`` msgpack items back to back in ``data`` (after an array
    header, with ``array``), each as its own ``bytes``; ``None`` unless ``data`` holds
    exactly that: an encoding reused from elsewhere is cut only when it fits."""
    reader = msgpack.Unpacker(max_buffer_size=max(len(data), 1))
    reader.feed(data)
    try:
        if array and reader.read_array_header() != count:
            return None
        skip, tell = reader.skip, reader.tell
        start = tell()
        parts = []
        for _ in range(count):
            skip()
            end = tell()
            parts.append(data[start:end])
            start = end
    except (msgpack.UnpackException, ValueError):  # truncated or malformed
        return None
    return parts if start == len(data) else None


def pack_plain(value: object, *, root: str = "") -> bytes:
    """The first half of ``encode_plain``: encode, checking everything but dict key types.

    A non-``str`` key is encoded (as msgpack's type for it) instead of refused,
    so the bytes still tell a ``str`` key from any other. Use it only with
    ``check_keys``: see ``supervisor._message_log``, which checks just the part
    of a message list whose encoding differs from one already fully checked.

    Raises:
        SnapshotEncodeError: as ``encode_plain``, for anything but a key's type.
    """
    try:
        packed = _packb(value)
    except _PACK_ERRORS as exc:
        _raise_problem(value, root, exc)
        raise  # pragma: no cover - _raise_problem always raises
    return packed


def check_keys(value: object, *, root: str = "", start: int = 0) -> None:
    """The second half of ``encode_plain``: refuse a non-``str`` dict key anywhere in ``value``.

    Call it only on a value ``pack_plain`` accepted (that rules out cycles).

    Args:
        value: The value to check.
        root: Path prefix used in error messages.
        start: For a list, check only ``value[start:]``; the caller vouches for the rest.

    Raises:
        SnapshotEncodeError: a key is not a ``str``; its path is named.
    """
    try:
        if start and type(value) is list:
            _check_keys(value[start:])
        else:
            _check_keys(value)
    except TypeError as exc:
        _raise_problem(value, root, exc)


# bin 8, bin 16 and bin 32 headers of an empty bytes value: their type byte, then a zero
_EMPTY_BIN = ((0xC4, b"\xc4\x00"), (0xC5, b"\xc5\x00"), (0xC6, b"\xc6\x00"))


def _may_hold_empty_bin(data: bytes | bytearray) -> bool:
    """Whether ``data`` contains a bin header byte followed by a zero byte anywhere.

    Each type byte is looked for with ``find`` (memchr, about 1 us per 32 KiB),
    and only its few occurrences are checked; when there are many (non-ASCII
    text has them) one two-byte search settles it instead.
    """
    for lead, marker in _EMPTY_BIN:
        at = data.find(lead)
        for _ in range(16):
            if at < 0:
                break
            if data[at + 1 : at + 2] == b"\x00":
                return True
            at = data.find(lead, at + 1)
        else:
            if marker in data:
                return True
    return False


class _BadKey(Exception):
    pass


def _object_hook(obj: dict[Any, Any]) -> dict[Any, Any]:
    try:
        "".join(obj)
    except TypeError:
        raise _BadKey from None
    return obj


def _ext_hook(code: int, data: bytes) -> object:
    raise SnapshotDecodeError(f"unknown msgpack extension type {code} ({len(data)} bytes)")


def _decode_error(exc: BaseException) -> SnapshotDecodeError:
    if isinstance(exc, _BadKey):
        return SnapshotDecodeError("a map key is not a string")
    if isinstance(exc, msgpack.ExtraData):
        return SnapshotDecodeError("trailing bytes after the msgpack value")
    if isinstance(exc, UnicodeDecodeError):
        return SnapshotDecodeError("a string is not valid UTF-8")
    text = str(exc) or type(exc).__name__
    return SnapshotDecodeError(f"not valid msgpack ({type(exc).__name__}: {text})")


def _unpackb(data: bytes | bytearray | memoryview, **options: Any) -> Any:
    """``msgpack.unpackb`` with the options both decode paths share."""
    return msgpack.unpackb(
        data,
        raw=False,
        strict_map_key=True,
        use_list=True,
        timestamp=3,
        ext_hook=_ext_hook,
        **options,
    )


def decode_plain(data: object) -> Any:
    """Decode msgpack bytes written by ``encode_plain`` back into plain values.

    Arrays come back as lists, maps as dicts, timestamps as UTC datetimes.

    Args:
        data: ``bytes``, ``bytearray`` or ``memoryview``.

    Returns:
        The decoded value.

    Raises:
        SnapshotDecodeError: anything malformed: not bytes, not msgpack, truncated,
            trailing bytes, invalid UTF-8, a non-string map key, an unknown extension
            type, or nesting deeper than msgpack's limit.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SnapshotDecodeError(f"expected bytes, got {type(data).__name__}")
    # Fast path, all in C: strict_map_key refuses every key but str and bytes, and
    # max_bin_len=0 every non-empty bytes value, so only an empty bytes key could slip
    # through, and every encoding of one is a bin type byte followed by 0. Input with
    # bytes values (or any error, or a memoryview, which `find` cannot search) takes
    # the slow path, which checks each map's keys in Python and names the problem.
    if type(data) is not memoryview and not _may_hold_empty_bin(data):
        try:
            return _unpackb(data, max_bin_len=0)
        except Exception:  # the slow path below finds and names the problem
            pass
    try:
        return _unpackb(data, object_hook=_object_hook)
    except SnapshotDecodeError:
        raise
    except Exception as exc:  # msgpack signals malformed input with many types
        raise _decode_error(exc) from None
