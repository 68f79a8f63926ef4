"""Checkpoint integrity (issue 13, items 4, 5 and 8's read-only directory): every stored
body is checksummed and verified on load, a damaged newest checkpoint is skipped on a
restart, and an empty, missing or foreign file is never taken for a new store."""

from __future__ import annotations

import logging
import os
import random
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from actors import EventBuffer, Snapshot, SnapshotDecodeError
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    SQLiteCheckpointStore,
    StoreCorrupted,
    StoreUnavailable,
)
from supervisor._checkpoints import Checkpoints
from supervisor._sqlite_schema import APPLICATION_ID, MARKER_SUFFIX, SCHEMA_VERSION
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.host_helpers import HostFactory, host_options, template, watch_events

FLIPS = 1_200


def _snap(turns: int, session_id: str = "s", role: str = "reader") -> Snapshot:
    state = session_state(turns, session_id=session_id)
    state["plugins"]["acl"] = {"role": role}
    return Snapshot.new(session_id=session_id, state=state)


def _raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # a test's edits need not survive a power cut
    return conn


def _corrupt_body(db: Path, checkpoint_id: str) -> None:
    """Flip one bit in the middle of the checkpoint's stored body."""
    with closing(_raw(db)) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
        ).fetchone()
        middle = len(body) // 2
        damaged = body[:middle] + bytes([body[middle] ^ 0x10]) + body[middle + 1 :]
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?", (damaged, checkpoint_id)
        )


# --- item 4: checksums ---------------------------------------------------------------------


def test_bit_flips_in_stored_checkpoints_never_load_as_altered_state(tmp_path: Path) -> None:
    """Over 1,000 single-bit flips spread over the stored bodies (and the columns saying
    which message-log prefix they use): each load raises, none returns altered state."""
    db = tmp_path / "c.db"
    rng = random.Random(13)
    with SQLiteCheckpointStore(db) as store, closing(_raw(db)) as conn:
        originals = {}
        for turns in (1, 2, 5):  # the later ones extend the first one's message log
            snap = _snap(turns)
            store.save(snap)
            originals[snap.checkpoint_id] = snap
        rows = {
            cid: (body, count, length, digest)
            for cid, body, count, length, digest in conn.execute(
                "SELECT checkpoint_id, body, log_count, log_bytes, log_digest FROM checkpoints"
            )
        }
        assert sum(len(body) for body, *_ in rows.values()) * 8 > FLIPS  # spread, not repeated
        outcomes: Counter[str] = Counter()

        def load_after(cid: str, column: str, value: Any, original: Any) -> None:
            conn.execute(
                f"UPDATE checkpoints SET {column} = ? WHERE checkpoint_id = ?", (value, cid)
            )
            try:
                loaded = store.load("s", cid)
            except SnapshotDecodeError as exc:
                named = f"checkpoint {cid!r} of session 's'" in str(exc)
                outcomes["raised" if named else "raised without naming it"] += 1
            else:
                outcomes["equal" if loaded == originals[cid] else "altered"] += 1
            conn.execute(
                f"UPDATE checkpoints SET {column} = ? WHERE checkpoint_id = ?", (original, cid)
            )

        ids = sorted(rows)
        for flip in range(FLIPS):
            cid = ids[flip % len(ids)]
            body = rows[cid][0]
            bit = rng.randrange(len(body) * 8)
            flipped = bytearray(body)
            flipped[bit // 8] ^= 1 << (bit % 8)
            load_after(cid, "body", bytes(flipped), body)
        for cid, (_, count, length, digest) in rows.items():
            for bit in range(8):
                load_after(cid, "log_count", count ^ (1 << bit), count)
                load_after(cid, "log_bytes", length ^ (1 << bit), length)
                load_after(cid, "log_digest", bytes([digest[0] ^ (1 << bit)]) + digest[1:], digest)

        assert outcomes == {"raised": FLIPS + 3 * 24}  # no "altered", nor "equal" (undetected)
        for cid, snap in originals.items():  # every row restored: all load again
            assert store.load("s", cid) == snap


def test_a_bit_flip_in_the_stored_checksum_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store, closing(_raw(db)) as conn:
        snap = _snap(2)
        store.save(snap)
        (check,) = conn.execute("SELECT body_check FROM checkpoints").fetchone()
        for index in range(len(check)):
            flipped = check[:index] + bytes([check[index] ^ 0x01]) + check[index + 1 :]
            conn.execute("UPDATE checkpoints SET body_check = ?", (flipped,))
            with pytest.raises(SnapshotDecodeError, match=snap.checkpoint_id):
                store.load("s")
        conn.execute("UPDATE checkpoints SET body_check = NULL")
        with pytest.raises(SnapshotDecodeError, match="checksum is missing"):
            store.load("s")


def test_editing_plugin_state_inside_the_database_file_is_refused(tmp_path: Path) -> None:
    """The issue's attack: 'reader' -> 'ADMINS' in plugin state, edited in the file itself."""
    db = tmp_path / "c.db"
    snap = _snap(3, role="reader")
    with SQLiteCheckpointStore(db) as store:
        store.save(snap)
    data = db.read_bytes()  # closed: the WAL is in the file now
    assert data.count(b"reader") == 1
    db.write_bytes(data.replace(b"reader", b"ADMINS"))
    with SQLiteCheckpointStore(db) as store:
        with pytest.raises(SnapshotDecodeError) as info:
            store.load("s")
        assert str(info.value) == (
            f"cannot decode snapshot: checkpoint {snap.checkpoint_id!r} of session 's': checksum "
            "mismatch: the stored checkpoint was damaged or edited after it was saved"
        )


def test_memory_store_verifies_its_checksum_too() -> None:
    with MemoryCheckpointStore() as store:
        snap = _snap(1)
        store.save(snap)
        entry = store._sessions["s"][snap.checkpoint_id]
        data = entry.data.replace(b"reader", b"ADMINS")
        store._sessions["s"][snap.checkpoint_id] = type(entry)(entry.info, data, entry.check)
        with pytest.raises(SnapshotDecodeError, match="checksum mismatch"):
            store.load("s")


def _downgrade_to_version_1(db: Path) -> None:
    """Make ``db`` what schema version 1 wrote: no checksum column, no mark, no marker file."""
    with closing(_raw(db)) as conn:
        conn.execute("ALTER TABLE checkpoints DROP COLUMN body_check")
        conn.execute("DROP TABLE store_meta")  # schema 3's
        conn.execute("DROP TABLE encryption_keys")
        conn.execute("ALTER TABLE checkpoints DROP COLUMN parts")  # schema 4's
        conn.execute("DROP TABLE state_parts")
        conn.execute("PRAGMA application_id = 0")
        conn.execute("PRAGMA user_version = 1")
    Path(f"{db}{MARKER_SUFFIX}").unlink()


def test_a_version_1_store_migrates_and_its_rows_are_checked_from_then_on(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    snaps = [_snap(1), _snap(2)]
    with SQLiteCheckpointStore(db) as store:
        for snap in snaps:
            store.save(snap)
    _downgrade_to_version_1(db)

    with SQLiteCheckpointStore(db) as store:
        assert [store.load("s", s.checkpoint_id) for s in snaps] == snaps
        _corrupt_body(db, snaps[1].checkpoint_id)
        with pytest.raises(SnapshotDecodeError, match="checksum mismatch"):
            store.load("s")
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert Path(f"{db}{MARKER_SUFFIX}").exists()


# --- fallback to the newest good checkpoint ------------------------------------------------


def test_latest_skips_damaged_checkpoints_with_a_warning_and_an_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        snaps = [_snap(t) for t in (1, 2, 3)]
        for snap in snaps:
            store.save(snap)
        for damaged in snaps[1:]:
            _corrupt_body(db, damaged.checkpoint_id)
        events = EventBuffer()

        with caplog.at_level(logging.WARNING, logger="supervisor.host"):
            assert Checkpoints(store).latest("s", events) == snaps[0]

        got = [(e.type, e.data["checkpoint_id"]) for e in events.since().events]
        assert got == [
            ("checkpoint_damaged", snaps[2].checkpoint_id),
            ("checkpoint_damaged", snaps[1].checkpoint_id),
        ]
        assert "checksum mismatch" in events.since().events[0].data["error"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert snaps[2].checkpoint_id in warnings[0]
        assert f"resuming from checkpoint {snaps[0].checkpoint_id!r}" in warnings[-1]
        assert len(store.list("s")) == 3  # the damaged ones are kept for inspection


def test_latest_raises_when_every_checkpoint_is_damaged(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        snaps = [_snap(1), _snap(2)]
        for snap in snaps:
            store.save(snap)
            _corrupt_body(db, snap.checkpoint_id)
        with pytest.raises(SnapshotDecodeError, match=snaps[1].checkpoint_id):
            Checkpoints(store).latest("s")
        assert Checkpoints(store).latest("nobody") is None


def test_a_crash_restart_resumes_from_the_newest_good_checkpoint(
    make_host: HostFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "c.db"
    host = make_host(store=SQLiteCheckpointStore(db))
    sid = host.start_session(template(), "s1")
    host.send(sid, "one")
    kept = host.history(sid)
    host.send(sid, "two")
    newest = host.store.list(sid)[0]
    _corrupt_body(db, newest.checkpoint_id)
    waiter = watch_events(host, sid)

    with caplog.at_level(logging.WARNING, logger="supervisor.host"):
        host.kill(sid, reason="test")
        waiter.wait_for("resumed")

    assert host.history(sid) == kept
    assert any(newest.checkpoint_id in r.getMessage() for r in caplog.records)
    damaged = [e.data for e in host.events(sid).events if e.type == "checkpoint_damaged"]
    assert [d["checkpoint_id"] for d in damaged] == [newest.checkpoint_id]
    assert host.send(sid, "three").content == "echo: three"


def test_resume_falls_back_to_the_newest_good_checkpoint(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store, AgentHost(store, **host_options(mode)) as old:
        sid = old.start_session(template(), "s1")
        old.send(sid, "one")
        old.send(sid, "two")  # checkpointed after the turn ...
        kept = old.history(sid)
        old.stop_session(sid)  # ... and again, finally: that one gets damaged
        newest = store.list(sid)[0].checkpoint_id
    _corrupt_body(db, newest)
    with SQLiteCheckpointStore(db) as store, AgentHost(store, **host_options(mode)) as host:
        with pytest.raises(SnapshotDecodeError, match=newest):
            store.load("s1")
        host.resume("s1", template())
        assert host.history("s1") == kept
        assert host.send("s1", "again").content == "echo: again"


def test_a_hibernated_session_reads_and_checkpoints_from_the_newest_good_checkpoint(
    make_host: HostFactory, tmp_path: Path
) -> None:
    db = tmp_path / "c.db"
    host = make_host(store=SQLiteCheckpointStore(db))
    sid = host.start_session(template(), "s1")
    host.send(sid, "one")
    host.send(sid, "two")  # checkpointed after the turn ...
    kept = host.history(sid)
    assert host.hibernate(sid)  # ... and again: that one gets damaged
    newest = host.store.list(sid)[0].checkpoint_id
    _corrupt_body(db, newest)

    assert host.history(sid) == kept  # what it comes back with (was SnapshotDecodeError)
    saved = host.checkpoint(sid, label="after damage")
    assert saved.label == "after damage"
    assert host.store.load(sid).messages() == kept  # the good state, newest again
    assert host.session_info(sid).status == "hibernated"
    assert host.send(sid, "three").content == "echo: three"


# --- item 5 and 8: what is and is not a store ---------------------------------------------


def _store_with_sessions(db: Path, count: int) -> None:
    with SQLiteCheckpointStore(db) as store:
        for index in range(count):
            store.save(_snap(1, session_id=f"s{index}"))


def test_a_truncated_store_is_refused_not_opened_as_a_new_one(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    _store_with_sessions(db, 20)
    db.write_bytes(b"")

    with pytest.raises(StoreCorrupted) as info:
        SQLiteCheckpointStore(db)
    assert info.value.path == str(db)
    assert str(info.value).startswith(f"checkpoint store {str(db)!r} is empty, but its marker")
    assert "restore it" in str(info.value)
    assert db.read_bytes() == b""  # nothing written over it
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoints.db",
        "checkpoints.db.sessionvisor",
    ]


def test_a_deleted_store_with_its_marker_left_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    _store_with_sessions(db, 1)
    db.unlink()
    with pytest.raises(StoreCorrupted, match="is missing, but its marker"):
        SQLiteCheckpointStore(db)
    assert not db.exists()


def test_an_empty_file_without_a_marker_becomes_a_new_store(tmp_path: Path) -> None:
    db = tmp_path / "made-by-mkstemp.db"
    db.write_bytes(b"")
    with SQLiteCheckpointStore(db) as store:
        assert store.sessions() == []
        store.save(_snap(1))
    assert Path(f"{db}{MARKER_SUFFIX}").exists()
    with SQLiteCheckpointStore(db) as store:
        assert store.sessions() == ["s"]


def test_another_programs_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ann')")
    before = db.read_bytes()

    with pytest.raises(StoreCorrupted, match="another program's SQLite database") as info:
        SQLiteCheckpointStore(db)
    assert "tables ['users']" in str(info.value)
    assert db.read_bytes() == before  # not switched to WAL, no tables added
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_text("these are my notes, not a database\n" * 200)
    with pytest.raises(StoreCorrupted, match="is not a readable SQLite database"):
        SQLiteCheckpointStore(db)


def test_a_store_in_a_missing_directory_names_its_path(tmp_path: Path) -> None:
    db = tmp_path / "no-such-dir" / "c.db"
    with pytest.raises(StoreUnavailable) as info:
        SQLiteCheckpointStore(db)
    assert str(db) in str(info.value)
    assert "unable to open database file" in str(info.value)
    assert isinstance(info.value, OSError)


def test_a_store_given_a_directory_says_to_give_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as info:
        SQLiteCheckpointStore(tmp_path)
    assert str(info.value) == (
        f"checkpoint store {str(tmp_path)!r} cannot be opened or written ({str(tmp_path)!r} is "
        "a directory); give the path of a file in it (AgentHost(data_dir=...) keeps "
        "checkpoints.db in its directory)"
    )
    assert list(tmp_path.iterdir()) == []  # no marker or -wal left in it


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_store_in_a_read_only_directory_names_its_path(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    _store_with_sessions(db, 1)
    tmp_path.chmod(0o555)
    try:
        for target in (db, tmp_path / "new.db"):
            with pytest.raises(StoreUnavailable, match=str(target)):
                SQLiteCheckpointStore(target)
    finally:
        tmp_path.chmod(0o755)


def test_a_host_refuses_a_data_dir_whose_store_was_truncated(tmp_path: Path, mode: str) -> None:
    """The issue's scenario: 20 sessions, then ``checkpoints.db`` is emptied."""
    host = AgentHost(data_dir=tmp_path, **host_options(mode))
    try:
        for index in range(20):
            host.send(host.start_session(template(), f"s{index}"), "hello")
    finally:
        host.shutdown()
    (tmp_path / "checkpoints.db").write_bytes(b"")
    for leftover in ("checkpoints.db-wal", "checkpoints.db-shm"):
        (tmp_path / leftover).unlink(missing_ok=True)

    with pytest.raises(StoreCorrupted, match=r"checkpoints\.db' is empty"):
        AgentHost(data_dir=tmp_path, **host_options(mode))
    # The refused host let the directory go: a host on a restored store may start.
    (tmp_path / "checkpoints.db").unlink()
    (tmp_path / f"checkpoints.db{MARKER_SUFFIX}").unlink()
    AgentHost(data_dir=tmp_path, **host_options(mode)).shutdown()
