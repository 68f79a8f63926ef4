"""Fuzzing deserialize: bad bytes only ever raise SnapshotDecodeError, and never hang."""

from __future__ import annotations

import contextlib
import random
import time
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import Snapshot, SnapshotDecodeError
from tests.actors.snapshot_helpers import session_state

ROUNDS = 10_000
# bytes that start msgpack values of every family: nil/bool, ints, floats, str, bin, arrays,
# maps, ext and fixext (including the timestamp type -1 = 0xff)
INTERESTING = bytes.fromhex(
    "00 7f 80 8f 90 9f a0 bf c0 c1 c2 c3 c4 c7 ca cb cf d3 d4 d6 d7 d8 da db dc de df ff"
)


def _valid_bytes() -> bytes:
    state = session_state(3)
    state["when"] = datetime(2024, 1, 2, tzinfo=UTC)
    state["blob"] = b"\x00\x01"
    return Snapshot.new(session_id="fuzz", state=state, label="fz", metadata={"n": 1}).serialize()


def _mutate(data: bytearray, rng: random.Random) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:  # truncate
        return bytes(data[: rng.randrange(len(data))])
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(data))
        if choice == 1:  # flip bits
            data[pos] ^= 1 << rng.randrange(8)
        elif choice == 2:  # overwrite with a type byte
            data[pos] = rng.choice(INTERESTING)
        elif choice == 3:  # insert random bytes
            data[pos:pos] = rng.randbytes(rng.randint(1, 4))
        elif choice == 4:  # delete a slice
            del data[pos : pos + rng.randint(1, 8)]
        else:  # duplicate a slice, or append junk
            data[pos:pos] = data[pos : pos + rng.randint(1, 16)] or b"\xc0"
        if not data:
            break
    return bytes(data)


def _check(data: bytes) -> bool:
    """Deserialize and touch the accessors; True if it decoded."""
    try:
        snap = Snapshot.deserialize(data)
    except SnapshotDecodeError:
        return False
    again = Snapshot.deserialize(snap.serialize())  # what decodes, re-encodes
    assert again.serialize() == snap.serialize()
    for accessor in (snap.messages, snap.usage, lambda: snap.provider_state):
        with contextlib.suppress(SnapshotDecodeError):
            accessor()
    return True


def test_ten_thousand_mutations_raise_only_decode_errors() -> None:
    valid = _valid_bytes()
    rng = random.Random(20240501)
    decoded = 0
    started = time.perf_counter()
    for _ in range(ROUNDS):
        decoded += _check(_mutate(bytearray(valid), rng))
    assert time.perf_counter() - started < 30
    assert 0 < decoded < ROUNDS // 2  # mutations did damage; some still decoded


def test_every_truncation_is_refused() -> None:
    valid = _valid_bytes()
    for end in range(len(valid)):
        assert not _check(valid[:end])


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_raise_only_decode_errors(data: bytes) -> None:
    _check(data)
