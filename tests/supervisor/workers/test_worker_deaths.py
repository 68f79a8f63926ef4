"""Worker processes dying: SIGKILL, ``os._exit``, segfault, memory limit, call timeout.

Each death takes only its own worker: its sessions are evicted and resumed
from their last checkpoints on a live worker, calls in flight fail with
``WorkerCrashed``, and sessions on other workers keep answering. Every wait
is on an event or a future, with a bound.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import AgentTemplate, Message
from supervisor import AgentHost, MemoryCheckpointStore, SessionCrashed, WorkerCrashed
from tests.supervisor.host_helpers import MODES, host_options, pairs, poll_until, template
from tests.supervisor.workers.worker_tools import (
    WAIT,
    burn_together,
    crash_template,
    evicted_or_resumed,
    fds,
    forking_hang,
    sessions_on,
    watch_events,
    worker_pid,
)

MEMORY_LIMIT = 1024 * 1024 * 1024


@pytest.fixture
def host() -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), workers=2, worker_memory_limit=MEMORY_LIMIT)
    yield host
    host.shutdown()


def _two_sessions(host: AgentHost) -> tuple[str, str]:
    """One session on each worker, each with one acknowledged turn."""
    a = host.start_session(crash_template(), "a")
    b = host.start_session(crash_template(), "b")
    assert worker_pid(host, a) != worker_pid(host, b)
    host.send(a, "first a")
    host.send(b, "first b")
    return a, b


@pytest.mark.parametrize(
    ("message", "exit_status"),
    [
        ("/quit_process {}", "exit code 1"),
        ("/segfault {}", "signal SIGSEGV"),
        ('/hog {"mb": 2048}', "out of memory"),
    ],
    ids=["os-exit", "segfault", "memory-limit"],
)
def test_a_tool_killing_its_worker_crashes_only_that_worker(
    host: AgentHost, message: str, exit_status: str
) -> None:
    a, b = _two_sessions(host)
    dead_pid = worker_pid(host, a)
    waiter = watch_events(host, a)

    with pytest.raises(WorkerCrashed, match=exit_status) as caught:
        host.send(a, message)

    assert caught.value.pid == dead_pid
    assert evicted_or_resumed(host, a, waiter)
    assert host.send(b, "still b").content == "echo: still b"  # the other worker answers
    crashed = waiter.wait_for("crashed")
    assert exit_status in crashed.data["reason"]
    waiter.wait_for("resumed")
    assert host.send(a, "back").content == "echo: back"
    assert pairs(host.history(a)) == [("first a", "echo: first a"), ("back", "echo: back")]
    assert worker_pid(host, a) != dead_pid
    assert host.wait_for_workers(WAIT)


def test_sigkill_evicts_every_session_of_the_worker_and_fails_calls_in_flight(
    host: AgentHost,
) -> None:
    a, b = _two_sessions(host)
    c = host.start_session(crash_template(), "c")  # least loaded: joins a's or b's worker
    host.send(c, "first c")
    victim = worker_pid(host, a)
    on_victim = sessions_on(host, victim, [a, b, c])
    survivors = [s for s in (a, b, c) if s not in on_victim]
    waiters = {sid: watch_events(host, sid) for sid in on_victim}
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(host.send, a, "/hang {}")
        waiters[a].wait_for("tool_call")

        os.kill(victim, signal.SIGKILL)

        with pytest.raises(WorkerCrashed, match="SIGKILL"):
            in_flight.result(WAIT)
    for sid in on_victim:
        # "crashed" is published once the registry has evicted the session.
        assert "SIGKILL" in waiters[sid].wait_for("crashed").data["reason"]
        waiters[sid].wait_for("resumed")
    for sid in survivors:
        assert host.send(sid, "alive").content == "echo: alive"
    for sid in on_victim:
        assert host.send(sid, "again").content == "echo: again"
        assert pairs(host.history(sid))[0][0].startswith("first")
    assert victim not in [w.pid for w in host.workers()]


@pytest.mark.parametrize("mode", MODES[1:])
def test_a_call_fails_at_once_when_its_worker_dies_though_a_child_keeps_the_pipe_open(
    mode: str, tmp_path: Path
) -> None:
    """The caller reading its reply is woken by the worker's death itself (its process
    sentinel), not only by the end of the pipe, which a child the worker forked delays."""
    host = AgentHost(MemoryCheckpointStore(), **{**host_options(mode), "workers": 1})
    child = tmp_path / "child"
    try:
        sid = host.start_session(template(tools=[forking_hang(tmp_path)]))
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(host.send, sid, "/fork_and_hang {}")
            assert poll_until(child.exists), "the tool did not fork"
            try:
                os.kill(worker_pid(host, sid), signal.SIGKILL)
                with pytest.raises(WorkerCrashed, match="SIGKILL"):
                    in_flight.result(WAIT)  # the call timeout is 120 s
            finally:
                os.kill(int(child.read_text()), signal.SIGKILL)
    finally:
        host.shutdown()


def test_a_stuck_worker_is_killed_after_the_call_timeout() -> None:
    host = AgentHost(MemoryCheckpointStore(), workers=1, worker_call_timeout=0.5)
    try:
        sid = host.start_session(crash_template(), "stuck")
        host.send(sid, "before")
        stuck_pid = worker_pid(host, sid)
        waiter = watch_events(host, sid)

        with pytest.raises(SessionCrashed, match="SIGKILL"):
            host.send(sid, "/hang {}")

        waiter.wait_for("resumed")
        assert host.send(sid, "after").content == "echo: after"
        assert worker_pid(host, sid) != stuck_pid
    finally:
        host.shutdown()


def test_clean_shutdown_leaves_no_child_process_and_no_fd() -> None:
    warm = AgentHost(MemoryCheckpointStore(), workers=1)  # the forkserver and its fds stay
    warm.shutdown()
    before = fds()
    host = AgentHost(MemoryCheckpointStore(), workers=2)
    sids = [host.start_session(crash_template()) for _ in range(4)]
    for sid in sids:
        host.send(sid, "hi")
    os.kill(worker_pid(host, sids[0]), signal.SIGKILL)  # a replaced worker must not leak either
    watch_events(host, sids[0]).wait_for("resumed")

    host.shutdown()

    assert multiprocessing.active_children() == []
    assert fds() == before
    for sid in sids:
        assert pairs(host.store.load(sid).messages()) == [("hi", "echo: hi")]


def _report(answer: Message) -> dict[str, Any]:
    """What ``burn_together`` returned, from the echo model's answer about it."""
    prefix = "burn_together returned: "
    content = answer.content or ""
    assert content.startswith(prefix), f"the tool did not report: {content!r}"
    report: dict[str, Any] = json.loads(content.removeprefix(prefix))
    return report


def test_cpu_bound_tools_on_two_workers_run_in_parallel(tmp_path: Path) -> None:
    """Two CPU-bound calls on sessions of two workers run at the same time, each in its
    own process (its own interpreter and GIL), so each can have a core of its own.

    Asserted from what the calls report, never from wall time (a busy machine
    stretches that at will): they met at a barrier across processes, so they ran
    at the same time; their pids differ and are their sessions' workers; each
    used CPU time of its own; their intervals on the system-wide monotonic clock
    overlap. Run serialized, the first call's barrier times out and ``met`` is
    false; run on threads of one process (thread mode, or one worker) both
    report the same pid.
    """
    host = AgentHost(MemoryCheckpointStore(), workers=2, checkpoint_every=None)
    try:
        cpu_template = AgentTemplate(tools=(burn_together(tmp_path),))
        a = host.start_session(cpu_template, "cpu-a")
        b = host.start_session(cpu_template, "cpu-b")
        peers = {a: b, b: a}
        with ThreadPoolExecutor(2) as pool:
            futures = {
                sid: pool.submit(
                    host.send,
                    sid,
                    "/burn_together " + json.dumps({"me": sid, "peer": peer, "n": 300_000}),
                    WAIT * 3,
                )
                for sid, peer in peers.items()
            }
            reports = {sid: _report(future.result(WAIT * 4)) for sid, future in futures.items()}
        for sid, peer in peers.items():
            mine, theirs = reports[sid], reports[peer]
            assert mine["met"], f"{sid} waited {WAIT} s for {peer} to start: they ran one by one"
            assert mine["pid"] == worker_pid(host, sid)
            assert mine["cpu"] > 0, f"{sid} used no CPU time: {mine}"
            assert mine["start"] < theirs["end"], f"{sid} started after {peer} ended: {reports}"
        assert reports[a]["pid"] != reports[b]["pid"], f"both ran in one process: {reports}"
    finally:
        host.shutdown()
