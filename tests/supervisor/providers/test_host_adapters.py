"""Sessions on each adapter, in thread and worker mode, against a server speaking the
provider's protocol: tool turns with usage, streamed deltas, failures rolled back."""

from __future__ import annotations

import threading

import pytest

from actors import AgentTemplate, Event, Message, Usage, tool
from tests.providers.flavours import AdapterFactory, Flavour
from tests.providers.wire import Calls, CutOff, Status, Text, WireServer
from tests.supervisor.host_helpers import WAIT, HostFactory

QUICK = {"retry-after-ms": "10"}

BOTH_MODES = pytest.mark.parametrize("mode", ["thread", "process"])
"""Threads, and workers whose pipes are read the platform's way; the portable reading (one
reader thread) is exercised by the streaming test, the one that depends on it."""


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@BOTH_MODES
def test_a_turn_with_parallel_tool_calls_and_its_usage(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
) -> None:
    host = make_provider_host()
    template = AgentTemplate(model=make_adapter(), tools=[add], instructions="Be brief.")
    sid = host.start_session(template)
    seen: list[Event] = []
    host.subscribe(sid, seen.append)
    server.script(Calls([("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})]))
    server.script(Text("3 and 7"))
    assert host.send(sid, "1+2 and 3+4?").content == "3 and 7"
    history = host.history(sid)
    assert [(m.role, m.content) for m in history[2:4]] == [("tool", "3"), ("tool", "7")]
    responses = [e.data for e in seen if e.type == "model_response"]
    assert [r["stop_reason"] for r in responses] == ["tool_calls", "stop"]
    one_call = Usage(20, 5, cached_input_tokens=8, reasoning_tokens=2)
    assert responses[0]["usage"] == one_call.to_dict()
    (info,) = host.list_sessions()
    assert info.usage == one_call + one_call
    assert host.checkpoint(sid).usage() == info.usage


def test_streamed_deltas_reach_a_subscriber_while_the_model_still_streams(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
) -> None:
    host = make_provider_host()
    sid = host.start_session(AgentTemplate(model=make_adapter(stream=True)))
    seen: list[Event] = []
    first_seen = threading.Event()

    def watch(event: Event) -> None:
        seen.append(event)
        if event.type == "delta" and event.data.get("text") == "first":
            first_seen.set()

    host.subscribe(sid, watch)
    relayed_early: list[bool] = []
    sent_first = False

    def pace(_index: int, data: bytes) -> None:
        # The server writes nothing after the first piece until a subscriber has its
        # delta: deltas held back until the reply would leave this waiting in vain.
        nonlocal sent_first
        if sent_first and not relayed_early:
            relayed_early.append(first_seen.wait(WAIT))
        sent_first = sent_first or b"first" in data

    server.chunk_hook = pace
    server.script(Text("first second", pieces=["first", " second"]))
    assert host.send(sid, "go").content == "first second"
    assert relayed_early == [True]
    kinds = [e.type for e in seen]
    assert kinds == ["turn_started", "delta", "delta", "model_response", "turn_finished"]
    assert [e.data["text"] for e in seen if e.type == "delta"] == ["first", " second"]
    polled = host.events(sid).events
    assert [(e.seq, e.type) for e in polled] == [(e.seq, e.type) for e in seen]


@BOTH_MODES
def test_a_stream_cut_off_halfway_rolls_the_turn_back(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
) -> None:
    host = make_provider_host()
    sid = host.start_session(AgentTemplate(model=make_adapter(stream=True)))
    host.send(sid, "one")
    before = host.history(sid)
    seen: list[Event] = []
    host.subscribe(sid, seen.append)
    server.script(CutOff(Text("Hello there, world", pieces=["Hel", "lo", " there"]), after=4))
    with pytest.raises(flavour.sdk.APIConnectionError, match="Connection error"):
        host.send(sid, "two")
    assert host.history(sid) == before
    kinds = [e.type for e in seen]
    assert kinds[0] == "turn_started"
    assert "delta" in kinds
    assert kinds[-1] == "error"
    assert "crashed" not in kinds
    assert host.send(sid, "three").content == "echo: three"  # the session lives on


@BOTH_MODES
def test_failures_after_the_sdks_retries_fail_the_turn_with_the_sdks_error(
    flavour: Flavour,
    server: WireServer,
    make_adapter: AdapterFactory,
    make_provider_host: HostFactory,
) -> None:
    host = make_provider_host()
    sid = host.start_session(AgentTemplate(model=make_adapter(max_retries=1)))
    server.script(Status(429, "slow down", {"retry-after": "0.05"}), Text("retried"))
    assert host.send(sid, "a").content == "retried"
    first, second = server.wait_for(2)  # the SDK retried, after the server's retry-after
    assert second.at - first.at >= 0.05
    before = host.history(sid)
    for status, error in (
        (429, flavour.sdk.RateLimitError),
        (500, flavour.sdk.InternalServerError),
    ):
        server.script(
            Status(status, "still failing", QUICK), Status(status, "still failing", QUICK)
        )
        with pytest.raises(error, match="still failing") as info:
            host.send(sid, "b")
        assert info.value.status_code == status  # a plain attribute: kept across the pipe
        assert host.history(sid) == before
    (listed,) = host.list_sessions()
    assert listed.status == "active"
    events = [e.type for e in host.events(sid).events]
    assert "crashed" not in events
    assert host.send(sid, "c").content == "echo: c"
    assert host.history(sid)[-2:] == [Message.user("c"), Message.assistant("echo: c")]
