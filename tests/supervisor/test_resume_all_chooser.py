"""``resume_all`` with a function of the session id: ``None`` leaves a session as it is,
and a function raising for one session is logged and skips that one only (it aborted the
whole call, leaving every later session of the store unresumed)."""

from __future__ import annotations

import logging

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import HostFactory, template


def _stored(make_host: HostFactory, names: str) -> MemoryCheckpointStore:
    store = MemoryCheckpointStore()
    first = make_host(store=store)
    for name in names:
        first.start_session(template(), name)
        first.send(name, f"hi {name}")
    first.shutdown()
    return store


def test_a_chooser_returning_none_leaves_the_session_alone(make_host: HostFactory) -> None:
    host = make_host(store=_stored(make_host, "abc"))

    resumed = host.resume_all(lambda sid: None if sid == "b" else template())

    assert sorted(resumed) == ["a", "c"]
    assert sorted(s.session_id for s in host.list_sessions()) == ["a", "c"]
    assert host.resume("b", template()) == "b"  # still resumable later


def test_a_chooser_raising_skips_only_that_session(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    host: AgentHost = make_host(store=_stored(make_host, "abcd"))
    known = {"a": template(), "c": template(), "d": template()}

    def choose(session_id: str) -> AgentTemplate:
        return known[session_id]  # KeyError for "b"

    with caplog.at_level(logging.ERROR, logger="supervisor"):
        resumed = host.resume_all(choose)

    assert sorted(resumed) == ["a", "c", "d"]
    assert any(
        "could not resume session 'b'" in r.getMessage() and r.exc_info for r in caplog.records
    )
    assert host.history("d")[-1].content == "echo: hi d"
