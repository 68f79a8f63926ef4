"""An SQLite store another connection keeps locked past ``busy_timeout`` (another process
writing the file, a long transaction of a tool) raises ``StoreBusy`` naming the file and
what to do, as the PostgreSQL store does for a lock wait, and nothing is written; the
gateway answers it as a retryable 503. Before, the raw ``sqlite3.OperationalError``
("database is locked") reached the caller."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from actors import Snapshot
from supervisor import EncryptionKeys, SQLiteCheckpointStore, StoreBusy
from tests.actors.snapshot_helpers import session_state


@contextmanager
def _writer_held(db: Path) -> Iterator[None]:
    """Another connection holds the database's write lock while the block runs."""
    with closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


def _snap(sid: str = "s", turns: int = 2) -> Snapshot:
    return Snapshot.new(session_id=sid, state=session_state(turns, session_id=sid))


def _assert_busy(caught: pytest.ExceptionInfo[StoreBusy], db: Path) -> None:
    text = str(caught.value)
    assert repr(str(db)) in text
    assert "busy_timeout" in text
    assert "nothing" in text
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_a_save_waiting_past_busy_timeout_raises_store_busy(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db, busy_timeout=0.05) as store:
        first = _snap(turns=1)
        store.save(first)
        refused = _snap(turns=2)
        with _writer_held(db):
            with pytest.raises(StoreBusy) as caught:
                store.save(refused)
            _assert_busy(caught, db)
            with pytest.raises(StoreBusy):
                store.delete("s")
            with pytest.raises(StoreBusy):
                store.prune("s", 0)
            assert store.load("s") == first  # reads go on (WAL)
        assert [info.checkpoint_id for info in store.list("s")] == [first.checkpoint_id]
        store.save(refused)  # and so do writes, once the lock is gone
        assert store.load("s") == refused


def test_opening_a_store_kept_locked_raises_store_busy(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with closing(sqlite3.connect(db)):
        pass  # an empty file: opening it creates the schema, which needs the write lock
    with _writer_held(db):
        with pytest.raises(StoreBusy) as caught:
            SQLiteCheckpointStore(db, busy_timeout=0.05)
        _assert_busy(caught, db)
    with SQLiteCheckpointStore(db) as store:
        store.save(_snap())
        assert store.sessions() == ["s"]


def test_opening_an_encrypted_store_kept_locked_raises_store_busy(tmp_path: Path) -> None:
    db = tmp_path / "sealed.db"
    keys = EncryptionKeys({"k1": bytes(range(32))})
    SQLiteCheckpointStore(db, encryption=keys).close()
    with _writer_held(db):
        with pytest.raises(StoreBusy) as caught:
            SQLiteCheckpointStore(db, encryption=keys, busy_timeout=0.05)
        _assert_busy(caught, db)
    with SQLiteCheckpointStore(db, encryption=keys) as store:
        store.save(_snap())
        assert store.sessions() == ["s"]
