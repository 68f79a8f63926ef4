"""``AgentHost.workers()``, ``wait_for_workers``, ``workers_given_up`` and ``worker_deaths``:
the public view of workers.

Every wait is on an event of the session's stream, with a bound; the pids are
checked against the processes multiprocessing itself knows as this process's
children.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import AgentHost, MemoryCheckpointStore, SessionFailed, WorkerInfo
from tests.supervisor.host_helpers import WAIT, template, watch_events


def _child_worker_pids() -> set[int]:
    """Pids of the live worker processes multiprocessing knows as children of this one."""
    return {
        p.pid
        for p in multiprocessing.active_children()
        if p.name == "sessionvisor-worker" and p.pid is not None
    }


@pytest.fixture
def host() -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), workers=2)
    try:
        yield host
    finally:
        host.shutdown()


def test_workers_are_the_real_child_processes(host: AgentHost) -> None:
    workers = host.workers()

    assert len(workers) == 2
    assert all(isinstance(w, WorkerInfo) for w in workers)
    assert {w.pid for w in workers} == _child_worker_pids()
    assert os.getpid() not in {w.pid for w in workers}
    assert [w.sessions for w in workers] == [(), ()]
    assert not host.workers_given_up


def test_worker_info_is_a_frozen_value(host: AgentHost) -> None:
    [first, _] = host.workers()

    with pytest.raises(dataclasses.FrozenInstanceError):
        first.pid = 1  # type: ignore[misc]
    assert first == WorkerInfo(first.pid, ())
    assert host.workers() is not host.workers()  # a new list each call: the caller's to keep


def test_sessions_follow_placement(host: AgentHost) -> None:
    a, b, c = (host.start_session(template(), sid) for sid in ("a", "b", "c"))
    placed = {w.pid: set(w.sessions) for w in host.workers()}
    assert sorted(len(s) for s in placed.values()) == [1, 2]  # least loaded first
    assert sorted(sid for s in placed.values() for sid in s) == [a, b, c]  # each on one worker
    [lone] = [pid for pid, s in placed.items() if len(s) == 1]
    [(pair_pid, pair)] = [(pid, s) for pid, s in placed.items() if len(s) == 2]

    # Leaving a worker (hibernation, stop) takes the session off its list.
    first, second = sorted(pair)
    assert host.hibernate(first)
    host.stop_session(second)
    assert {w.pid: w.sessions for w in host.workers()} == {lone: tuple(placed[lone]), pair_pid: ()}

    # Reactivated, the hibernated session goes to the worker with fewest sessions.
    assert host.send(first, "back").content == "echo: back"
    assert {w.pid: w.sessions for w in host.workers()} == {
        lone: tuple(placed[lone]),
        pair_pid: (first,),
    }


def test_a_killed_worker_is_replaced_by_a_new_pid() -> None:
    host = AgentHost(MemoryCheckpointStore(), workers=1)
    try:
        sid = host.start_session(template(), "s")
        [before] = host.workers()
        assert before.sessions == (sid,)
        waiter = watch_events(host, sid)

        os.kill(before.pid, signal.SIGKILL)
        waiter.wait_for("crashed")  # the host noticed the death
        assert host.wait_for_workers(WAIT)
        waiter.wait_for("resumed")  # only on a replacement: there is no other worker

        [after] = host.workers()
        assert after.pid != before.pid
        assert after.sessions == (sid,)
        assert _child_worker_pids() == {after.pid}
        assert not host.workers_given_up
        assert host.worker_deaths == 1
        assert host.send(sid, "still here").content == "echo: still here"
    finally:
        host.shutdown()
    assert host.worker_deaths == 1  # stopping workers at shutdown is no death


def test_workers_given_up_past_the_worker_restart_intensity() -> None:
    host = AgentHost(MemoryCheckpointStore(), workers=1, worker_max_restarts=0)
    try:
        sid = host.start_session(template(), "s")
        [worker] = host.workers()
        waiter = watch_events(host, sid)

        os.kill(worker.pid, signal.SIGKILL)
        waiter.wait_for("crashed")  # the pool decided before it crashed the session

        assert host.workers_given_up
        assert host.worker_deaths == 1
        assert host.workers() == []
        assert not host.wait_for_workers(timeout=None)  # no replacement will come: at once
        waiter.wait_for("given_up")  # no worker to restart it on
        with pytest.raises(SessionFailed):
            host.send(sid, "anyone?")
    finally:
        host.shutdown()
    assert host.workers_given_up  # for the host's life


def test_no_workers_in_thread_mode_and_after_shutdown() -> None:
    threaded = AgentHost(MemoryCheckpointStore())
    try:
        threaded.start_session(template(), "t")
        assert threaded.workers() == []
        assert threaded.wait_for_workers(timeout=None)  # none to wait for
        assert not threaded.workers_given_up
        assert threaded.worker_deaths == 0
    finally:
        threaded.shutdown()

    host = AgentHost(MemoryCheckpointStore(), workers=1)
    assert host.wait_for_workers(timeout=0)  # the constructor waited for them
    host.shutdown()
    assert host.workers() == []
    assert not host.wait_for_workers(timeout=None)
    assert _child_worker_pids() == set()
    assert not host.workers_given_up
    assert host.worker_deaths == 0


def test_worker_io_names_a_known_pipe_backend() -> None:
    with pytest.raises(
        ValueError, match="worker_io must be one of auto, epoll, portable; got 'fast'"
    ):
        AgentHost(MemoryCheckpointStore(), workers=1, worker_io="fast")
    with pytest.raises(ValueError, match="worker_io only applies to worker processes"):
        AgentHost(MemoryCheckpointStore(), worker_io="portable")


def test_an_unknown_keyword_is_refused_as_python_refuses_one() -> None:
    bad: dict[str, Any] = {"worker_memory": 1 << 30}  # a misspelt worker_memory_limit
    unexpected = r"AgentHost\(\) got an unexpected keyword argument 'worker_memory'"
    with pytest.raises(TypeError, match=unexpected):
        AgentHost(MemoryCheckpointStore(), workers=1, **bad)
    assert _child_worker_pids() == set()


def test_every_worker_option_without_workers_is_named() -> None:
    with pytest.raises(
        ValueError,
        match="worker_max_restarts, worker_call_timeout only apply to worker processes; "
        "pass workers=N",
    ):
        AgentHost(MemoryCheckpointStore(), worker_max_restarts=5, worker_call_timeout=1.0)
