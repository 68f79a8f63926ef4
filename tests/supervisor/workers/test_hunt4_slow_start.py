"""A slow ``session_start`` in a worker: the host gives up waiting, the worker lives on.

Thread mode lets a start that outlives ``call_timeout`` finish, then stops it. In
process mode, before, the host's wait for the ``start`` reply SIGKILLed the worker
after ``call_timeout`` (without ``worker_call_timeout`` set) and retried the start on
the next worker, and the next: one slow hook crashed every session of three workers.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from actors import AgentTemplate, EchoModel, Plugin, PluginContext
from supervisor import AgentHost, MemoryCheckpointStore, WorkerCrashed
from tests.supervisor.host_helpers import WAIT, poll_until
from tests.supervisor.workers.worker_tools import worker_pid

CALL_TIMEOUT = 0.3


class GatedStart(Plugin):
    """A plugin whose ``session_start`` waits (up to 30 s) until the file ``gate`` exists."""

    name = "gated-start"

    def __init__(self, gate: Path) -> None:
        self.gate = gate

    def session_start(self, ctx: PluginContext) -> None:
        tick = threading.Event()
        for _ in range(3000):
            if self.gate.exists():
                return
            tick.wait(0.01)


def _placed(host: AgentHost, session_id: str) -> bool:
    return any(session_id in worker.sessions for worker in host.workers())


@pytest.mark.parametrize("io", ["auto", "portable"])
def test_a_start_past_the_call_timeout_kills_no_worker(tmp_path: Path, io: str) -> None:
    host = AgentHost(MemoryCheckpointStore(), workers=2, call_timeout=CALL_TIMEOUT, worker_io=io)
    try:
        plain = AgentTemplate(model=EchoModel())
        a, b = host.start_session(plain, "a"), host.start_session(plain, "b")
        pids = {a: worker_pid(host, a), b: worker_pid(host, b)}
        gate = tmp_path / "gate"
        slow = AgentTemplate(model=EchoModel(), plugins=[GatedStart(gate)])

        with pytest.raises(TimeoutError, match="call_timeout"):
            host.start_session(slow, "slow")
        # Before, the worker was killed one call_timeout after the start was written.
        assert not poll_until(lambda: host.worker_deaths > 0, 3 * CALL_TIMEOUT)
        gate.touch()
        assert poll_until(lambda: not _placed(host, "slow"), WAIT)  # started, then stopped

        assert host.worker_deaths == 0
        assert {sid: worker_pid(host, sid) for sid in (a, b)} == pids
        assert host.send(a, "still here").content == "echo: still here"
    finally:
        host.shutdown()


def test_a_start_past_the_worker_call_timeout_kills_its_own_worker_only(
    tmp_path: Path,
) -> None:
    """With ``worker_call_timeout`` the stuck worker is killed, as promised, but the start
    is not tried again on the other workers (killing each in turn)."""
    host = AgentHost(
        MemoryCheckpointStore(), workers=2, call_timeout=WAIT, worker_call_timeout=CALL_TIMEOUT
    )
    try:
        plain = AgentTemplate(model=EchoModel())
        a, b = host.start_session(plain, "a"), host.start_session(plain, "b")
        slow = AgentTemplate(model=EchoModel(), plugins=[GatedStart(tmp_path / "never")])

        with pytest.raises(WorkerCrashed):
            host.start_session(slow, "slow")

        assert host.wait_for_workers(WAIT)
        assert host.worker_deaths == 1  # before, 3: the start was tried on each worker
        for sid in (a, b):
            assert host.send(sid, "hi").content == "echo: hi"
    finally:
        host.shutdown()
