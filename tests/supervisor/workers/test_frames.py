"""``_protocol.pack`` reuses its packers, safely: a ``repr`` that packs again while its
caller packs, a pack that fails, and threads packing at once all get whole frames, the
bytes ``msgpack.packb`` would give.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import msgpack
import pytest

from supervisor.workers._protocol import pack, pack_escaped, unpack

WAIT = 10.0


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
