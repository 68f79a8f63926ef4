"""The snapshot codec reuses its msgpack packers (``actors._codec._packers``) safely.

Reused packers must give exactly the bytes a fresh ``msgpack.packb`` gives, from any
number of threads at once and after a refused value; and one whose buffer grew for a
large value must not be kept, or the process would hold that much memory for good.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import msgpack
import pytest

from actors import _codec
from actors._codec import POOLED_ENCODING_MAX, encode_plain, pack_plain
from actors.errors import SnapshotEncodeError


def _reference(value: object) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, datetime=True)
    return packed


@pytest.fixture
def empty_pool() -> Iterator[list[msgpack.Packer]]:
    """The pool, emptied for the test and given back its packers afterwards."""
    pool = _codec._packers
    kept = list(pool)
    pool.clear()
    try:
        yield pool
    finally:
        pool[:] = kept


def test_threads_encoding_at_once_each_get_their_own_bytes() -> None:
    def encodes(n: int) -> bool:
        values = [
            {"n": n, "i": i, "blob": bytes([n]) * (i * 97 % 5000), "at": datetime.now(UTC)}
            for i in range(200)
        ]
        return all(pack_plain(v) == _reference(v) for v in values)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(encodes, range(8)))


def test_a_refused_value_leaves_later_encodings_whole() -> None:
    for _ in range(3):
        with pytest.raises(SnapshotEncodeError, match=r"state\.conn"):
            encode_plain({"state": {"turns": list(range(50)), "conn": object()}})
        assert encode_plain({"id": 2, "ok": True}) == _reference({"id": 2, "ok": True})


def test_a_packer_that_encoded_a_large_value_is_not_kept(
    empty_pool: list[msgpack.Packer],
) -> None:
    large = {"blob": b"x" * (POOLED_ENCODING_MAX + 1)}
    assert pack_plain(large) == _reference(large)
    assert empty_pool == []  # its buffer grew past the limit: dropped with it
    assert pack_plain({"small": 1}) == _reference({"small": 1})
    assert len(empty_pool) == 1  # a small one's packer waits for the next encoding
    pack_plain({"small": 2})
    assert len(empty_pool) == 1  # ... and is the one taken again
