"""Frames on a worker's pipe: ``_frames`` reads and writes ``multiprocessing.Connection``'s own
format straight on the descriptor, and ``_protocol.pack`` reuses its packers safely.

The two ends interoperate with ``Connection.send_bytes``/``recv_bytes`` both ways,
for small frames and for frames long enough to arrive in several reads; the end
of the pipe, at a frame's start or within one, is ``EOFError``; a closed
connection is ``OSError``, as with ``Connection``.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from multiprocessing import Pipe
from multiprocessing.connection import Connection

import msgpack
import pytest

from supervisor.workers import _protocol
from supervisor.workers._frames import frame_header, read_frame, write_frame
from supervisor.workers._protocol import pack, pack_escaped, unpack

WAIT = 10.0


@pytest.fixture
def pipe() -> Iterator[tuple[Connection, Connection]]:
    """Both ends of a duplex pipe, as a worker's (a socket pair on POSIX)."""
    a, b = Pipe(duplex=True)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("size", [0, 1, 300, 16384, 16385, 3_000_000])
def test_frames_interoperate_with_connection_both_ways(
    pipe: tuple[Connection, Connection], size: int
) -> None:
    a, b = pipe
    data = os.urandom(size)
    # A large frame fills the socket's buffer: the other end reads it meanwhile.
    with ThreadPoolExecutor(1) as reader:
        got = reader.submit(b.recv_bytes)
        write_frame(a, data)
        assert got.result(WAIT) == data
        back = reader.submit(read_frame, a)
        b.send_bytes(data)
        assert back.result(WAIT) == data
        ours = reader.submit(read_frame, b)
        write_frame(a, data)
        assert ours.result(WAIT) == data


def test_a_frame_that_arrives_in_pieces_is_read_whole(pipe: tuple[Connection, Connection]) -> None:
    a, b = pipe
    data = b"0123456789" * 10
    wire = frame_header(len(data)) + data
    with ThreadPoolExecutor(1) as reader:
        got = reader.submit(read_frame, b)
        for start in range(0, len(wire), 7):  # the header too is split
            os.write(a.fileno(), wire[start : start + 7])
        assert got.result(WAIT) == data


def test_a_receive_timeout_bounds_the_wait_for_a_frame_not_a_frame_under_way(
    pipe: tuple[Connection, Connection],
) -> None:
    """A caller waits for its reply with the socket's receive timeout as the bound: a
    frame that has not begun is ``BlockingIOError``; one that has is read to its end."""
    a, b = pipe
    with socket.socket(fileno=os.dup(b.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", 0, 50_000))
        with pytest.raises(BlockingIOError):
            read_frame(b)
        data = b"0123456789" * 10
        wire = frame_header(len(data)) + data
        os.write(a.fileno(), wire[:2])  # half a header
        with ThreadPoolExecutor(1) as reader:
            got = reader.submit(read_frame, b)
            assert not wait([got], timeout=0.3).done  # past several timeouts: still reading
            os.write(a.fileno(), wire[2:50])
            assert not wait([got], timeout=0.3).done
            os.write(a.fileno(), wire[50:])
            assert got.result(WAIT) == data


def test_the_header_is_connections_own_format() -> None:
    assert frame_header(5) == struct.pack("!i", 5)
    assert frame_header(0x7FFFFFFF) == struct.pack("!i", 0x7FFFFFFF)
    assert frame_header(0x80000000) == struct.pack("!i", -1) + struct.pack("!Q", 0x80000000)


def test_the_end_of_the_pipe_is_eof_at_a_frame_start_or_within_one(
    pipe: tuple[Connection, Connection],
) -> None:
    a, b = pipe
    write_frame(a, b"whole")
    os.write(a.fileno(), frame_header(10) + b"cut")
    a.close()
    assert read_frame(b) == b"whole"
    with pytest.raises(EOFError, match="within a frame"):
        read_frame(b)
    c, d = Pipe(duplex=True)
    c.close()
    with pytest.raises(EOFError, match="closed by the other end"):
        read_frame(d)
    d.close()


def test_a_malformed_length_is_an_oserror(pipe: tuple[Connection, Connection]) -> None:
    a, b = pipe
    os.write(a.fileno(), struct.pack("!i", -7))
    with pytest.raises(OSError, match="length -7"):
        read_frame(b)


def test_a_closed_connection_is_an_oserror_as_with_connection(
    pipe: tuple[Connection, Connection],
) -> None:
    a, b = pipe
    b.close()
    with pytest.raises(OSError, match="handle is closed"):
        read_frame(b)
    with pytest.raises(OSError, match="handle is closed"):
        write_frame(b, b"x")
    with pytest.raises(BrokenPipeError):  # the other end is gone
        write_frame(a, b"x")


# -- pack -----------------------------------------------------------------------


def _reference(frame: object) -> bytes:
    data: bytes = msgpack.packb(frame, use_bin_type=True, default=repr)
    return data


class _PacksInRepr:
    """A value msgpack cannot carry whose ``repr`` packs a frame itself, as a nested call on
    the same thread would."""

    def __repr__(self) -> str:
        inner = unpack(pack({"nested": list(range(50)), "text": "x" * 100}))
        return f"<packs {len(inner['nested'])}>"


def test_pack_is_msgpack_with_repr_for_the_rest_even_when_a_repr_packs_again() -> None:
    frame = {"id": 1, "payload": {"odd": _PacksInRepr(), "after": [1, 2, 3], "bin": b"\x00"}}
    assert pack(frame) == _reference(frame)
    payload = unpack(pack(frame))["payload"]
    assert payload == {"odd": "<packs 50>", "after": [1, 2, 3], "bin": b"\x00"}


def test_a_failed_pack_leaves_later_packs_whole() -> None:
    for _ in range(3):
        with pytest.raises(UnicodeEncodeError):
            pack({"text": "half \udc80 of it", "more": list(range(100))})
        assert pack({"id": 2, "ok": True}) == _reference({"id": 2, "ok": True})
    escaped = unpack(pack_escaped({"text": "half \udc80 of it"}))
    assert escaped == {"text": "half \\udc80 of it"}


class _Meets:
    """A value whose ``repr`` waits until every thread is in the middle of its own pack."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def __repr__(self) -> str:
        self.barrier.wait(WAIT)
        return "<met>"


def test_threads_packing_at_once_each_get_their_own_frame() -> None:
    meet = threading.Barrier(8)

    def packs(n: int) -> bool:
        frames = [{"id": n, "i": i, "blob": bytes([n]) * (i * 97 % 5000)} for i in range(50)]
        frames[0]["met"] = _Meets(meet)  # all eight are mid-pack together here
        return all(pack(f) == _reference(f) for f in frames)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(packs, range(8)))


def test_a_packer_that_packed_a_large_frame_is_not_kept() -> None:
    pool = _protocol._packers
    kept = list(pool)
    pool.clear()
    try:
        large = {"id": 3, "payload": b"x" * (_protocol._POOLED_FRAME_MAX + 1)}
        assert pack(large) == _reference(large)
        assert pool == []  # its buffer grew past the limit: dropped with it
        assert pack({"id": 4}) == _reference({"id": 4})
        assert len(pool) == 1
    finally:
        pool[:] = kept
