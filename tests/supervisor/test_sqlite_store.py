"""SQLite-specific guarantees: durability under kill -9, several processes on one file,
corrupt rows, schema versioning, bounded disk growth, no leaked file handles."""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors import SCHEMA_VERSION, Message, Snapshot, SnapshotDecodeError, Usage
from actors._ids import new_checkpoint_id
from supervisor import SQLiteCheckpointStore, SupervisorError
from supervisor._sqlite_schema import _WAL_LIMIT_PAGES
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.checkpoint_worker import expected_state, session_for

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0


class Worker:
    """A checkpoint_worker child with a line reader that never blocks past TIMEOUT."""

    def __init__(self, db: Path, tag: str, start: int, count: int, threads: int = 1) -> None:
        self.tag = tag
        self.stderr = db.with_name(f"{tag}-{start}.stderr")
        with open(self.stderr, "wb") as errors:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.supervisor.checkpoint_worker", str(db), tag,
                 str(start), str(count), str(threads)],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, bufsize=0,
            )  # fmt: skip
        self._buffer = b""
        self.acked: dict[tuple[str, int], str] = {}  # (tag, index) -> checkpoint id

    def line(self) -> str:
        assert self.proc.stdout is not None
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
            assert ready, f"worker {self.tag} said nothing for {TIMEOUT}s"
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return ""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def start(self) -> None:
        line = self.line()
        assert line == "ready", f"worker {self.tag} failed:\n{self.stderr.read_text()}"
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def read_ack(self) -> bool:
        line = self.line()
        if not line:
            return False
        word, tag, index, checkpoint_id = line.split()
        assert word == "ack"
        self.acked[tag, int(index)] = checkpoint_id
        return True

    def finish(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.wait(TIMEOUT)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
        worker.finish()


def _verify_acked(db: Path, worker: Worker) -> None:
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        for (tag, index), checkpoint_id in worker.acked.items():
            snap = store.load(session_for(tag, index), checkpoint_id)
            assert snap.state == expected_state(tag, index)
            assert snap.label == f"{tag}:{index}"


def test_every_acknowledged_save_survives_kill_9(tmp_path: Path, workers: list[Worker]) -> None:
    db = tmp_path / "durable.db"
    rng = random.Random(4242)
    next_index = 0
    for _kill in range(5):
        worker = Worker(db, "killed", next_index, 0)
        workers.append(worker)
        worker.start()
        for _ in range(rng.randint(1, 40)):
            assert worker.read_ack()
        worker.proc.send_signal(signal.SIGKILL)
        while worker.read_ack():  # acks already in the pipe count too
            pass
        assert worker.proc.wait(TIMEOUT) == -signal.SIGKILL
        _verify_acked(db, worker)
        next_index = max(index for _, index in worker.acked) + 1
    assert next_index > 5


def test_two_processes_write_one_file(tmp_path: Path, workers: list[Worker]) -> None:
    db = tmp_path / "shared.db"  # created concurrently by both workers
    pair = [Worker(db, tag, 0, 60) for tag in ("alpha", "beta")]
    workers.extend(pair)
    for worker in pair:
        worker.start()
    for worker in pair:
        while worker.read_ack():
            pass
        assert worker.proc.wait(TIMEOUT) == 0
        assert len(worker.acked) == 60
        _verify_acked(db, worker)
    with SQLiteCheckpointStore(db) as store:
        assert store.sessions() == ["alpha", "beta", "shared"]
        assert len(store.list("shared")) == 40


# --- corruption ----------------------------------------------------------------------------


def _snap(turns: int, session_id: str = "s") -> Snapshot:
    return Snapshot.new(session_id=session_id, state=session_state(turns, session_id=session_id))


def _raw(db: Path, sql: str, *args: Any) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute(sql, args)


@pytest.mark.parametrize(
    "damage",
    [b"\x00\xff", b"", b"\xc1" * 50, "text instead of bytes", 42],
    ids=["garbage", "empty", "reserved-bytes", "text", "integer"],
)
def test_a_corrupt_row_makes_only_that_checkpoint_unreadable(tmp_path: Path, damage: Any) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        snaps = [_snap(t) for t in (1, 2, 3)]
        for s in snaps:
            store.save(s)
        _raw(db, "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?", damage,
             snaps[1].checkpoint_id)  # fmt: skip
        with pytest.raises(SnapshotDecodeError) as info:
            store.load("s", snaps[1].checkpoint_id)
        assert repr(snaps[1].checkpoint_id) in str(info.value)
        assert "session 's'" in str(info.value)
        assert store.load("s", snaps[0].checkpoint_id) == snaps[0]
        assert store.load("s") == snaps[2]
        assert len(store.list("s")) == 3


def test_a_row_holding_another_checkpoint_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        first, second = _snap(1), _snap(1)
        store.save(first)
        store.save(second)
        _raw(db, "UPDATE checkpoints SET checkpoint_id = 'zzz' WHERE checkpoint_id = ?",
             second.checkpoint_id)  # fmt: skip
        with pytest.raises(SnapshotDecodeError, match="belong to checkpoint"):
            store.load("s", "zzz")
        assert store.load("s", first.checkpoint_id) == first


def test_damaged_message_log_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        store.save(_snap(2))
        store.save(_snap(3))
        with closing(sqlite3.connect(db)) as conn, conn:
            (data,) = conn.execute("SELECT data FROM message_chunks WHERE start = 0").fetchone()
            flipped = bytes([data[0]]) + bytes([data[1] ^ 1]) + data[2:]
            conn.execute("UPDATE message_chunks SET data = ? WHERE start = 0", (flipped,))
        with pytest.raises(SnapshotDecodeError, match="digest"):
            store.load("s")
        _raw(db, "DELETE FROM message_chunks WHERE start > 0")
        with pytest.raises(SnapshotDecodeError, match="message log holds"):
            store.load("s")


# --- schema and settings --------------------------------------------------------------------


def test_schema_wal_and_durable_sync_on_first_use(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    with SQLiteCheckpointStore(db) as store:
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5  # store schema 5
    with SQLiteCheckpointStore(db, synchronous="normal") as store:
        assert store._conn is not None
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_newer_database_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    SQLiteCheckpointStore(db).close()
    _raw(db, "PRAGMA user_version = 99")
    with pytest.raises(SupervisorError, match="schema version 99"):
        SQLiteCheckpointStore(db)
    assert _open_handles(tmp_path) == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"synchronous": "OFF"}, "synchronous"),
        ({"max_snapshot_bytes": 0}, "max_snapshot_bytes"),
        ({"keep_last": -1}, "keep_last"),
        ({"busy_timeout": -1}, "busy_timeout"),
    ],
    ids=["sync-off", "zero-limit", "negative-keep", "negative-timeout"],
)
def test_bad_settings(tmp_path: Path, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        SQLiteCheckpointStore(tmp_path / "x.db", **kwargs)


def test_data_persists_across_reopen(tmp_path: Path) -> None:
    saved = _snap(4)
    with SQLiteCheckpointStore(tmp_path / "p.db") as store:
        store.save(saved)
    with SQLiteCheckpointStore(tmp_path / "p.db") as store:
        assert store.load("s") == saved


def _open_handles(directory: Path) -> list[str]:
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.exists():  # pragma: no cover - Linux only check
        pytest.skip("needs /proc")
    handles = []
    for entry in fd_dir.iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith(str(directory)):
            handles.append(target)
    return handles


def test_no_file_handles_leak(tmp_path: Path) -> None:
    for round_ in range(10):
        with SQLiteCheckpointStore(tmp_path / "h.db") as store:
            store.save(_snap(round_ % 3))
            store.load("s")
            assert _open_handles(tmp_path)  # the database is open now...
    assert _open_handles(tmp_path) == []  # ...and nothing is left after close
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db", "h.db.sessionvisor"]


# --- storage growth ------------------------------------------------------------------------


def _disk_bytes(db: Path) -> int:
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return sum(f.stat().st_size for f in files if f.exists())


def _wal_bytes(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_thousand_turns_occupy_at_most_three_final_snapshots(tmp_path: Path) -> None:
    """What the checkpoints take on disk stays within three final snapshots; the WAL,
    while the store is open, within its bound (about 1,000 pages, then checkpointed)."""
    db = tmp_path / "growth.db"
    messages: list[dict[str, Any]] = [Message.system("You are a helpful agent.").to_dict()]
    usage = Usage()
    with SQLiteCheckpointStore(db) as store:
        for turn in range(1000):
            messages.append(Message.user(f"turn {turn}: " + "please look into it " * 6).to_dict())
            messages.append(Message.assistant(f"done {turn}: " + "here it is " * 12).to_dict())
            usage = usage + Usage(120, 80)
            state = {"session_id": "long", "messages": list(messages), "usage": usage.to_dict(),
                     "metadata": {}, "model": "echo", "instructions": "Be helpful.",
                     "plugins": {"notes": {"count": turn}}, "provider_state": None,
                     "turns": turn + 1}  # fmt: skip
            final = Snapshot(
                schema_version=SCHEMA_VERSION, checkpoint_id=new_checkpoint_id(),
                session_id="long", saved_at=datetime.now(UTC), state=state,
            )  # fmt: skip
            store.save(final)
        final_size = len(final.serialize())
        open_bytes, wal_bytes = _disk_bytes(db), _wal_bytes(db)
        assert store.load("long") == final
    closed_bytes = _disk_bytes(db)
    assert closed_bytes <= 3 * final_size, (closed_bytes, final_size)
    assert open_bytes - wal_bytes <= 3 * final_size, (open_bytes, wal_bytes, final_size)
    # 1,000 saves of several pages each: the WAL was checkpointed and reused, not grown
    frame = 4096 + 24  # a page and its frame header
    assert 0 < wal_bytes <= (_WAL_LIMIT_PAGES + 64) * frame, wal_bytes


def test_pruning_after_a_save_drops_a_log_generation_once_no_checkpoint_uses_it(
    tmp_path: Path,
) -> None:
    """A history that does not extend the log starts a new generation; the old one stays
    while a retained checkpoint reads it, and goes with the save whose pruning removes the
    last of those (and the checkpoints kept still load)."""
    db = tmp_path / "gens.db"

    def generations() -> list[int]:
        with closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT DISTINCT gen FROM message_chunks ORDER BY gen")
            return [gen for (gen,) in rows]

    with SQLiteCheckpointStore(db, keep_last=2) as store:
        long = _snap(4)
        store.save(long)
        first = generations()
        assert len(first) == 1
        kept = [_snap(1), _snap(2)]  # not an extension of the 4-turn log: a new generation
        store.save(kept[0])
        assert len(generations()) == 2  # the 4-turn checkpoint still reads the old one
        store.save(kept[1])  # extends the new generation; prunes the 4-turn checkpoint...
        assert first[0] not in generations()  # ...and its generation goes with it
        assert len(generations()) == 1
        assert [store.load("s", s.checkpoint_id) for s in kept] == kept
