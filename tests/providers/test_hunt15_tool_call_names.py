"""A tool call without a tool name, found by a bug hunt.

An OpenAI-compatible (or Anthropic-compatible) server may answer a tool call whose
function name is absent, null or ``""``. The turn failed far from the cause, differently
by path: a whole Chat Completions answer without a name failed in the session with a
``TypeError`` ("the model's response is malformed: message.tool_calls[0].name must be a
str"), a stream with a ``ValueError`` ("tool call #0 of the stream never got a name"), and
a call named ``""`` entered the history: the session answered "unknown tool ''", and every
later request of the session sent a call named ``""``, which the providers refuse (HTTP
400). No tool can run a call without a name, and none can be sent back, so there is
nothing to tolerate: the turn now fails with a ``ProviderError`` naming the model and the
call (rolled back as any failed turn; the session goes on), whole or streamed, on all three
adapters alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, Message, ModelRequest, ProviderError, tool
from actors.adapters import ProviderAdapter
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.wire import Raw, Text, WireServer

WAIT = 10.0

NAMELESS = ["absent", None, ""]
"""A call's name: left out, null, or empty."""

REFUSED = r"wire-model answered a tool call without a tool name \(tool call #1"


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _named(fields: dict[str, Any], name: Any) -> dict[str, Any]:
    """``fields`` with ``name`` (none at all for ``"absent"``)."""
    return fields if name == "absent" else {**fields, "name": name}


def _ask(adapter: ProviderAdapter[Any]) -> Any:
    try:
        return adapter.respond(ModelRequest([Message.user("hi")], [add], on_delta=lambda _: None))
    finally:
        adapter.close()


# -- Chat Completions -------------------------------------------------------------------


def _chat_calls(name: Any) -> list[dict[str, Any]]:
    """A good call, then one named ``name``."""
    good = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    odd = {"id": "c2", "type": "function", "function": _named({"arguments": "{}"}, name)}
    return [good, odd]


def _chat_answer(name: Any) -> Raw:
    message = {"role": "assistant", "content": None, "tool_calls": _chat_calls(name)}
    return Raw(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "wire-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
    )


def _chat_stream(name: Any) -> Raw:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "wire-model",
            "choices": [choice],
        }

    calls = [{"index": n, **call} for n, call in enumerate(_chat_calls(name))]
    return Raw(
        events=[
            chunk({"role": "assistant", "tool_calls": calls}),
            chunk({}, "tool_calls"),
            "data: [DONE]\n\n",
        ]
    )


def _chat(server: WireServer, *, stream: bool = False) -> OpenAIChatModel:
    return OpenAIChatModel(
        "wire-model", base_url=server.base_url, api_key="k", max_retries=0, stream=stream
    )


@pytest.mark.parametrize("name", NAMELESS, ids=repr)
def test_a_chat_call_without_a_name_is_a_provider_error(chat: WireServer, name: Any) -> None:
    chat.script(_chat_answer(name))

    with pytest.raises(ProviderError, match=REFUSED):
        _ask(_chat(chat))


@pytest.mark.parametrize("name", NAMELESS, ids=repr)
def test_a_streamed_chat_call_without_a_name_is_a_provider_error(
    chat: WireServer, name: Any
) -> None:
    chat.script(_chat_stream(name))

    with pytest.raises(ProviderError, match=REFUSED):
        _ask(_chat(chat, stream=True))


def test_the_turn_fails_and_the_session_goes_on(chat: WireServer) -> None:
    chat.script(_chat_answer(""), Text("fine"))
    model = _chat(chat)
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add]))
    try:
        proxy = ref.proxy()
        with pytest.raises(ProviderError, match=REFUSED):
            proxy.send("go").get(timeout=WAIT)
        assert proxy.history().get(timeout=WAIT) == []  # rolled back
        assert proxy.send("again").get(timeout=WAIT).content == "fine"
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()

    assert chat.requests[-1].body["messages"] == [{"role": "user", "content": "again"}]


# -- Responses ----------------------------------------------------------------------------


def _responses_items(name: Any) -> list[dict[str, Any]]:
    good = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "add"}
    odd = _named({"type": "function_call", "id": "fc_2", "call_id": "c2"}, name)
    return [{**good, "arguments": "{}"}, {**odd, "arguments": "{}"}]


def _response(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "wire-model",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", NAMELESS, ids=repr)
def test_a_responses_call_without_a_name_is_a_provider_error(
    responses: WireServer, name: Any, stream: bool
) -> None:
    items = _responses_items(name)
    if stream:
        events: list[dict[str, Any] | str] = [
            {"type": "response.output_item.added", "output_index": n, "item": item}
            for n, item in enumerate(items)
        ]
        events.append({"type": "response.completed", "response": _response(items)})
        responses.script(Raw(events=events))
    else:
        responses.script(Raw(body=_response(items)))
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="k", max_retries=0, stream=stream
    )

    with pytest.raises(ProviderError, match=REFUSED):
        _ask(model)


# -- Anthropic Messages ---------------------------------------------------------------------


def _anthropic_blocks(name: Any) -> list[dict[str, Any]]:
    good = {"type": "tool_use", "id": "t1", "name": "add", "input": {}}
    return [good, _named({"type": "tool_use", "id": "t2", "input": {}}, name)]


def _anthropic_message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "wire-model",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _anthropic_stream(name: Any) -> Raw:
    events: list[dict[str, Any] | str] = [
        {"type": "message_start", "message": _anthropic_message([])}
    ]
    for index, block in enumerate(_anthropic_blocks(name)):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 1},
        }
    )
    events.append({"type": "message_stop"})
    return Raw(events=events)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", NAMELESS, ids=repr)
def test_an_anthropic_call_without_a_name_is_a_provider_error(
    anthropic: WireServer, name: Any, stream: bool
) -> None:
    if stream:
        anthropic.script(_anthropic_stream(name))
    else:
        anthropic.script(Raw(body=_anthropic_message(_anthropic_blocks(name))))
    model = AnthropicModel(
        "wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0, stream=stream
    )

    with pytest.raises(ProviderError, match=REFUSED):
        _ask(model)
