"""A store's ``keep_last`` larger than SQLite's integers (``2**64``: "keep them all")
keeps every checkpoint, as ``prune`` with such a count does and as the memory and
PostgreSQL stores do. Before, every SQLite save of a snapshot without messages (a new
session's first checkpoint) raised ``OverflowError`` and stored nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors import Snapshot
from supervisor import MemoryCheckpointStore, SQLiteCheckpointStore
from supervisor.checkpoint_store import CheckpointStore
from tests.actors.snapshot_helpers import session_state

HUGE = 2**64


@pytest.fixture(params=["memory", "sqlite"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], CheckpointStore]]:
    opened: list[CheckpointStore] = []

    def make() -> CheckpointStore:
        store: CheckpointStore
        if request.param == "memory":
            store = MemoryCheckpointStore(keep_last=HUGE)
        else:
            store = SQLiteCheckpointStore(tmp_path / "c.db", keep_last=HUGE)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_a_keep_last_past_the_databases_integers_keeps_every_checkpoint(
    make_store: Callable[[], CheckpointStore],
) -> None:
    store = make_store()
    first = Snapshot.new(session_id="s", state={**session_state(1), "messages": []})
    store.save(first)  # no messages: SQLite pruned after it, binding keep_last
    later = Snapshot.new(session_id="s", state=session_state(2))
    store.save(later)
    assert [info.checkpoint_id for info in store.list("s")] == [
        later.checkpoint_id,
        first.checkpoint_id,
    ]
    assert store.load("s", first.checkpoint_id) == first
    assert store.prune("s", HUGE) == 0
    assert len(store.list("s")) == 2
