"""A host's shutdown takes its sessions' final checkpoints on several threads at once, so
that they share group commits (one fsync each would make a shutdown of thousands of
sessions take seconds), and leaves no thread behind."""

from __future__ import annotations

import threading

from actors import AgentTemplate, EchoModel, Snapshot
from supervisor import AgentHost, CheckpointInfo, MemoryCheckpointStore
from tests.supervisor.host_helpers import assert_threads_back

SESSIONS = 20


class _MeetingStore(MemoryCheckpointStore):
    """Once ``final`` is set, each save waits until another is under way at the same time
    (a two-party barrier, up to 10 s): saves taken one at a time break the barrier and fail."""

    def __init__(self) -> None:
        super().__init__()
        self.final = False
        self.meet = threading.Barrier(2, timeout=10)
        self.savers: set[str] = set()
        self.lock = threading.Lock()

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.final:
            with self.lock:
                self.savers.add(threading.current_thread().name)
            self.meet.wait()
        return super().save(snapshot)


def test_final_checkpoints_are_taken_together_and_every_session_gets_one() -> None:
    before = set(threading.enumerate())
    store = _MeetingStore()
    host = AgentHost(store=store, checkpoint_every=None)
    sids = [host.start_session(AgentTemplate(model=EchoModel()), f"s{i}") for i in range(SESSIONS)]
    for sid in sids:
        host.send(sid, f"hello {sid}")
    store.final = True
    host.shutdown()

    assert_threads_back(before)
    assert len(store.savers) >= 2, store.savers
    for sid in sids:
        last = store.load(sid)
        assert [m.content for m in last.messages()] == [f"hello {sid}", f"echo: hello {sid}"]
    assert [s.status for s in host.list_sessions()] == ["stopped"] * SESSIONS
