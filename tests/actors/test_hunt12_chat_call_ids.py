"""A whole Chat Completions answer whose tool calls lack ids gets ids as a stream does,
found by a bug hunt.

A streamed tool call without an id (or with ``""``) gets ``call_<index>`` from the
stream's assembly, but a whole answer's kept what the server sent: ``None`` failed every
turn in which the model called a tool ("the model's response is malformed:
message.tool_calls[0].id must be a str"), and ``""`` on every call gave the provider
results it could not tell apart. Now both ways give ``call_<index>``; a server's own ids
are kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ToolCall,
    tool,
)
from actors.adapters.openai_chat import OpenAIChatModel
from tests.providers.wire import CHAT, Raw, WireServer

WAIT = 10.0


@pytest.fixture
def chat() -> Iterator[WireServer]:
    with WireServer(CHAT) as server:
        yield server


def _answer(message: dict[str, Any], finish: str) -> Raw:
    return Raw(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "wire-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
    )


def _calls(shape: dict[str, Any]) -> Raw:
    calls = [
        {**shape, "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
        {**shape, "type": "function", "function": {"name": "mul", "arguments": '{"b": 2}'}},
    ]
    return _answer({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")


@pytest.mark.parametrize("shape", [{}, {"id": None}, {"id": ""}], ids=["no-id", "null", "empty"])
def test_calls_without_ids_get_the_ids_a_stream_gives(
    chat: WireServer, shape: dict[str, Any]
) -> None:
    chat.script(_calls(shape))
    model = OpenAIChatModel("wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0)
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("call_0", "add", {"a": 1}),
        ToolCall("call_1", "mul", {"b": 2}),
    )


def test_a_servers_own_ids_are_kept(chat: WireServer) -> None:
    chat.script(_calls({"id": "c9"}))
    model = OpenAIChatModel("wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0)
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert [call.id for call in answer.message.tool_calls] == ["c9", "c9"]


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


@tool
def mul(b: int) -> int:
    """Double."""
    return b * 2


def test_a_session_on_such_a_server_runs_its_tools(chat: WireServer) -> None:
    chat.script(_calls({}), _answer({"role": "assistant", "content": "2 and 4"}, "stop"))
    model = OpenAIChatModel("wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0)
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add, mul]))
    try:
        answer = ref.proxy().send("go").get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()
    assert answer.content == "2 and 4"
    sent = chat.requests[-1].body["messages"]
    results = [(m["tool_call_id"], m["content"]) for m in sent if m["role"] == "tool"]
    assert results == [("call_0", "2"), ("call_1", "4")]
