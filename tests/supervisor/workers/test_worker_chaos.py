"""Process-mode chaos: 200 worker processes SIGKILLed while threads keep talking to sessions.

The invariant under test is the host's durability promise, in process mode:
every turn a caller got an answer for is in that session's history, whatever
worker died; a turn that raised ``WorkerCrashed`` (a ``SessionCrashed``) was
not acknowledged and the caller moves on. After the storm no registry entry
refers to a dead proxy or to a session on a dead worker, and a shutdown leaves
no child process, no file descriptor and no thread behind.

Every wait is on a real event with a bound: a kill waits until each session
of the killed worker was evicted and resumed and the worker's replacement is
up, never on a sleep. Seeded choices; only the interleaving varies from run
to run, never what is asserted.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import (
    WAIT,
    PacedSenders,
    SessionTally,
    assert_acknowledged_turns_kept,
    assert_threads_back,
    poll_until,
    template,
)
from tests.supervisor.workers.worker_tools import fds, sessions_on, worker_pid

SESSIONS = 8
WORKERS = 3
SENDERS = 3
KILLS = 200
TURNS_PER_KILL = 2
"""Each sender's pace (see ``PacedSenders``)."""


def _open_fds() -> dict[str, str]:
    """This process's open file descriptors and what each refers to (``pipe:[inode]``...)."""
    out = {}
    for fd in fds():
        with contextlib.suppress(FileNotFoundError):  # the listing's own fd, closed by now
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return out


def _worker_process_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_two_hundred_worker_kills_lose_no_acknowledged_turn() -> None:
    AgentHost(MemoryCheckpointStore(), workers=1).shutdown()  # the forkserver and its fds stay
    gc.collect()  # close what earlier tests left to the collector, so it does not close now
    threads_before = set(threading.enumerate())
    fds_before = _open_fds()
    tally = SessionTally()

    host = AgentHost(
        MemoryCheckpointStore(),
        workers=WORKERS,
        max_restarts=10_000,
        max_seconds=1.0,
        worker_max_restarts=KILLS,  # a kill cycle takes ~0.1 s: 200 fit in a minute
        worker_max_seconds=60.0,
    )
    senders = PacedSenders(
        host,
        [f"p{i}" for i in range(SESSIONS)],
        senders=SENDERS,
        turns_per_fault=TURNS_PER_KILL,
        name="worker-chaos-sender",
    )
    acked = senders.acked
    try:
        for sid in acked:
            host.start_session(template(), sid)
            host.subscribe(sid, tally.subscriber(sid))

        started = time.perf_counter()
        senders.start()
        rng = random.Random(2026)
        victims_of: Counter[str] = Counter()
        killed_pids: list[int] = []
        try:
            for _ in range(KILLS):
                # A random worker among those running sessions (every kill crashes some).
                busy = sorted({worker_pid(host, sid) for sid in acked})
                victim = rng.choice(busy)
                on_victim = sessions_on(host, victim, list(acked))
                os.kill(victim, signal.SIGKILL)
                killed_pids.append(victim)
                victims_of.update(on_victim)
                # Each of its sessions evicted and resumed, and the worker replaced.
                tally.wait_resumed(victims_of)
                assert host.wait_for_workers(WAIT)
                assert victim not in [w.pid for w in host.workers()]
                assert all(worker_pid(host, sid) != victim for sid in acked)
                senders.fault_done()
        finally:
            senders.stop()
        storm = time.perf_counter() - started
        assert not senders.failures, senders.failures
        assert not any(t.is_alive() for t in senders.threads)
        tally.wait_all_active(host)

        # Every kill was a real worker death, replaced; every session it ran was resumed once.
        assert len(killed_pids) == len(set(killed_pids)) == KILLS
        assert host.worker_deaths == KILLS
        assert not host.workers_given_up
        assert tally.crashed == tally.resumed == victims_of
        assert not tally.given_up
        total_acked = senders.total
        assert total_acked > KILLS, "the senders barely ran"

        # No acknowledged turn is missing, none is doubled, each sender's are in order.
        assert_acknowledged_turns_kept(host, acked, SENDERS)

        # The registry holds exactly the sessions, each with a live proxy on a live worker.
        entries = host.registry.list()
        assert sorted(entry.session_id for entry in entries) == sorted(acked)
        assert host.registry.count() == SESSIONS
        assert all(entry.actor_ref.is_alive() for entry in entries)
        host.registry._check_consistency()
        live = [w.pid for w in host.workers()]
        assert len(live) == WORKERS
        assert not set(live) & set(killed_pids)
        for entry in entries:
            pid = worker_pid(host, entry.session_id)  # on exactly one live worker
            assert pid in live
            assert _worker_process_alive(pid)
        for sid in acked:
            assert host.send(sid, "after the storm", timeout=WAIT).content == (
                "echo: after the storm"
            )
        print(  # shown with -s: the figures the report quotes
            f"\n{KILLS} kills in {storm:.1f} s; {total_acked} acknowledged turns, "
            f"not acknowledged: {dict(senders.unacknowledged)}; "
            f"{sum(victims_of.values())} session resumes"
        )
    finally:
        host.shutdown()
    assert multiprocessing.active_children() == []
    # Nothing opened since is still open (a descriptor open before may have been closed).
    leaked = set(_open_fds().items()) - set(fds_before.items())
    assert not leaked, f"file descriptors leaked: {sorted(leaked)}"
    assert_threads_back(threads_before)
    assert threading.active_count() == len(threads_before)


# -- the worker restart intensity ------------------------------------------------------------


class _Ticking:
    """A clock that moves 11 s forward on every reading: no two readings share a 10 s window."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 11.0
        return self.now


def _buried(host: AgentHost, dead_pid: int) -> bool:
    """Whether the host has handled the death of worker ``dead_pid``: replaced it, or given up."""
    pids = [w.pid for w in host.workers()]
    return host.workers_given_up or (bool(pids) and dead_pid not in pids)


def test_the_hosts_clock_drives_the_worker_restart_intensity() -> None:
    """Sixty worker deaths, each 11 s apart on the host's clock: never over 50 in 10 s."""
    host = AgentHost(MemoryCheckpointStore(), workers=1, clock=_Ticking())
    try:
        for _ in range(60):
            [worker] = host.workers()
            os.kill(worker.pid, signal.SIGKILL)
            assert poll_until(functools.partial(_buried, host, worker.pid))
            assert not host.workers_given_up
        sid = host.start_session(template(), "after-sixty-deaths")
        assert host.send(sid, "still here").content == "echo: still here"
    finally:
        host.shutdown()
