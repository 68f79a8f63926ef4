"""1,000 crash/restart cycles leave threads and the registry back at their baseline."""

from __future__ import annotations

import threading
from typing import Any

import pykka

from supervisor import ChildSpec, SessionStore, SupervisorHandle, terminate
from tests.supervisor.helpers import WAIT, Starts, Worker, crash

CYCLES = 1000


class Session(Worker):
    """A worker that remembers its thread, so the test can join it after it dies."""

    def on_start(self) -> None:
        self.thread = threading.current_thread()
        super().on_start()


def test_thousand_crash_restart_cycles_return_to_baseline() -> None:
    baseline_threads = set(threading.enumerate())
    store = SessionStore()
    starts = Starts()
    threads: list[threading.Thread] = []

    def start() -> pykka.ActorRef[Any]:
        ref = Session.start("s", starts=starts)
        store.create("session-1", ref, tenant_id="t")
        return ref

    handle = SupervisorHandle.start([ChildSpec("s", start)], max_restarts=CYCLES + 1)
    for n in range(1, CYCLES + 1):
        ref = starts.latest("s")
        crash(ref)
        starts.wait("s", n + 1)
        assert terminate(ref, WAIT)
        handle.which_children()  # the supervisor has finished the start function (and create)
    assert store.count() == 1
    assert store.get("session-1").actor_ref is starts.latest("s")
    assert starts.latest("s").ask("ping", timeout=WAIT) == "pong"
    threads = [t for t in threading.enumerate() if t not in baseline_threads]
    assert len(threads) == 2  # the supervisor and the live child; dead ones have exited
    assert handle.stop() == []
    for thread in threads:
        thread.join(WAIT)
    assert set(threading.enumerate()) == baseline_threads
    assert store.count() == 0
    store._check_consistency()
