"""``GroupCommit.submit``: a write queued for a batch without a waiting caller is told its
outcome by a callback once its batch committed or failed, on the thread that led it; a
thread of the store's own leads the batches of such writes, then ends."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from supervisor import _group_commit
from supervisor._group_commit import Done, GroupCommit
from tests.supervisor.test_group_commit import (
    Rows,
    _insert,
    _InterruptedWait,
    _stored,
    _wait_for,
    rows,
)
from tests.supervisor.test_sqlite_store import TIMEOUT

__all__ = ["rows"]  # the fixture

OWN_THREAD = "sessionvisor-commit"


class Told:
    """The outcomes ``on_done`` was told, each with the name of the thread that told it."""

    def __init__(self, expected: int) -> None:
        self.outcomes: dict[int, tuple[object, BaseException | None, str]] = {}
        self._lock = threading.Lock()
        self._all = threading.Event()
        self._expected = expected

    def of(self, n: int) -> Done:
        """The ``on_done`` of write ``n``."""

        def done(result: object, error: BaseException | None) -> None:
            with self._lock:
                assert n not in self.outcomes, f"write {n} was told twice"
                self.outcomes[n] = (result, error, threading.current_thread().name)
                if len(self.outcomes) == self._expected:
                    self._all.set()

        return done

    def wait(self) -> None:
        assert self._all.wait(TIMEOUT), f"told {sorted(self.outcomes)} only"


Write = Callable[[sqlite3.Connection], int]


def _behind_a_waiting_leader(
    commits: GroupCommit, lock: threading.Lock, submitted: list[tuple[Write, Done]], told: Told
) -> None:
    """Submit ``submitted`` while a waiting caller's write of row 0 leads and waits; then
    let it go, and wait until ``told`` heard of every write it expects."""
    gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        leader = pool.submit(commits.run, _insert(0, gate))
        _wait_for(lock.locked, "the leader")
        for write, on_done in submitted:
            commits.submit(write, on_done)
        assert told.outcomes == {}  # queued: submit did not wait for them
        gate.set()
        assert leader.result(TIMEOUT) == 0
    told.wait()


def _waiting_then_submitted(
    commits: GroupCommit,
    lock: threading.Lock,
    told: Told,
    before_waiting: Callable[[], None] = lambda: None,
) -> Future[int]:
    """Write 0 leads and waits; write 1 queues behind it, its caller waiting (after
    ``before_waiting``); writes 2 and 3 are submitted behind that; write 0 then goes on.
    Returns once ``told`` heard of 2 and 3: write 1's outcome."""
    gate = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(commits.run, _insert(0, gate))
        _wait_for(lock.locked, "the leader")
        before_waiting()
        waiting = pool.submit(commits.run, _insert(1))
        _wait_for(lambda: len(commits._queued) == 1, "the waiting write to queue")
        for n in (2, 3):
            commits.submit(_insert(n), told.of(n))
        gate.set()
        assert leader.result(TIMEOUT) == 0
        told.wait()
    return waiting


def _own_thread_ended() -> bool:
    return not [t for t in threading.enumerate() if t.name == OWN_THREAD]


def test_a_write_submitted_with_no_batch_under_way_is_told_before_submit_returns(
    rows: Rows,
) -> None:
    conn, _, commits = rows
    told = Told(1)
    commits.submit(_insert(1), told.of(1))
    assert told.outcomes == {1: (1, None, threading.current_thread().name)}
    assert _stored(conn) == [1]
    assert commits.commits == 1
    assert _own_thread_ended()


def test_writes_submitted_behind_a_leader_are_told_once_their_batch_commits(rows: Rows) -> None:
    conn, lock, commits = rows
    told = Told(5)
    _behind_a_waiting_leader(commits, lock, [(_insert(n), told.of(n)) for n in range(1, 6)], told)
    assert {n: outcome[:2] for n, outcome in told.outcomes.items()} == {
        n: (n, None) for n in range(1, 6)
    }
    # nobody waited to lead them: the store's own thread did, in one batch, then ended
    assert {outcome[2] for outcome in told.outcomes.values()} == {OWN_THREAD}
    assert _stored(conn) == [0, 1, 2, 3, 4, 5]
    assert commits.commits == 2
    _wait_for(_own_thread_ended, "the store's own thread to end")


def test_a_submitted_write_that_raises_is_told_its_error_and_the_others_commit(
    rows: Rows,
) -> None:
    conn, lock, commits = rows
    told = Told(4)

    def refused(db: sqlite3.Connection) -> int:
        _insert(2)(db)
        raise ValueError("write 2 is refused after its insert")

    writes = [(refused if n == 2 else _insert(n), told.of(n)) for n in range(1, 5)]
    _behind_a_waiting_leader(commits, lock, writes, told)
    result, error, _ = told.outcomes[2]
    assert result is None
    assert isinstance(error, ValueError)
    assert str(error) == "write 2 is refused after its insert"
    assert [told.outcomes[n][:2] for n in (1, 3, 4)] == [(1, None), (3, None), (4, None)]
    assert _stored(conn) == [0, 1, 3, 4]  # 2's insert was undone with it
    _wait_for(_own_thread_ended, "the store's own thread to end")


@contextmanager
def second_batch_fails(tmp_path: Path) -> Iterator[Rows]:
    """As the ``rows`` fixture, but the second batch's transaction fails as it begins (the
    disk is full)."""
    lock, batches = threading.Lock(), []

    def begin(db: sqlite3.Connection) -> None:
        batches.append(1)
        if len(batches) == 2:
            raise sqlite3.OperationalError("database or disk is full")

    with closing(
        sqlite3.connect(tmp_path / "g.db", isolation_level=None, check_same_thread=False)
    ) as conn:
        conn.execute("CREATE TABLE rows (n INTEGER)")
        yield conn, lock, GroupCommit(lock, lambda: conn, begin=begin)


def test_a_batch_that_fails_tells_every_submitted_write_its_error(tmp_path: Path) -> None:
    told = Told(3)
    with second_batch_fails(tmp_path) as (conn, lock, commits):
        _behind_a_waiting_leader(commits, lock, [(_insert(n), told.of(n)) for n in (1, 2, 3)], told)
        errors = [told.outcomes[n][1] for n in (1, 2, 3)]
        assert all(isinstance(e, sqlite3.OperationalError) for e in errors)
        assert {str(e) for e in errors} == {"database or disk is full"}
        assert [told.outcomes[n][0] for n in (1, 2, 3)] == [None, None, None]
        assert _stored(conn) == [0]  # nothing of the failed batch
        assert commits.run(_insert(4)) == 4  # the store goes on
        assert _stored(conn) == [0, 4]
        _wait_for(_own_thread_ended, "the store's own thread to end")


def test_a_waiting_write_first_in_the_queue_leads_the_submitted_ones_behind_it(
    rows: Rows,
) -> None:
    conn, lock, commits = rows
    told = Told(2)
    waiting = _waiting_then_submitted(commits, lock, told)
    assert waiting.result(TIMEOUT) == 1
    # handed the lead, the waiting write's thread committed the batch; a thread of the
    # store's own told them (a caller's thread tells no other's save)
    assert {outcome[2] for outcome in told.outcomes.values()} == {OWN_THREAD}
    assert [told.outcomes[n][:2] for n in (2, 3)] == [(2, None), (3, None)]
    assert _stored(conn) == [0, 1, 2, 3]
    assert commits.commits == 2
    _wait_for(_own_thread_ended, "the store's own thread to end")


def test_a_completion_handler_that_raises_is_logged_and_the_others_are_told(
    rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    conn, lock, commits = rows
    told = Told(2)

    def broken(result: object, error: BaseException | None) -> None:
        raise RuntimeError("the handler of write 1 is broken")

    writes = [(_insert(1), broken), *((_insert(n), told.of(n)) for n in (2, 3))]
    with caplog.at_level(logging.ERROR, "supervisor.store"):
        _behind_a_waiting_leader(commits, lock, writes, told)
    assert [told.outcomes[n][:2] for n in (2, 3)] == [(2, None), (3, None)]
    assert _stored(conn) == [0, 1, 2, 3]
    assert "a submitted save's completion handler failed" in caplog.text
    assert "the handler of write 1 is broken" in caplog.text
    _wait_for(_own_thread_ended, "the store's own thread to end")


class _InterruptedOnceHanded(_InterruptedWait):
    """A save's wake lock whose wait is interrupted (as ``KeyboardInterrupt`` would be) just
    as the lead is handed to it."""

    def acquire(self) -> bool:
        self._calls += 1
        if self._calls == 1:  # taken when the save queues
            return self._lock.acquire()
        assert self._lock.acquire(timeout=TIMEOUT)  # the wait: handed the lead...
        self._lock.release()
        raise KeyboardInterrupt  # ...and interrupted then


def test_a_waiting_write_interrupted_as_it_is_handed_the_lead_passes_it_to_the_store_s_thread(
    rows: Rows, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, lock, commits = rows
    told = Told(2)

    def interrupting() -> None:
        monkeypatch.setattr(_group_commit, "_new_wake", _InterruptedOnceHanded)

    interrupted = _waiting_then_submitted(commits, lock, told, interrupting)
    with pytest.raises(KeyboardInterrupt):
        interrupted.result(TIMEOUT)
    assert {n: outcome[:2] for n, outcome in told.outcomes.items()} == {2: (2, None), 3: (3, None)}
    assert {outcome[2] for outcome in told.outcomes.values()} == {OWN_THREAD}
    assert _stored(conn) == [0, 2, 3]  # 1 was withdrawn: it never ran
    _wait_for(_own_thread_ended, "the store's own thread to end")
    assert not commits._leading
