"""A group-commit batch's usual saves are written together (``supervisor._saves_together``):
whatever mix of saves a batch holds, every checkpoint loads exactly as saved, the
retention after each save is ``keep_last``'s, and a save the database refuses fails
alone while the rest of its batch commits."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from actors import Snapshot
from supervisor import SQLiteCheckpointStore
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.test_group_commit import _save_together
from tests.supervisor.test_sqlite_store import TIMEOUT


def _snap(session_id: str, turns: int, **parts: Any) -> Snapshot:
    state = session_state(turns, session_id=session_id)
    state.update(parts)
    return Snapshot.new(session_id=session_id, state=state)


def _mixed_batch(store: SQLiteCheckpointStore) -> list[Snapshot]:
    """Saves of every kind a batch can hold, after the history some of them extend."""
    for sid in ("extended", "twice", "pruned"):
        store.save(_snap(sid, 1))
    store.save(_snap("pruned", 2))  # two checkpoints: at keep_last, its next save prunes
    store.save(_snap("rewritten", 3))
    return [
        _snap("new-a", 1),
        _snap("extended", 2),
        _snap("no-messages", 0, messages=[]),
        _snap("with-parts", 2, plugins={"memory": {"facts": ["x" * 5000]}}),
        _snap("twice", 2),
        _snap("twice", 3),
        _snap("pruned", 3),
        _snap("rewritten", 1),  # a shorter history: a new log generation, the old collected
        _snap("new-b", 4),
    ]


def test_a_mixed_batch_loads_exactly_and_keeps_what_keep_last_keeps(tmp_path: Path) -> None:
    db = tmp_path / "mixed.db"
    with SQLiteCheckpointStore(db, keep_last=2) as store:
        batch = _mixed_batch(store)
        commits = store.commits

        futures = _save_together(store, db, batch, lambda: None)

        for future in futures:
            future.result(TIMEOUT)
        assert store.commits - commits == 2
        for snap in batch:
            assert store.load(snap.session_id, snap.checkpoint_id) == snap
            assert store.load(snap.session_id, snap.checkpoint_id).serialize() == snap.serialize()
        assert len(store.list("pruned")) == 2
        assert store.list("twice")[0].checkpoint_id == batch[5].checkpoint_id
    with SQLiteCheckpointStore(db) as reopened:  # as a new instance reads it: no cache
        for snap in batch:
            assert reopened.load(snap.session_id, snap.checkpoint_id) == snap
        reopened.save(_snap("extended", 3))  # extends the log written together
        assert reopened.load("extended").state["turns"] == 3


def test_a_batch_of_usual_saves_takes_a_few_statements_not_several_each(tmp_path: Path) -> None:
    db = tmp_path / "usual.db"
    with SQLiteCheckpointStore(db) as store:
        for n in range(17):
            store.save(_snap(f"s{n}", 1))
        batch = [_snap(f"s{n}", 2) for n in range(17)]
        statements: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(statements.append)

        futures = _save_together(store, db, batch, lambda: None)

        for future in futures:
            future.result(TIMEOUT)
        store._conn.set_trace_callback(None)
        for snap in batch:
            assert store.load(snap.session_id) == snap
    begins = [i for i, sql in enumerate(statements) if sql == "BEGIN IMMEDIATE"]
    assert len(begins) == 2  # the first save alone, then the 16 queued behind it
    # BEGIN, the store's check, a savepoint, one read, three inserts (16 rows each: one
    # piece), the savepoint's release, COMMIT
    assert len(statements) - begins[1] == 9, statements[begins[1] :]


@pytest.mark.parametrize("where", ["database", "python"])
def test_a_save_refused_in_a_joint_write_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    db = tmp_path / "refused.db"
    with SQLiteCheckpointStore(db) as store:
        store.save(_snap("s1", 1))
        batch = [_snap(f"s{n}", 2) for n in range(6)]
        if where == "database":
            assert store._conn is not None
            store._conn.execute(
                "CREATE TEMP TRIGGER refuse BEFORE INSERT ON checkpoints"
                " WHEN NEW.session_id = 's3' BEGIN SELECT RAISE(ABORT, 's3 is refused'); END"
            )
            error: type[Exception] = sqlite3.IntegrityError
        else:
            original = store._rows.checkpoint

            def refuse(sid: str, *args: Any, **kwargs: Any) -> Any:
                if sid == "s3":
                    raise ValueError("s3 is refused")
                return original(sid, *args, **kwargs)

            monkeypatch.setattr(store._rows, "checkpoint", refuse)
            error = ValueError

        futures = _save_together(store, db, batch, lambda: None)

        for n, future in enumerate(futures):
            if n == 3:
                with pytest.raises(error, match="s3 is refused"):
                    future.result(TIMEOUT)
            else:
                future.result(TIMEOUT)
                assert store.load(f"s{n}") == batch[n]
        assert [s for s in store.sessions() if s == "s3"] == []
        monkeypatch.undo()
        if where == "database":
            assert store._conn is not None
            store._conn.execute("DROP TRIGGER refuse")
        store.save(batch[3])  # the store goes on: the refused session saves later
        assert store.load("s3") == batch[3]


def test_a_long_run_of_batches_merges_the_log_and_prunes_and_loads_exactly(
    tmp_path: Path,
) -> None:
    db = tmp_path / "long.db"
    saved: list[Snapshot] = []
    with SQLiteCheckpointStore(db, keep_last=5) as store:
        for turns in range(1, 41):  # past merges of the log's chunks (at 8, 16, ... 40)
            # the first save runs alone while the other two queue: they are the batch
            batch = [_snap("lead", turns), _snap("s", turns), _snap("other", turns)]
            for future in _save_together(store, db, batch, lambda: None):
                future.result(TIMEOUT)
            saved.append(batch[1])
            assert store.load("s") == batch[1]
            assert store.load("other") == batch[2]
            assert len(store.list("s")) == min(turns, 5)
        assert store._conn is not None
        chunks = store._conn.execute(
            "SELECT count(*) FROM message_chunks WHERE session_id = 's'"
        ).fetchone()[0]
        assert chunks == 5  # 40 appends: 50 in base 8, five chunks of eight
    with SQLiteCheckpointStore(db) as reopened:
        for snap in saved[-5:]:
            assert reopened.load("s", snap.checkpoint_id).serialize() == snap.serialize()
