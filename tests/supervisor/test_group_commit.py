"""Group commit in ``SQLiteCheckpointStore`` (issue 14): saves that arrive together share one
transaction and one fsync; each returns only once its own data is durable; a failed batch
fails every save in it and leaves nothing behind; the store goes on serving."""

from __future__ import annotations

import random
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from actors import Snapshot
from supervisor import (
    CheckpointInfo,
    CheckpointNotFound,
    SQLiteCheckpointStore,
    StoreFull,
    _group_commit,
)
from supervisor._group_commit import GroupCommit
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.test_sqlite_store import TIMEOUT, Worker, _verify_acked, workers

__all__ = ["workers"]  # the fixture, shared with the other kill -9 tests

SAVERS = 16


def _snap(session_id: str, turns: int = 2) -> Snapshot:
    return Snapshot.new(session_id=session_id, state=session_state(turns, session_id=session_id))


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


@contextmanager
def _writer_held(db: Path) -> Iterator[None]:
    """Another connection holds the database's write lock while the block runs."""
    with closing(sqlite3.connect(db, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


Rows = tuple[sqlite3.Connection, threading.Lock, GroupCommit]


@pytest.fixture
def rows(tmp_path: Path) -> Iterator[Rows]:
    """A table of ints on its own connection, the lock its writers take, and a
    ``GroupCommit`` writing to it."""
    lock = threading.Lock()
    with closing(
        sqlite3.connect(tmp_path / "g.db", isolation_level=None, check_same_thread=False)
    ) as conn:
        conn.execute("CREATE TABLE rows (n INTEGER)")
        yield conn, lock, GroupCommit(lock, lambda: conn)


def _insert(
    n: int, gate: threading.Event | None = None, entered: threading.Event | None = None
) -> Callable[[sqlite3.Connection], int]:
    """A write of row ``n`` that returns ``n``; it sets ``entered`` when it runs, then
    waits for ``gate`` before its insert."""

    def run(db: sqlite3.Connection) -> int:
        if entered is not None:
            entered.set()
        if gate is not None:
            assert gate.wait(TIMEOUT)
        db.execute("INSERT INTO rows VALUES (?)", (n,))
        return n

    return run


def _stored(conn: sqlite3.Connection) -> list[int]:
    return sorted(n for (n,) in conn.execute("SELECT n FROM rows"))


def _save_together(
    store: SQLiteCheckpointStore,
    db: Path,
    snaps: list[Snapshot],
    before_release: Callable[[], None],
) -> list[Future[CheckpointInfo]]:
    """Save ``snaps`` from one thread each while another writer holds the lock, so the first
    save's leader waits in ``BEGIN`` and every other save queues behind it."""
    pool = ThreadPoolExecutor(len(snaps))
    with _writer_held(db):
        futures: list[Future[CheckpointInfo]] = [pool.submit(store.save, snaps[0])]
        _wait_for(store._lock.locked, "the first save to take the lock")
        futures += [pool.submit(store.save, snap) for snap in snaps[1:]]
        _wait_for(lambda: len(store._commits._queued) == len(snaps) - 1, "the saves to queue")
        before_release()
    pool.shutdown(wait=True)
    return futures


def test_saves_that_arrive_together_share_one_commit(tmp_path: Path) -> None:
    db = tmp_path / "batched.db"
    with SQLiteCheckpointStore(db) as store:
        snaps = [_snap(f"s{n}", turns=n % 5 + 1) for n in range(SAVERS)]
        commits = store.commits

        futures = _save_together(store, db, snaps, lambda: None)

        infos = [f.result(TIMEOUT) for f in futures]
        assert store.commits - commits == 2  # the first alone, then everyone queued behind it
        assert [i.checkpoint_id for i in infos] == [s.checkpoint_id for s in snaps]
        for snap in snaps:
            assert store.load(snap.session_id) == snap


def full_from_now(store: SQLiteCheckpointStore) -> sqlite3.Connection:
    """Save a checkpoint of session ``before``, then make the store's database as full as
    a full disk (``SQLITE_FULL`` for whatever needs a page more); its connection (to lift
    the limit: ``PRAGMA max_page_count = 1073741823``)."""
    store.save(_snap("before"))
    conn = store._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return conn


def test_a_failed_batch_fails_every_save_in_it_and_the_store_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    with SQLiteCheckpointStore(db) as store:
        big = [_snap(f"s{n}", turns=200) for n in range(SAVERS)]  # each far more than a page
        conn = full_from_now(store)

        futures = _save_together(store, db, big, lambda: None)

        for future in futures:
            with pytest.raises(StoreFull) as caught:
                future.result(TIMEOUT)
            assert str(caught.value).startswith(
                f"checkpoint store {str(db)!r} is full (database or disk is full): nothing of "
                "this write was stored, and what it held before is intact; free space"
            )
            assert isinstance(caught.value, OSError)
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        for snap in big:  # nothing of the failed batches is read back
            with pytest.raises(CheckpointNotFound):
                store.load(snap.session_id)
        assert store.sessions() == ["before"]
        conn.execute("PRAGMA max_page_count = 1073741823")
        store.save(big[0])
        assert store.load("s0") == big[0]
        assert store.load("before").session_id == "before"


def test_a_write_that_raises_fails_alone_and_the_batch_commits(rows: Rows) -> None:
    conn, lock, commits = rows
    gate = threading.Event()  # the leader waits while the others queue

    def refused(db: sqlite3.Connection) -> int:
        _insert(3)(db)
        raise ValueError("write 3 is refused after its insert")

    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(commits.run, _insert(0, gate))
        _wait_for(lock.locked, "the leader")
        rest = [pool.submit(commits.run, refused if n == 3 else _insert(n)) for n in range(1, 8)]
        _wait_for(lambda: len(commits._queued) == 7, "the writes to queue")
        gate.set()
        assert first.result(TIMEOUT) == 0
        with pytest.raises(ValueError, match="write 3 is refused"):
            rest[2].result(TIMEOUT)
        assert [f.result(TIMEOUT) for i, f in enumerate(rest) if i != 2] == [1, 2, 4, 5, 6, 7]
    assert _stored(conn) == [0, 1, 2, 4, 5, 6, 7]  # 3's insert was undone with it
    assert commits.commits == 2


def test_a_lone_write_that_raises_leaves_nothing_and_the_next_one_commits(rows: Rows) -> None:
    conn, _, commits = rows
    statements: list[str] = []
    conn.set_trace_callback(statements.append)

    def refused(db: sqlite3.Connection) -> int:
        _insert(1)(db)
        raise ValueError("write 1 is refused after its insert")

    with pytest.raises(ValueError, match="write 1 is refused"):
        commits.run(refused)
    assert commits.run(_insert(2)) == 2

    conn.set_trace_callback(None)
    assert _stored(conn) == [2]  # 1's insert was rolled back with its transaction
    assert commits.commits == 1
    assert not [s for s in statements if "SAVEPOINT" in s]  # a batch of one needs none
    assert not conn.in_transaction


def test_every_acknowledged_save_of_many_threads_survives_kill_9(
    tmp_path: Path, workers: list[Worker]
) -> None:
    db = tmp_path / "durable.db"
    rng = random.Random(1414)
    start = 0
    for _round in range(30):
        worker = Worker(db, f"r{_round}", start, 0, threads=8)
        workers.append(worker)
        worker.start()
        for _ in range(rng.randint(1, 60)):
            assert worker.read_ack()
        worker.proc.send_signal(signal.SIGKILL)
        while worker.read_ack():  # acks already in the pipe count too
            pass
        assert worker.proc.wait(TIMEOUT) == -signal.SIGKILL
        _verify_acked(db, worker)
    with SQLiteCheckpointStore(db, keep_last=None) as store:  # nothing half-written reads back
        for sid in store.sessions():
            for info in store.list(sid):
                store.load(sid, info.checkpoint_id)


def test_a_save_returns_once_its_batch_commits_not_after_the_next_one(rows: Rows) -> None:
    """A caller whose batch is done returns at once, even while the next batch (queued
    meanwhile) is being committed; the lead passes to that batch's first save."""
    conn, lock, commits = rows
    entered = {n: threading.Event() for n in range(4)}
    gates = {n: threading.Event() for n in (0, 1, 3)}

    def write(n: int) -> Callable[[sqlite3.Connection], int]:
        return _insert(n, gates.get(n), entered[n])

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(commits.run, write(0))  # leads a batch of its own
        assert entered[0].wait(TIMEOUT)
        second = pool.submit(commits.run, write(1))
        third = pool.submit(commits.run, write(2))
        _wait_for(lambda: len(commits._queued) == 2, "two saves to queue")
        gates[0].set()  # 0 commits; the lead passes to 1, whose batch holds 1 and 2
        assert entered[1].wait(TIMEOUT)
        fourth = pool.submit(commits.run, write(3))
        _wait_for(lambda: len(commits._queued) == 1, "the fourth save to queue")
        gates[1].set()  # 1 and 2 commit; 3 leads the next batch and waits in it
        assert entered[3].wait(TIMEOUT)
        assert (first.result(TIMEOUT), second.result(TIMEOUT)) == (0, 1)
        assert third.result(TIMEOUT) == 2  # while 3's batch still holds the store
        assert not fourth.done()
        assert lock.locked()
        gates[3].set()
        assert fourth.result(TIMEOUT) == 3
    assert _stored(conn) == [0, 1, 2, 3]
    assert commits.commits == 3
    assert not commits._leading  # the last leader gave the lead up


def test_a_batch_takes_at_most_max_batch_saves_and_the_rest_follow(
    rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_group_commit, "MAX_BATCH", 2)
    conn, lock, commits = rows
    gate = threading.Event()
    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(commits.run, _insert(0, gate))
        _wait_for(lock.locked, "the leader")
        rest = [pool.submit(commits.run, _insert(n)) for n in range(1, 6)]
        _wait_for(lambda: len(commits._queued) == 5, "the writes to queue")
        gate.set()
        assert [f.result(TIMEOUT) for f in (first, *rest)] == [0, 1, 2, 3, 4, 5]
    assert _stored(conn) == [0, 1, 2, 3, 4, 5]
    assert commits.commits == 4  # 0 alone, then 5 queued saves in batches of 2, 2 and 1


class _InterruptedWait:
    """A save's wake lock whose wait is interrupted, as ``KeyboardInterrupt`` would be."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0

    def acquire(self) -> bool:
        self._calls += 1
        if self._calls == 1:  # taken when the save queues
            return self._lock.acquire()
        raise KeyboardInterrupt  # the wait

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


def test_a_save_interrupted_while_it_waits_is_withdrawn_and_the_others_commit(
    rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, lock, commits = rows
    gate = threading.Event()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(commits.run, _insert(0, gate))
        _wait_for(lock.locked, "the leader")
        monkeypatch.setattr(_group_commit, "_new_wake", _InterruptedWait)
        interrupted = pool.submit(commits.run, _insert(1))
        with pytest.raises(KeyboardInterrupt):
            interrupted.result(TIMEOUT)
        assert commits._queued == []  # withdrawn: it never runs
        monkeypatch.undo()
        last = pool.submit(commits.run, _insert(2))
        _wait_for(lambda: len(commits._queued) == 1, "the last save to queue")
        gate.set()
        assert (first.result(TIMEOUT), last.result(TIMEOUT)) == (0, 2)  # 2 was handed the lead
    assert _stored(conn) == [0, 2]
    assert not commits._leading
