"""The tenant guard (issue 13, item 9): no host call crosses tenants, and none moves a session.

Every call that names a session takes ``tenant_id``: a wrong one raises
``SessionNotFound`` with the message a missing session gets, and nothing
happens; the right one works. Every test runs in each host mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from actors import Event, Message
from supervisor import AgentHost, MemoryCheckpointStore, SessionNotFound
from tests.supervisor.host_helpers import HostFactory, template, watch_events

SID = "tenant-a-session"
OTHER = "tenant-b"

Call = Callable[[AgentHost, str | None], object]

CALLS: dict[str, Call] = {
    "send": lambda host, tenant: host.send(SID, "sneaky", tenant_id=tenant),
    "steer": lambda host, tenant: host.steer(SID, "sneaky", tenant_id=tenant),
    "history": lambda host, tenant: host.history(SID, tenant_id=tenant),
    "events": lambda host, tenant: host.events(SID, tenant_id=tenant),
    "subscribe": lambda host, tenant: host.subscribe(SID, lambda _e: None, tenant_id=tenant),
    "checkpoint": lambda host, tenant: host.checkpoint(SID, "sneaky", tenant_id=tenant),
    "kill": lambda host, tenant: host.kill(SID, tenant_id=tenant),
    "hibernate": lambda host, tenant: host.hibernate(SID, tenant_id=tenant),
    "stop_session": lambda host, tenant: host.stop_session(SID, tenant_id=tenant),
    "resume": lambda host, tenant: host.resume(SID, template(), tenant_id=tenant),
    "session_info": lambda host, tenant: host.session_info(SID, tenant_id=tenant),
}


def _users(history: list[Message]) -> list[str]:
    return [m.content or "" for m in history if m.role == "user"]


def _missing_message() -> str:
    try:
        raise SessionNotFound(SID)
    except SessionNotFound as exc:
        return str(exc)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_wrong_tenant_is_told_the_session_does_not_exist_and_nothing_happens(
    make_host: HostFactory, call: str
) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")
    host.send(SID, "mine")
    seen: list[Event] = []
    host.subscribe(SID, seen.append)
    saved = len(store.list(SID))

    with pytest.raises(SessionNotFound) as raised:
        CALLS[call](host, OTHER)

    assert str(raised.value) == _missing_message()
    # Nothing happened: the session serves as before, unchanged, never stopped,
    # killed, hibernated or checkpointed, and nothing was queued for its next turn.
    assert [(s.session_id, s.tenant_id, s.status) for s in host.list_sessions()] == [
        (SID, "tenant-a", "active")
    ]
    assert len(store.list(SID)) == saved
    assert [e.type for e in seen] == []
    host.send(SID, "again")
    assert _users(host.history(SID)) == ["mine", "again"]
    assert "crashed" not in [e.type for e in host.events(SID).events]


@pytest.mark.parametrize("call", sorted(set(CALLS) - {"resume"}))
def test_the_right_tenant_reaches_the_session(make_host: HostFactory, call: str) -> None:
    host = make_host()
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")

    CALLS[call](host, "tenant-a")

    sessions = host.list_sessions()
    if call == "stop_session":
        assert sessions == []
    else:
        assert [(s.session_id, s.tenant_id) for s in sessions] == [(SID, "tenant-a")]


def test_session_info_is_the_row_list_sessions_shows(make_host: HostFactory) -> None:
    host = make_host()
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")
    host.send(SID, "hello")
    assert host.session_info(SID, tenant_id="tenant-a") == host.list_sessions("tenant-a")[0]
    assert host.session_info(SID) == host.list_sessions()[0]
    with pytest.raises(SessionNotFound) as raised:
        host.session_info("nope")
    assert "nope" in str(raised.value)
    host.stop_session(SID)
    with pytest.raises(SessionNotFound):
        host.session_info(SID)


def test_each_call_with_the_right_tenant_does_its_work(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")
    waiter = watch_events(host, SID)
    mine: dict[str, Any] = {"tenant_id": "tenant-a"}

    host.steer(SID, "steered", **mine)
    assert host.send(SID, "hello", **mine).content == "echo: hello"
    assert _users(host.history(SID, **mine)) == ["steered", "hello"]
    assert "turn_finished" in [e.type for e in host.events(SID, **mine).events]
    seen: list[Event] = []
    host.subscribe(SID, seen.append, **mine)
    assert host.checkpoint(SID, "by-tenant", **mine).label == "by-tenant"
    assert store.load(SID).label == "by-tenant"
    host.kill(SID, **mine)
    waiter.wait_for("resumed")
    assert host.hibernate(SID, **mine) is True
    assert [e.type for e in seen][-1] == "hibernated"
    host.stop_session(SID, **mine)
    assert host.list_sessions() == []
    assert host.resume(SID, template(), **mine) == SID
    assert [(s.session_id, s.tenant_id) for s in host.list_sessions()] == [(SID, "tenant-a")]


def test_resume_never_moves_a_session_to_another_tenant(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")
    host.send(SID, "mine")
    host.stop_session(SID)
    checkpoints = len(store.list(SID))

    with pytest.raises(SessionNotFound) as raised:
        host.resume(SID, template(), tenant_id=OTHER)
    assert str(raised.value) == _missing_message()
    with pytest.raises(SessionNotFound):
        host.resume(SID, template(), store.list(SID)[0].checkpoint_id, tenant_id=OTHER)
    assert host.list_sessions() == []
    assert len(store.list(SID)) == checkpoints

    host.resume(SID, template())  # no tenant given: the saved one

    assert [(s.session_id, s.tenant_id) for s in host.list_sessions()] == [(SID, "tenant-a")]
    assert host.list_sessions(OTHER) == []
    assert _users(host.history(SID, tenant_id="tenant-a")) == ["mine"]


def test_resume_of_a_live_session_by_another_tenant_is_not_found(make_host: HostFactory) -> None:
    host = make_host()
    host.start_session(template(), session_id=SID, tenant_id="tenant-a")

    with pytest.raises(SessionNotFound):
        host.resume(SID, template(), tenant_id=OTHER)


def test_resume_with_a_tenant_of_a_session_without_checkpoints_is_not_found(
    make_host: HostFactory,
) -> None:
    host = make_host()

    with pytest.raises(SessionNotFound) as raised:
        host.resume(SID, template(), tenant_id="tenant-a")
    assert str(raised.value) == _missing_message()
