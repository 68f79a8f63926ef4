"""A subscriber that stops (or hibernates) another session on the same worker.

``AgentHost.subscribe`` promises that a subscriber may call the host for another
session. In process mode a turn's ``turn_finished`` reaches subscribers on the
thread that read the turn's reply, the caller of ``send``. That thread used to
hold the worker's pipe for the whole delivery, so stopping another session of the
same worker waited for the worker's answer to ``stop`` (``WorkerSession._release``,
on the proxy's thread), which only the pipe's holder could read: the stop waited
out ``call_timeout``, the host logged that session as "abandoned, still running",
and only then was the answer read. Thread mode stops it at once, and so does
process mode now: the thread hands the pipe on before it delivers a frame, and
the frames of the session being delivered wait for it (``workers/_lanes.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from actors import Event
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, template

_CALL_TIMEOUT = 10.0
"""The host's ``call_timeout``: what the stop used to wait out."""


@pytest.fixture(params=["epoll", "portable"])
def host(request: pytest.FixtureRequest) -> Iterator[AgentHost]:
    made = AgentHost(
        MemoryCheckpointStore(), workers=1, call_timeout=_CALL_TIMEOUT, worker_io=request.param
    )
    yield made
    made.shutdown()


@pytest.mark.parametrize("action", ["stop_session", "hibernate"])
def test_a_subscriber_stops_another_session_of_its_worker_at_once(
    host: AgentHost, action: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = host.start_session(template(), "a")
    other = host.start_session(template(), "b")
    done = threading.Event()
    took: list[float] = []

    def stop_the_other(event: Event) -> None:
        if event.type != "turn_finished" or done.is_set():
            return
        began = time.monotonic()
        try:
            getattr(host, action)(other)
        finally:
            took.append(time.monotonic() - began)
            done.set()

    host.subscribe(first, stop_the_other)
    caplog.set_level(logging.WARNING)
    assert host.send(first, "hi").content == "echo: hi"

    assert done.wait(_CALL_TIMEOUT + WAIT)
    if action == "stop_session":
        assert other not in [info.session_id for info in host.list_sessions()]
    else:
        assert host.session_info(other).status == "hibernated"
    assert not [r for r in caplog.records if "abandoned" in r.getMessage()]
    assert took[0] < _CALL_TIMEOUT / 2  # not the whole call_timeout
