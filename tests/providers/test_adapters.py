"""Each adapter against a real HTTP server speaking its provider's protocol, through the
official SDK pointed at ``base_url``: mapping, usage, streaming, retries, errors."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from actors import (
    INVALID_ARGUMENTS,
    Credentials,
    Delta,
    Message,
    ModelRequest,
    ProviderError,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    tool,
)
from tests.providers.expected import CONVERSATION, expected_conversation
from tests.providers.flavours import AdapterFactory, Flavour
from tests.providers.wire import Calls, CutOff, Status, Text, WireServer

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def ask(
    adapter: Any,
    messages: tuple[Message, ...] = (Message.user("hi"),),
    deltas: list[Delta] | None = None,
    **fields: Any,
) -> Any:
    on_delta = None if deltas is None else deltas.append
    return adapter.respond(ModelRequest(messages, [add], on_delta=on_delta, **fields))


@STREAM
def test_text_usage_and_stop_reason(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory, stream: bool
) -> None:
    server.script(Text("Hello there, world", pieces=["Hel", "lo there,", " world"]))
    deltas: list[Delta] = []
    response = ask(make_adapter(stream=stream), deltas=deltas)
    assert response.message == Message.assistant("Hello there, world")
    assert response.usage == Usage(20, 5, cached_input_tokens=8, reasoning_tokens=2)
    assert response.stop_reason == "stop"
    expected = [TextDelta("Hel"), TextDelta("lo there,"), TextDelta(" world")] if stream else []
    assert deltas == expected
    assert bool(server.requests[0].body.get("stream")) is stream


@STREAM
def test_parallel_tool_calls(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory, stream: bool
) -> None:
    server.script(Calls([("c1", "add", {"a": 1, "b": 2}), ("c2", "add", {"a": 3, "b": 4})]))
    deltas: list[Delta] = []
    response = ask(make_adapter(stream=stream), deltas=deltas)
    assert response.message.tool_calls == (
        ToolCall("c1", "add", {"a": 1, "b": 2}),
        ToolCall("c2", "add", {"a": 3, "b": 4}),
    )
    assert response.stop_reason == "tool_calls"
    assert response.usage.cached_input_tokens == 8
    if stream:
        opened = [d for d in deltas if isinstance(d, ToolCallDelta) and d.id is not None]
        assert [(d.index, d.id, d.name) for d in opened] == [(0, "c1", "add"), (1, "c2", "add")]
        assert all(isinstance(d, ToolCallDelta) for d in deltas)


def test_the_conversation_and_tools_are_mapped(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    ask(make_adapter(), CONVERSATION)
    body = server.requests[0].body
    for name, value in expected_conversation(flavour.name, CONVERSATION).items():
        assert body[name] == value, name
    assert "previous_response_id" not in body
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first."},
            "b": {"type": "integer", "description": "The second."},
        },
        "required": ["a", "b"],
    }
    tools = {
        "chat": [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": schema,
                },
            }
        ],
        "responses": [
            {
                "type": "function",
                "name": "add",
                "description": "Add two integers.",
                "parameters": schema,
                "strict": False,
            }
        ],
        "anthropic": [{"name": "add", "description": "Add two integers.", "input_schema": schema}],
    }
    assert body["tools"] == tools[flavour.name]
    assert body["model"] == "wire-model"


def test_tool_arguments_that_were_not_json_go_back_as_written(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    broken = ToolCall("c1", "add", {INVALID_ARGUMENTS: '{"a": 1'})
    conversation = (
        Message.user("go"),
        Message.assistant(None, (broken,)),
        Message("tool", "error: not JSON", tool_call_id="c1", name="add"),
    )
    ask(make_adapter(), conversation)
    body = server.requests[0].body
    if flavour.name == "chat":
        assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1'
    elif flavour.name == "responses":
        assert body["input"][1]["arguments"] == '{"a": 1'
    else:
        assert body["messages"][1]["content"][0]["input"] == {INVALID_ARGUMENTS: '{"a": 1'}


def test_credentials_choose_the_key_and_headers_per_request(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    adapter = make_adapter(default_headers={"X-App": "wire-test"})
    ask(adapter)
    ask(adapter, credentials=Credentials(api_key="sk-tenant-a", headers={"X-Tenant": "a"}))
    ask(adapter, credentials=Credentials(api_key="sk-tenant-b"))
    ask(adapter, credentials=Credentials(api_key="sk-tenant-a", headers={"X-Tenant": "a"}))
    seen = [(flavour.key_of(r.headers), r.headers.get("x-tenant")) for r in server.requests]
    assert seen == [
        ("sk-wire", None),
        ("sk-tenant-a", "a"),
        ("sk-tenant-b", None),
        ("sk-tenant-a", "a"),
    ]
    assert all(r.headers["x-app"] == "wire-test" for r in server.requests)


@pytest.mark.parametrize("end_user", [None, "tenant", "session"])
def test_the_end_user_field(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory, end_user: str | None
) -> None:
    ask(make_adapter(end_user=end_user), session_id="s-1", tenant_id="acme")
    body = server.requests[0].body
    sent = body.get("metadata", {}).get("user_id") if flavour.name == "anthropic" else None
    sent = sent or body.get("safety_identifier")
    assert sent == {None: None, "tenant": "acme", "session": "s-1"}[end_user]


def test_retry_after_is_honoured_by_the_sdk(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    # 0.6 s is longer than the SDKs' first backoff (0.5 s at most): a retry that waited
    # that long followed the header.
    server.script(Status(429, "slow down", {"retry-after": "0.6"}), Text("ok"))
    assert ask(make_adapter(max_retries=1)).message.content == "ok"
    first, second = server.wait_for(2)
    assert second.at - first.at >= 0.6


@pytest.mark.parametrize(
    ("status", "error"), [(429, "RateLimitError"), (500, "InternalServerError")]
)
def test_an_error_that_survives_the_retries_is_the_sdks(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory, status: int, error: str
) -> None:
    quick = {"retry-after-ms": "10"}
    server.script(Status(status, "nope", quick), Status(status, "nope", quick))
    with pytest.raises(getattr(flavour.sdk, error)) as info:
        ask(make_adapter(max_retries=1))
    assert info.value.status_code == status
    assert len(server.requests) == 2


@STREAM
def test_a_cut_off_answer_is_the_sdks_connection_error(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory, stream: bool
) -> None:
    if stream:
        server.script(CutOff(Text("Hello there, world", pieces=["Hel", "lo", "!"]), after=3))
    else:
        server.script(CutOff(Text("never sent"), after=0))
    deltas: list[Delta] = []
    with pytest.raises(flavour.sdk.APIConnectionError):
        ask(make_adapter(stream=stream), deltas=deltas)
    assert len(deltas) <= 2


def test_a_stream_that_ends_early_but_cleanly_is_a_provider_error(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    server.script(CutOff(Text("Hello there, world"), after=3, clean=True))
    with pytest.raises(ProviderError, match="ended before"):
        ask(make_adapter(stream=True))


def test_an_adapter_pickles_as_its_configuration(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    adapter = make_adapter(api_key="sk-configured-key-123456", timeout=5.0)
    ask(adapter)  # builds its client
    data = pickle.dumps(adapter)
    assert len(data) < 2000  # settings only: no client, pool or lock
    copy = pickle.loads(data)
    try:
        assert ask(copy).message.content == "echo: hi"
    finally:
        copy.close()
    assert flavour.key_of(server.requests[-1].headers) == "sk-configured-key-123456"
    assert "sk-configured" not in repr(adapter)
    assert adapter.model_string == f"{flavour.cls.provider}:wire-model"


def test_closing_an_adapter_closes_its_connections(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    adapter = make_adapter()
    ask(adapter)
    adapter.close()
    assert ask(adapter).message.content == "echo: hi"  # a new pool on the next request
    adapter.close()
