"""Placement after a worker dies: its sessions spread over the live workers, the
replacement included.

A session is placed on the live worker with the fewest sessions. Before, the dead
worker's sessions were resumed before its replacement was even started, so all of
them went to the surviving workers and the replacement stayed empty: after one
death, one worker ran every session.
"""

from __future__ import annotations

import os
import signal

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import poll_until
from tests.supervisor.workers.worker_tools import WAIT, worker_pid


@pytest.mark.parametrize("io", ["auto", "portable"])
def test_a_dead_workers_sessions_are_resumed_on_its_replacement_too(io: str) -> None:
    host = AgentHost(MemoryCheckpointStore(), workers=2, worker_io=io)
    try:
        template = AgentTemplate(model=EchoModel())
        sessions = [host.start_session(template, f"s{i}") for i in range(4)]
        for sid in sessions:
            host.send(sid, "before")
        assert sorted(len(w.sessions) for w in host.workers()) == [2, 2]
        dead = worker_pid(host, sessions[0])

        os.kill(dead, signal.SIGKILL)
        assert poll_until(lambda: host.worker_deaths == 1, WAIT)
        for sid in sessions:  # each waits for its session's resume
            assert host.send(sid, "after").content == "echo: after"

        workers = host.workers()
        assert dead not in [w.pid for w in workers]
        assert sorted(len(w.sessions) for w in workers) == [2, 2], workers
    finally:
        host.shutdown()
