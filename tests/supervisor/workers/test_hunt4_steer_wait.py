"""A steer to a worker that is slow to take it: the text waits, the worker lives.

Only ``worker_call_timeout`` kills a worker for being slow (and it is off by default).
Before, a steer not taken within 10 s SIGKILLed the worker, crashing every session on
it: a worker stopped for a while (SIGSTOP, swapping) or a host whose reader thread was
held up by a slow subscriber was enough.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor.workers import _proxy
from tests.supervisor.workers.worker_tools import WAIT, worker_pid


@pytest.fixture(params=["auto", "portable"])
def host(request: pytest.FixtureRequest) -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), workers=1, worker_io=request.param)
    yield host
    host.shutdown()


def test_a_steer_the_worker_is_slow_to_take_kills_no_worker(
    host: AgentHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_proxy, "_STEER_WAIT", 0.2)
    sid = host.start_session(AgentTemplate(model=EchoModel()), "s")
    assert host.send(sid, "first").content == "echo: first"
    pid = worker_pid(host, sid)

    os.kill(pid, signal.SIGSTOP)
    try:
        host.steer(sid, "steered while stopped")  # returns once its wait is over
    finally:
        os.kill(pid, signal.SIGCONT)

    # The text reaches the next turn, before its user message.
    assert host.send(sid, "second").content == "echo: second"
    assert [m.content for m in host.history(sid)] == [
        "first",
        "echo: first",
        "steered while stopped",
        "second",
        "echo: second",
    ]
    assert host.worker_deaths == 0
    assert worker_pid(host, sid) == pid
    assert host.wait_for_workers(WAIT)
