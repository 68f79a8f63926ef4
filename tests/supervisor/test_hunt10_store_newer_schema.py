"""A checkpoint written by a newer sessionvisor (a snapshot schema newer than this code
reads) is not damage: resuming must not skip it for an older checkpoint. Before, a node
rolled back to an older version resumed the session from the checkpoint before it (with a
"damaged" warning and event), dropping the newer turns, and its next save superseded the
newer checkpoint for good."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors import SCHEMA_VERSION, EventBuffer, Snapshot, SnapshotDecodeError
from supervisor import AgentHost, MemoryCheckpointStore, SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints
from supervisor.checkpoint_store import CheckpointStore, SnapshotTooNew
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.host_helpers import template

MakeStore = Callable[[], CheckpointStore]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    opened: list[CheckpointStore] = []

    def make() -> CheckpointStore:
        store: CheckpointStore
        if request.param == "memory":
            store = MemoryCheckpointStore()
        else:
            store = SQLiteCheckpointStore(tmp_path / "c.db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _newer(turns: int = 5) -> Snapshot:
    made = Snapshot.new(session_id="s", state=session_state(turns, session_id="s"))
    return dataclasses.replace(made, schema_version=SCHEMA_VERSION + 1)


def test_load_says_the_checkpoint_is_from_a_newer_version(make_store: MakeStore) -> None:
    store = make_store()
    newer = _newer()
    store.save(newer)
    with pytest.raises(SnapshotTooNew) as caught:
        store.load("s")
    assert isinstance(caught.value, SnapshotDecodeError)
    assert newer.checkpoint_id in str(caught.value)
    assert f"schema_version {SCHEMA_VERSION + 1} is newer" in str(caught.value)
    assert "upgrade sessionvisor" in str(caught.value)


def test_latest_does_not_fall_back_past_a_newer_checkpoint(make_store: MakeStore) -> None:
    store = make_store()
    older = Snapshot.new(session_id="s", state=session_state(1, session_id="s"))
    store.save(older)
    store.save(_newer())
    events = EventBuffer(16)
    with pytest.raises(SnapshotTooNew):
        Checkpoints(store, redact=None).latest("s", events)
    assert [event.type for event in events.since().events] == []  # no checkpoint_damaged


def test_latest_still_skips_a_damaged_checkpoint_but_not_a_newer_one_behind_it(
    make_store: MakeStore,
) -> None:
    store = make_store()
    store.save(Snapshot.new(session_id="s", state=session_state(1, session_id="s")))
    store.save(_newer(3))
    damaged = Snapshot.new(session_id="s", state=session_state(5, session_id="s"))
    store.save(damaged)
    _damage(store, damaged)
    with pytest.raises(SnapshotTooNew):
        Checkpoints(store, redact=None).latest("s")


def _damage(store: CheckpointStore, snapshot: Snapshot) -> None:
    """Change the stored bytes of ``snapshot`` so that its checksum fails."""
    if isinstance(store, MemoryCheckpointStore):
        entry = store._sessions["s"][snapshot.checkpoint_id]
        store._sessions["s"][snapshot.checkpoint_id] = dataclasses.replace(
            entry, data=entry.data.replace(b"question", b"QUESTION")
        )
        return
    assert isinstance(store, SQLiteCheckpointStore)
    assert store._conn is not None
    store._conn.execute(
        "UPDATE checkpoints SET body_check = x'01' || zeroblob(16) WHERE checkpoint_id = ?",
        (snapshot.checkpoint_id,),
    )
    with pytest.raises(SnapshotDecodeError):
        store.load("s", snapshot.checkpoint_id)


def test_a_host_refuses_to_resume_behind_a_newer_checkpoint(tmp_path: Path) -> None:
    with SQLiteCheckpointStore(tmp_path / "c.db") as store:
        with AgentHost(store) as old:
            sid = old.start_session(template(), "s")
            old.send(sid, "one")
            old.stop_session(sid)
        newest = store.load("s")
        newer = Snapshot.new(session_id="s", state=newest.state, metadata=newest.metadata)
        store.save(dataclasses.replace(newer, schema_version=SCHEMA_VERSION + 1))
        with AgentHost(store) as host:
            with pytest.raises(SnapshotTooNew):
                host.resume("s", template())
        assert store.list("s")[0].checkpoint_id == newer.checkpoint_id  # still the newest
