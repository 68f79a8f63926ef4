"""Very large conversations in the SQLite store: SQLite stores no value longer than its
length limit (``SQLITE_LIMIT_LENGTH``, 1,000,000,000 bytes by default). A session whose
message log grows past it must go on saving (its log chunks stay under the limit), and a
value that cannot be split (a body, a state part) is refused as ``SnapshotTooLarge``.

The limit is lowered on the store's connection so that the tests need kilobytes, not a
gigabyte: the store reads it from the connection, as it does the default one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import Message, Snapshot
from supervisor import EncryptionKeys, SnapshotTooLarge, SQLiteCheckpointStore
from tests.actors.snapshot_helpers import session_state

LIMIT = 200_000
"""The SQLite length limit the tests set (bytes)."""
KEYS = EncryptionKeys({"k1": bytes(range(32))})
TIMEOUT = 30.0


@pytest.fixture(params=["plain", "encrypted"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLiteCheckpointStore]:
    keys = KEYS if request.param == "encrypted" else None
    opened = SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=keys)
    assert opened._conn is not None
    opened._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    try:
        yield opened
    finally:
        opened.close()


def _grown(state: dict[str, Any], text: str) -> dict[str, Any]:
    return {**state, "messages": [*state["messages"], Message.user(text).to_dict()]}


def test_a_log_growing_past_the_length_limit_keeps_saving(store: SQLiteCheckpointStore) -> None:
    # 80 saves of 10 KB each: the 64th append merges 14 chunks (640 KB, over the limit);
    # it raised sqlite3.DataError, and so did every later save of the session.
    state = session_state(1, session_id="s")
    saved = []
    for turn in range(80):
        state = _grown(state, f"{turn} " + "x" * 10_000)
        snapshot = Snapshot.new(session_id="s", state=state)
        store.save(snapshot)
        saved.append(snapshot)
    assert store.load("s") == saved[-1]
    for snapshot in saved[::7]:
        assert store.load("s", snapshot.checkpoint_id) == snapshot


def test_one_save_adding_more_than_the_limit_is_stored(store: SQLiteCheckpointStore) -> None:
    state = session_state(1, session_id="s")
    first = Snapshot.new(session_id="s", state=state)
    store.save(first)
    big = Snapshot.new(session_id="s", state=_grown(state, "y" * (2 * LIMIT + 123)))
    store.save(big)
    assert store.load("s") == big
    assert store.load("s", first.checkpoint_id) == first
    later = Snapshot.new(session_id="s", state=_grown(big.state, "z" * 1000))
    store.save(later)
    assert store.load("s") == later


def test_a_state_larger_than_the_limit_is_snapshot_too_large(
    store: SQLiteCheckpointStore,
) -> None:
    state = {**session_state(1, session_id="s"), "plugins": {"big": {"blob": "p" * LIMIT}}}
    with pytest.raises(SnapshotTooLarge, match="SQLite") as caught:
        store.save(Snapshot.new(session_id="s", state=state))
    assert caught.value.session_id == "s"
    assert caught.value.limit == LIMIT
    assert "max_snapshot_bytes" not in str(caught.value)
    assert store.list("s") == []
    fine = Snapshot.new(session_id="s", state=session_state(2, session_id="s"))
    store.save(fine)
    assert store.load("s") == fine


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_in_one_batch_only_the_save_too_large_fails(store: SQLiteCheckpointStore) -> None:
    # The saves queue while this thread holds the store's lock, so all but the first
    # commit in one batch: the usual ones written together, the long one in pieces.
    small = [
        Snapshot.new(session_id=f"s{n}", state=session_state(2, session_id=f"s{n}"))
        for n in range(6)
    ]
    long_state = _grown(session_state(1, session_id="long"), "y" * (LIMIT + 5))
    long = Snapshot.new(session_id="long", state=long_state)
    part = {**session_state(1, session_id="part"), "plugins": {"big": {"blob": "p" * LIMIT}}}
    too_large = Snapshot.new(session_id="part", state=part)
    snaps = [small[0], long, too_large, *small[1:]]
    with ThreadPoolExecutor(len(snaps)) as pool:
        with store._lock:
            futures = [pool.submit(store.save, snaps[0])]
            _wait_for(lambda: store._commits._leading, "the first save to lead")
            futures += [pool.submit(store.save, snap) for snap in snaps[1:]]
            _wait_for(lambda: len(store._commits._queued) == len(snaps) - 1, "the saves")
        for snap, future in zip(snaps, futures, strict=True):
            if snap is too_large:
                with pytest.raises(SnapshotTooLarge):
                    future.result(TIMEOUT)
            else:
                future.result(TIMEOUT)
    for snap in snaps:
        if snap is not too_large:
            assert store.load(snap.session_id) == snap
    assert store.list("part") == []
