"""A ``tenant_id`` argument that is neither ``None`` nor a ``str`` is the caller's mistake:
every call refuses it with a ``TypeError`` naming it, as it does a session id that is no
``str``. It matched no tenant, so calls answered ``SessionNotFound`` (or an empty list)
for a session that exists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import template

BAD: Any = 5

CALLS: dict[str, Callable[[AgentHost], object]] = {
    "send": lambda host: host.send("s1", "hi", tenant_id=BAD),
    "history": lambda host: host.history("s1", tenant_id=BAD),
    "steer": lambda host: host.steer("s1", "note", tenant_id=BAD),
    "checkpoint": lambda host: host.checkpoint("s1", tenant_id=BAD),
    "session_info": lambda host: host.session_info("s1", tenant_id=BAD),
    "session_info of a missing id": lambda host: host.session_info("nope", tenant_id=BAD),
    "list_sessions": lambda host: host.list_sessions(BAD),
    "hibernate": lambda host: host.hibernate("s1", tenant_id=BAD),
    "stop_session": lambda host: host.stop_session("s1", tenant_id=BAD),
    "futures.send": lambda host: host.futures.send("s1", "hi", tenant_id=BAD),
    "futures.hibernate": lambda host: host.futures.hibernate("s1", tenant_id=BAD),
    "futures.steer": lambda host: host.futures.steer("s1", "note", tenant_id=BAD),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_a_tenant_id_that_is_no_str_is_refused(call: Callable[[AgentHost], object]) -> None:
    with AgentHost(store=MemoryCheckpointStore()) as host:
        host.start_session(template(), "s1", tenant_id="acme")
        with pytest.raises(TypeError, match="tenant_id must be a str or None, got int"):
            call(host)
        assert host.session_info("s1", tenant_id="acme").status == "active"  # untouched
