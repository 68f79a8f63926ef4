"""A failed save of ``GroupCommit`` leaves no reference cycle: its error's traceback holds
the frames of the batch's commit, which hold the batch's saves; a save that kept its error
once told made a cycle of every failed save (freed only by the cyclic collector, which
thousands of session threads wait out)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor import _group_commit
from tests.supervisor.host_helpers import CyclicGarbage
from tests.supervisor.test_group_commit import Rows, _insert, _wait_for, rows
from tests.supervisor.test_group_commit_submit import (
    Told,
    _behind_a_waiting_leader,
    second_batch_fails,
)
from tests.supervisor.test_sqlite_store import TIMEOUT

__all__ = ["rows"]  # the fixture

KINDS = (BaseException, _group_commit._Pending)


def _refused(n: int) -> Callable[[sqlite3.Connection], int]:
    def write(db: sqlite3.Connection) -> int:
        _insert(n)(db)
        raise ValueError(f"write {n} is refused after its insert")

    return write


def test_a_lone_write_that_raises_leaves_no_cycle(rows: Rows) -> None:
    _, _, commits = rows
    with CyclicGarbage(KINDS) as garbage:
        with pytest.raises(ValueError, match="write 1 is refused"):
            commits.run(_refused(1))
    assert garbage.names == []


def test_a_waiting_write_that_raises_in_a_batch_leaves_no_cycle(rows: Rows) -> None:
    _, lock, commits = rows
    gate = threading.Event()
    with CyclicGarbage(KINDS) as garbage:
        caught: list[str] = []

        def refused_later() -> None:
            try:
                commits.run(_refused(2))
            except ValueError as exc:
                caught.append(str(exc))

        leader = threading.Thread(target=commits.run, args=(_insert(1, gate),))
        leader.start()
        _wait_for(lock.locked, "the leader")
        waiting = threading.Thread(target=refused_later)
        waiting.start()
        _wait_for(lambda: len(commits._queued) == 1, "the refused write to queue")
        gate.set()
        leader.join(TIMEOUT)
        waiting.join(TIMEOUT)
        assert caught == ["write 2 is refused after its insert"]
    assert garbage.names == []


def test_submitted_writes_told_their_errors_leave_no_cycle(rows: Rows) -> None:
    _, lock, commits = rows
    with CyclicGarbage(KINDS) as garbage:
        told = Told(3)
        writes = [(_refused(n) if n == 2 else _insert(n), told.of(n)) for n in (1, 2, 3)]
        _behind_a_waiting_leader(commits, lock, writes, told)
        assert isinstance(told.outcomes[2][1], ValueError)
        told.outcomes.clear()  # the test lets go of the error too
        _wait_for(lambda: not commits._leading, "the store's own thread to let go")
    assert garbage.names == []


def test_a_failed_batch_leaves_no_cycle(tmp_path: Path) -> None:
    with second_batch_fails(tmp_path) as (_, lock, commits):
        with CyclicGarbage(KINDS) as garbage:
            told = Told(2)
            _behind_a_waiting_leader(
                commits, lock, [(_insert(n), told.of(n)) for n in (1, 2)], told
            )
            assert {type(told.outcomes[n][1]) for n in (1, 2)} == {sqlite3.OperationalError}
            told.outcomes.clear()
            _wait_for(lambda: not commits._leading, "the store's own thread to let go")
        assert garbage.names == []
