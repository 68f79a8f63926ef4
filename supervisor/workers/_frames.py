"""Frames on a worker's pipe: ``read_frame`` and ``write_frame``, straight on its descriptor.

The wire format is ``multiprocessing.Connection``'s own (a 4-byte big-endian
signed length, or ``-1`` and an 8-byte unsigned one for frames over 2 GiB,
then the bytes), so either end may still use ``send_bytes``/``recv_bytes``,
and ``Connection.poll`` still tells whether a frame waits. What differs is the
cost: ``recv_bytes`` goes through half a dozen Python calls and two
``BytesIO`` buffers per frame and ``send_bytes`` through as many checks; a
``send`` round trip to a worker passes four of them, on its critical path.
Here a small frame is one ``os.write`` and two ``os.read`` calls.

POSIX only, as worker mode is (the pipe is a socket pair; ``os.read``,
``os.write`` and ``os.writev`` work on its descriptor). Nothing is buffered: a
frame is read exactly, so the descriptor's readiness (``epoll``) says whether a
frame waits, as with ``Connection``. Both functions go through
``Connection.fileno``, which raises ``OSError`` once the connection is closed,
as ``Connection``'s own methods do. Neither takes a lock: the callers see to it
that one thread at a time reads, and one writes.
"""

from __future__ import annotations

import os
import struct
from multiprocessing.connection import Connection

__all__ = ["frame_header", "read_frame", "write_frame"]

_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_LONG = 0x7FFFFFFF
"""Frames longer than this carry ``-1`` and an 8-byte length (as ``Connection`` does)."""

_COPY_LIMIT = 16384
"""Frames up to this size go out in one ``write`` with their header (a copy is cheaper
than a second system call); longer ones in one ``writev``, without a copy."""


def frame_header(length: int) -> bytes:
    """The header of a frame of ``length`` bytes."""
    if length > _LONG:
        return _LENGTH.pack(-1) + _LONG_LENGTH.pack(length)
    return _LENGTH.pack(length)


def write_frame(conn: Connection, data: bytes) -> None:
    """Write ``data`` as one frame (blocking until it is all written).

    Raises:
        OSError: the connection is closed, or the other end is gone (``BrokenPipeError``).
    """
    fd = conn.fileno()
    if len(data) <= _COPY_LIMIT:
        out = frame_header(len(data)) + data
        written = os.write(fd, out)
        if written < len(out):  # a blocking pipe writes it all, unless a signal came
            _write_all(fd, memoryview(out)[written:])
        return
    parts = [frame_header(len(data)), data]
    written = os.writev(fd, parts)
    total = len(parts[0]) + len(data)
    if written < total:
        _write_all(fd, memoryview(b"".join(parts))[written:])


def _write_all(fd: int, rest: memoryview) -> None:
    while rest:
        rest = rest[os.write(fd, rest) :]


def read_frame(conn: Connection) -> bytes:
    """Read one frame (blocking until it is all in).

    A receive timeout set on the socket (``SO_RCVTIMEO``) bounds the wait for a
    frame's first byte only: once a frame has begun, its rest is waited for.

    Raises:
        EOFError: the other end closed the pipe (at a frame's start or within one).
        BlockingIOError: no frame began within the socket's receive timeout.
        OSError: the connection is closed, a read failed, or the header is malformed.
    """
    fd = conn.fileno()
    (length,) = _LENGTH.unpack(_read_exactly(fd, 4, begun=False))
    if length == -1:
        (length,) = _LONG_LENGTH.unpack(_read_exactly(fd, 8))
    elif length < 0:
        raise OSError(f"malformed frame header on the worker pipe: length {length}")
    return _read_exactly(fd, length)


def _read_exactly(fd: int, size: int, *, begun: bool = True) -> bytes:
    """``size`` bytes; ``begun``: a frame is under way (a receive timeout does not end it)."""
    data = _read(fd, size, begun)
    if len(data) == size:  # the usual case: the whole frame was there
        return data
    if not data:
        raise EOFError("the worker pipe was closed by the other end")
    parts = [data]
    left = size - len(data)
    while left:
        chunk = _read(fd, left, True)
        if not chunk:
            raise EOFError("the worker pipe was closed by the other end within a frame")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read(fd: int, size: int, begun: bool) -> bytes:
    if not begun:
        return os.read(fd, size)  # a receive timeout raises BlockingIOError: nothing began
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            continue  # within a frame: the writer is still writing it
