"""README, "Shutdown": a call on a shut-down host, one naming no session included,
raises ``HostShutDown``.

``resume_all`` is such a call. On a shut-down host it used to log one
"could not resume session" traceback per stored session (each ``resume`` raising
``HostShutDown`` inside its catch-all) and return ``[]``, so a program resuming
after a restart on the wrong (closed) host was told that nothing needed resuming.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, AsyncAgentHost, HostShutDown, MemoryCheckpointStore

TEMPLATE = AgentTemplate(model="echo")


def store_with_one_session() -> MemoryCheckpointStore:
    """A store holding the checkpoint of one session, whose host is gone."""
    store = MemoryCheckpointStore()
    with AgentHost(store=store) as first:
        first.send(first.start_session(TEMPLATE, session_id="s1"), "hello")
    return store


def test_resume_all_on_a_shut_down_host_raises_host_shut_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = AgentHost(store=store_with_one_session())
    host.shutdown()
    with caplog.at_level(logging.ERROR, logger="supervisor.host"):
        with pytest.raises(HostShutDown):
            host.resume_all(TEMPLATE)
    assert not [r for r in caplog.records if "could not resume" in r.getMessage()]


def test_async_resume_all_on_a_shut_down_host_raises_host_shut_down() -> None:
    host = AgentHost(store=store_with_one_session())
    host.shutdown()
    with pytest.raises(HostShutDown):
        asyncio.run(AsyncAgentHost(host).resume_all(TEMPLATE))


def test_a_shutdown_during_resume_all_ends_it_with_host_shut_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryCheckpointStore()
    with AgentHost(store=store) as first:
        for sid in ("s1", "s2"):
            first.send(first.start_session(TEMPLATE, session_id=sid), "hello")
    host = AgentHost(store=store)
    chosen: list[str] = []

    def shut_down_first(session_id: str) -> AgentTemplate:
        chosen.append(session_id)
        host.shutdown()  # (another thread's, in real life) before this one resumes
        return TEMPLATE

    with caplog.at_level(logging.ERROR, logger="supervisor.host"):
        with pytest.raises(HostShutDown):
            host.resume_all(shut_down_first)
    assert len(chosen) == 1  # the other session was not tried
    assert not [r for r in caplog.records if "could not resume" in r.getMessage()]
