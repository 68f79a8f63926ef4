"""``SQLiteCheckpointStore.save_later``: a save whose caller does not wait for its batch is
told how it ended (the ``CheckpointInfo`` once durable, or the error ``save`` raises) by a
callback; what ``save`` refuses before writing, it refuses at the call."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actors import Snapshot
from supervisor import CheckpointInfo, CheckpointNotFound, SQLiteCheckpointStore, StoreFull
from supervisor.checkpoint_store import SaveDone
from supervisor.errors import StoreReadOnly
from tests.supervisor.test_group_commit import _snap, _wait_for, _writer_held, full_from_now
from tests.supervisor.test_sqlite_store import TIMEOUT

SAVERS = 8


class Outcomes:
    """What each ``save_later`` was told, by session id."""

    def __init__(self, expected: int) -> None:
        self.told: dict[str, tuple[CheckpointInfo | None, BaseException | None]] = {}
        self._lock = threading.Lock()
        self._all = threading.Event()
        self._expected = expected

    def of(self, sid: str) -> SaveDone:
        def done(info: CheckpointInfo | None, error: BaseException | None) -> None:
            with self._lock:
                assert sid not in self.told, f"{sid} was told twice"
                self.told[sid] = (info, error)
                if len(self.told) == self._expected:
                    self._all.set()

        return done

    def wait(self) -> None:
        assert self._all.wait(TIMEOUT), f"told {sorted(self.told)} only"


def test_a_save_later_with_no_batch_under_way_is_told_before_it_returns(tmp_path: Path) -> None:
    with SQLiteCheckpointStore(tmp_path / "s.db") as store:
        snap = _snap("s")
        outcomes = Outcomes(1)
        store.save_later(snap, outcomes.of("s"))
        info, error = outcomes.told["s"]
        assert error is None
        assert info == store.list("s")[0]
        assert info is not None
        assert info.checkpoint_id == snap.checkpoint_id
        assert store.load("s") == snap


def _later_behind_a_leader(
    store: SQLiteCheckpointStore, db: Path, outcomes: Outcomes, sids: list[str]
) -> tuple[object, list[Snapshot]]:
    """``store.save`` of a first snapshot, which leads and waits in ``BEGIN`` while another
    writer holds the lock, then ``save_later`` of one snapshot per ``sids``, queued behind
    it; the writer then lets go. The first save's outcome and the snapshots."""
    first = _snap("first")
    snaps = [_snap(sid, turns=40) for sid in sids]
    with ThreadPoolExecutor(1) as pool, _writer_held(db):
        leader = pool.submit(store.save, first)
        _wait_for(store._lock.locked, "the first save to take the lock")
        for snap in snaps:
            store.save_later(snap, outcomes.of(snap.session_id))
        assert outcomes.told == {}  # queued: nothing waited for them
    try:
        result: object = leader.result(TIMEOUT)
    except Exception as exc:
        result = exc
    outcomes.wait()
    return result, snaps


def test_saves_later_queued_behind_a_leader_are_told_once_durable(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SQLiteCheckpointStore(db) as store:
        commits = store.commits
        sids = [f"s{n}" for n in range(SAVERS)]
        outcomes = Outcomes(SAVERS)
        first, snaps = _later_behind_a_leader(store, db, outcomes, sids)
        assert isinstance(first, CheckpointInfo)
        for snap in snaps:
            info, error = outcomes.told[snap.session_id]
            assert error is None
            assert info is not None
            assert info.checkpoint_id == snap.checkpoint_id
            assert store.load(snap.session_id) == snap
        assert store.commits - commits == 2  # the first alone, then every save queued behind


def test_a_failed_batch_tells_every_save_later_the_error_save_raises(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    with SQLiteCheckpointStore(db) as store:
        conn = full_from_now(store)
        sids = [f"s{n}" for n in range(SAVERS)]
        outcomes = Outcomes(SAVERS)

        _later_behind_a_leader(store, db, outcomes, sids)

        for sid in sids:
            info, error = outcomes.told[sid]
            assert info is None
            assert isinstance(error, StoreFull)
            assert str(error).startswith(
                f"checkpoint store {str(db)!r} is full (database or disk is full): nothing of "
                "this write was stored, and what it held before is intact; free space"
            )
            assert isinstance(error.__cause__, sqlite3.OperationalError)
            with pytest.raises(CheckpointNotFound):
                store.load(sid)
        conn.execute("PRAGMA max_page_count = 1073741823")
        again = _snap("s0")
        outcomes = Outcomes(1)
        store.save_later(again, outcomes.of("s0"))
        assert outcomes.told["s0"][1] is None  # the store goes on
        assert store.load("s0") == again


def test_save_later_refuses_at_the_call_what_save_refuses(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SQLiteCheckpointStore(db).close()
    outcomes = Outcomes(1)
    with SQLiteCheckpointStore(db, read_only=True) as store:
        with pytest.raises(StoreReadOnly, match=r"save_later\(\) writes"):
            store.save_later(_snap("s"), outcomes.of("s"))
    with SQLiteCheckpointStore(db) as store:
        with pytest.raises(TypeError, match=r"^save_later\(\) needs a Snapshot, got dict$"):
            store.save_later({}, outcomes.of("s"))  # type: ignore[arg-type]
    assert outcomes.told == {}
