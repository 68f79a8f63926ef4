"""Per-session usage on ``SessionInfo``: counted from model calls as the session counts
them, kept while hibernated, and taken from the checkpoint a crashed session resumes."""

from __future__ import annotations

from actors import AgentTemplate, Message, ModelResponse, ScriptedModel, Usage
from supervisor import AgentHost
from tests.supervisor.host_helpers import HostFactory, watch_events


def _usage_of(host: AgentHost, sid: str) -> Usage:
    (info,) = [i for i in host.list_sessions() if i.session_id == sid]
    return info.usage


def test_session_info_carries_the_sessions_usage(make_host: HostFactory) -> None:
    calls = [ModelResponse(Message.assistant(f"a{i}"), Usage(10, 2, 6, 1)) for i in range(4)]
    host = make_host(checkpoint_every=2)
    sid = host.start_session(AgentTemplate(model=ScriptedModel(calls)))
    assert _usage_of(host, sid) == Usage()
    for text in ("one", "two", "three"):
        host.send(sid, text)
    assert _usage_of(host, sid) == Usage(30, 6, cached_input_tokens=18, reasoning_tokens=3)
    # the checkpoint after turn two is what a crash restart resumes: usage with it
    waiter = watch_events(host, sid)
    host.kill(sid)
    waiter.wait_for("resumed")
    assert _usage_of(host, sid) == Usage(20, 4, cached_input_tokens=12, reasoning_tokens=2)
    assert host.checkpoint(sid).usage() == _usage_of(host, sid)
    assert host.hibernate(sid)
    assert _usage_of(host, sid) == Usage(20, 4, cached_input_tokens=12, reasoning_tokens=2)
