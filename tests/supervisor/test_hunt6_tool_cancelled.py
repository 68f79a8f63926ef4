"""Under an ``AgentHost``, a tool that raises ``asyncio.CancelledError`` fails as a tool,
found by a bug hunt: the exception (a ``BaseException``) crashed the session, so the
send raised ``SessionCrashed`` and the session was restarted from its checkpoint, the
turn lost. Now the model sees a tool error and the turn answers, in a worker process as
in a thread."""

from __future__ import annotations

import asyncio

import pytest

from actors import tool
from tests.supervisor.host_helpers import HostFactory, template


@tool
def cancelled() -> str:
    """Raise ``asyncio.CancelledError``, as an asyncio call cancelled inside a tool does."""
    raise asyncio.CancelledError("the request was cancelled")


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_tool_raising_cancelled_error_is_a_tool_error(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(tools=[cancelled]), "cancelling")
    ref = host.registry.get(sid).actor_ref
    cursor = host.events(sid).cursor

    answer = host.send(sid, "/cancelled")

    error = "error: CancelledError: the request was cancelled"
    assert answer.content == f"cancelled returned: {error}"
    events = host.events(sid, since=cursor).events
    assert [e.type for e in events] == [
        "turn_started",
        "model_response",
        "tool_call",
        "tool_result",
        "model_response",
        "turn_finished",
    ]
    assert (events[3].data["ok"], events[3].data["content"]) == (False, error)
    assert host.registry.get(sid).actor_ref is ref  # not restarted
    assert [m.role for m in host.history(sid)] == ["user", "assistant", "tool", "assistant"]
    assert host.send(sid, "after").content == "echo: after"
