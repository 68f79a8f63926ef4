"""Damaged pages in a SQLite store: SQLite's own "database disk image is malformed" is a
typed error naming the file and what to do, and a damaged newest checkpoint is skipped
on resume like one that fails its checksum."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from actors import Snapshot, SnapshotDecodeError
from supervisor import AgentHost, EncryptionKeys, SQLiteCheckpointStore, StoreCorrupted
from supervisor._checkpoints import Checkpoints
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.host_helpers import host_options, template

PAD = b"Z"


def _padded(source: Snapshot) -> Snapshot:
    """A newer checkpoint of ``source``'s session whose body spills over many pages of
    ``PAD`` bytes (SQLite overflow pages), which hold nothing but this row."""
    return Snapshot.new(
        session_id=source.session_id,
        state=source.state,
        metadata={**source.metadata, "pad": PAD.decode() * 200_000},
    )


def _damage_an_overflow_page(db: Path) -> None:
    """Point the first page holding only ``PAD`` bytes (an overflow page of the padded
    row) at a page past the end of the file: reading that row is then "malformed"."""
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for start in range(page_size, len(data), page_size):
        if data[start + 4 : start + page_size] == PAD * (page_size - 4):
            data[start : start + 4] = (len(data) // page_size + 1000).to_bytes(4, "big")
            db.write_bytes(bytes(data))
            return
    raise AssertionError("no overflow page of the padded checkpoint found")


def _store_with_a_damaged_newest(db: Path) -> tuple[Snapshot, Snapshot]:
    with SQLiteCheckpointStore(db) as store:
        good = Snapshot.new(session_id="s", state=session_state(2, session_id="s"))
        store.save(good)
        bad = _padded(good)
        store.save(bad)
        store.save(Snapshot.new(session_id="other", state=session_state(1, session_id="other")))
    _damage_an_overflow_page(db)
    return good, bad


def test_a_checkpoint_in_damaged_pages_raises_a_decode_error_naming_the_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    good, bad = _store_with_a_damaged_newest(db)
    with SQLiteCheckpointStore(db) as store:
        for asked in (None, bad.checkpoint_id):
            with pytest.raises(SnapshotDecodeError) as caught:
                store.load("s", asked)
            message = str(caught.value)
            assert "malformed" in message
            assert str(db) in message
            assert "sessionvisor doctor" in message
        assert store.load("s", good.checkpoint_id) == good  # the rest of the file still reads
        assert store.load("other").session_id == "other"
        assert [i.checkpoint_id for i in store.list("s")] == [bad.checkpoint_id, good.checkpoint_id]


def test_latest_falls_back_past_a_checkpoint_in_damaged_pages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "c.db"
    good, bad = _store_with_a_damaged_newest(db)
    with SQLiteCheckpointStore(db) as store:
        with caplog.at_level(logging.WARNING, logger="supervisor.host"):
            assert Checkpoints(store).latest("s") == good
        assert any(bad.checkpoint_id in r.getMessage() for r in caplog.records)


def test_writing_over_damaged_pages_raises_store_corrupted_naming_the_file(
    tmp_path: Path,
) -> None:
    """Deleting the damaged row must walk its broken page chain: SQLite refuses, and the
    store says so as ``StoreCorrupted`` (not a bare ``sqlite3.DatabaseError``)."""
    db = tmp_path / "c.db"
    _, bad = _store_with_a_damaged_newest(db)
    with SQLiteCheckpointStore(db) as store:
        with pytest.raises(StoreCorrupted, match="malformed") as caught:
            store.delete("s", bad.checkpoint_id)
        assert caught.value.path == str(db)
        assert "restore" in str(caught.value)
        assert store.load("other").session_id == "other"  # the connection still serves


def test_resume_falls_back_past_a_checkpoint_in_damaged_pages(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store, AgentHost(store, **host_options(mode)) as old:
        sid = old.start_session(template(), "s1")
        old.send(sid, "one")
        kept = old.history(sid)
        old.stop_session(sid)
        store.save(_padded(store.load(sid)))
    _damage_an_overflow_page(db)
    with SQLiteCheckpointStore(db) as store, AgentHost(store, **host_options(mode)) as host:
        host.resume("s1", template())
        assert host.history("s1") == kept
        assert host.send("s1", "again").content == "echo: again"


# --- a running session's saves meeting a damaged message log ---------------------------------


def _turns(turns: int) -> Snapshot:
    """Session ``s`` after ``turns`` turns; its first question fills many pages with ``PAD``."""
    state = session_state(turns, session_id="s")
    state["messages"][1]["content"] = PAD.decode() * 20_000
    return Snapshot.new(session_id="s", state=state)


@pytest.mark.parametrize("keep_last", [None, 2])
def test_saves_go_on_in_a_new_log_after_meeting_damaged_log_pages(
    tmp_path: Path, keep_last: int | None
) -> None:
    """The first chunk of a session's message log lies in damaged pages. The save whose
    chunks merge with it (and, with ``keep_last``, the one deleting it) fails with
    ``StoreCorrupted``; from then on the session's saves succeed and load, here and
    after a restart, instead of failing one after another for good."""
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db, keep_last=keep_last) as store:
        for turns in (1, 2, 3):
            store.save(_turns(turns))
    _damage_an_overflow_page(db)
    failed = []
    with SQLiteCheckpointStore(db, keep_last=keep_last) as store:
        for turns in range(4, 30):
            snapshot = _turns(turns)
            try:
                store.save(snapshot)
            except StoreCorrupted as exc:
                failed.append((turns, exc.path))
        assert 1 <= len(failed) <= 2
        assert {path for _, path in failed} == {str(db)}
        assert max(turns for turns, _ in failed) < 20
        assert store.load("s") == snapshot
        assert Checkpoints(store).latest("s") == snapshot
    with SQLiteCheckpointStore(db, keep_last=keep_last) as store:
        assert store.load("s") == snapshot
        # a new instance learns of the damage again: at most one failed save, as above
        with contextlib.suppress(StoreCorrupted):
            store.save(_turns(30))
        store.save(_turns(31))
        assert store.load("s").state["turns"] == 31


def test_a_merge_meeting_an_undecodable_chunk_starts_a_new_log(tmp_path: Path) -> None:
    """In an encrypted store a damaged chunk fails its tag when a save merges it: that
    save's checkpoint, and the later ones, go to a new log and load (not "the bytes do
    not match the checkpoint's digest")."""
    db = tmp_path / "c.db"
    keys = EncryptionKeys({"k": EncryptionKeys.new_key()})
    with SQLiteCheckpointStore(db, keep_last=None, encryption=keys) as store:
        for turns in (1, 2, 3):
            store.save(_turns(turns))
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        (data,) = conn.execute("SELECT data FROM message_chunks WHERE start = 0").fetchone()
        middle = len(data) // 2
        damaged = data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :]
        conn.execute("UPDATE message_chunks SET data = ? WHERE start = 0", (damaged,))
    with SQLiteCheckpointStore(db, keep_last=None, encryption=keys) as store:
        saved = [_turns(turns) for turns in range(4, 12)]
        for snapshot in saved:
            store.save(snapshot)  # the 8th append merges the damaged chunk
        assert store.load("s") == saved[-1]
        assert store.load("s", saved[4].checkpoint_id) == saved[4]  # the merging save


def test_encrypting_a_store_with_damaged_pages_raises_store_corrupted(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    good, _ = _store_with_a_damaged_newest(db)
    keys = EncryptionKeys({"k": EncryptionKeys.new_key()})
    with pytest.raises(StoreCorrupted, match="malformed") as caught:
        SQLiteCheckpointStore.encrypt_existing(db, keys)
    assert caught.value.path == str(db)
    with SQLiteCheckpointStore(db) as store:  # nothing was encrypted: it opens without keys
        assert store.load("s", good.checkpoint_id) == good


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_a_path_sqlite_takes_for_a_temporary_database_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Such a store would lose every checkpoint on close, and its marker file (written in
    the working directory) would make the next open raise ``StoreCorrupted``."""
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        with pytest.raises(ValueError, match="MemoryCheckpointStore"):
            SQLiteCheckpointStore(path)
    assert list(tmp_path.iterdir()) == []
