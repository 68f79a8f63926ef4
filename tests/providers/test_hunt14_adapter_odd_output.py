"""What OpenAI- and Anthropic-compatible servers send besides the official shapes, found by
a bug hunt against the wire servers.

Each failed the turn far from the cause (an ``AttributeError`` or ``TypeError`` deep in
the mapping, or a "malformed response" the session refused), on every turn that met it:

- tool-call arguments given as a JSON object instead of JSON text (proxies converting
  another API's calls; the Anthropic adapter already took JSON text in place of an
  object): Chat Completions whole and streamed, Responses;
- a Chat Completions stream chunk whose choice has ``delta: null`` or none at all (Azure
  OpenAI's content-filter chunks): its ``finish_reason`` still counts;
- a Chat Completions ``content`` given as a list of parts (Mistral's reasoning models:
  ``thinking`` and ``text`` chunks), whole and streamed: the text parts are the answer;
- a Chat Completions choice without a ``message``: now a ``ProviderError`` saying so;
- a tool call without an id in a whole Responses or Messages answer (a streamed one got
  ``call_<index>``, as Chat Completions calls do both ways): now ``call_<index>`` too;
- a token count sent as a float, as text, negative or beyond 64 bits (``Usage`` refused
  it, and the turn whose answer came failed): now read as the count it holds, else 0;
- a stop reason that is no text (the session refused it): now none;
- a Responses ``message`` item whose ``content`` is the text itself or null, and a
  Messages ``text`` block whose text is null: now the text, or none; likewise a streamed
  text delta whose text is null (Responses, Messages).
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import (
    INVALID_ARGUMENTS,
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ProviderError,
    TextDelta,
    ToolCall,
    tool,
)
from actors.adapters import ProviderAdapter
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.wire import Raw, WireServer

WAIT = 10.0


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _ask(adapter: ProviderAdapter[Any], deltas: list[Any] | None = None) -> Any:
    on_delta = None if deltas is None else deltas.append
    try:
        return adapter.respond(ModelRequest([Message.user("hi")], [add], on_delta=on_delta))
    finally:
        adapter.close()


def _chat(server: WireServer, *, stream: bool = False) -> OpenAIChatModel:
    return OpenAIChatModel(
        "wire-model", base_url=server.base_url, api_key="k", max_retries=0, stream=stream
    )


def _chat_answer(message: dict[str, Any] | None, finish: str = "tool_calls") -> Raw:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if message is not None:
        choice["message"] = message
    return Raw(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "wire-model",
            "choices": [choice],
        }
    )


def _chunk(choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "wire-model",
        "choices": [{"index": 0, **choice}],
    }


def _stream(*choices: dict[str, Any]) -> Raw:
    return Raw(events=[*(_chunk(c) for c in choices), "data: [DONE]\n\n"])


def _call(arguments: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "add", "arguments": arguments}}


# -- arguments as a JSON object ---------------------------------------------------------


def test_chat_arguments_given_as_an_object(chat: WireServer) -> None:
    chat.script(
        _chat_answer({"role": "assistant", "content": None, "tool_calls": [_call({"a": 1})]})
    )

    answer = _ask(_chat(chat))

    assert answer.message.tool_calls == (ToolCall("c1", "add", {"a": 1}),)


def test_chat_streamed_arguments_given_as_an_object(chat: WireServer) -> None:
    opening = {"index": 0, **_call({"a": 1})}
    chat.script(
        _stream(
            {"delta": {"role": "assistant", "tool_calls": [opening]}, "finish_reason": None},
            {"delta": {}, "finish_reason": "tool_calls"},
        )
    )

    answer = _ask(_chat(chat, stream=True), [])

    assert answer.message.tool_calls == (ToolCall("c1", "add", {"a": 1}),)


def test_chat_arguments_that_are_json_but_no_object_are_refused_to_the_model(
    chat: WireServer,
) -> None:
    chat.script(_chat_answer({"role": "assistant", "content": None, "tool_calls": [_call([1])]}))

    answer = _ask(_chat(chat))

    assert answer.message.tool_calls == (ToolCall("c1", "add", {INVALID_ARGUMENTS: "[1]"}),)


def _responses_answer(output: list[dict[str, Any]]) -> Raw:
    return Raw(
        body={
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
    )


def _responses(server: WireServer) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("wire-model", base_url=server.base_url, api_key="k", max_retries=0)


def test_responses_arguments_given_as_an_object(responses: WireServer) -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "add"}
    responses.script(_responses_answer([{**item, "arguments": {"a": 1}}]))

    answer = _ask(_responses(responses))

    assert answer.message.tool_calls == (ToolCall("c1", "add", {"a": 1}),)


# -- Chat Completions: chunks without a delta, content as parts, a choice without message -


@pytest.mark.parametrize("delta", [{"delta": None}, {}], ids=["null", "absent"])
def test_a_chunk_without_a_delta_is_skipped_but_its_finish_counts(
    chat: WireServer, delta: dict[str, Any]
) -> None:
    chat.script(
        _stream(
            {"delta": {"role": "assistant", "content": "hel"}, "finish_reason": None},
            {**delta, "finish_reason": None, "content_filter_results": {}},
            {"delta": {"content": "lo"}, "finish_reason": None},
            {**delta, "finish_reason": "stop"},
        )
    )
    deltas: list[Any] = []

    answer = _ask(_chat(chat, stream=True), deltas)

    assert answer.message == Message.assistant("hello")
    assert answer.stop_reason == "stop"
    assert deltas == [TextDelta("hel"), TextDelta("lo")]


PARTS = [
    {"type": "thinking", "thinking": [{"type": "text", "text": "let me see"}]},
    {"type": "text", "text": "hel"},
    {"type": "text", "text": "lo"},
]


def test_chat_content_given_as_parts(chat: WireServer) -> None:
    chat.script(_chat_answer({"role": "assistant", "content": PARTS}, "stop"))

    answer = _ask(_chat(chat))

    assert answer.message == Message.assistant("hello")


def test_chat_streamed_content_given_as_parts(chat: WireServer) -> None:
    chat.script(
        _stream(
            {"delta": {"role": "assistant", "content": PARTS[:2]}, "finish_reason": None},
            {"delta": {"content": PARTS[2:]}, "finish_reason": "stop"},
        )
    )
    deltas: list[Any] = []

    answer = _ask(_chat(chat, stream=True), deltas)

    assert answer.message == Message.assistant("hello")
    assert deltas == [TextDelta("hel"), TextDelta("lo")]


def test_a_choice_without_a_message_is_a_provider_error(chat: WireServer) -> None:
    chat.script(_chat_answer(None, "stop"))

    with pytest.raises(ProviderError, match=r"openai:wire-model answered a choice without"):
        _ask(_chat(chat))


# -- tool calls without an id -----------------------------------------------------------


def test_a_responses_call_without_a_call_id_gets_one(responses: WireServer) -> None:
    item = {"type": "function_call", "id": "fc_1", "name": "add", "arguments": '{"a": 1}'}
    responses.script(_responses_answer([item, {**item, "id": "fc_2"}]))

    answer = _ask(_responses(responses))

    assert [c.id for c in answer.message.tool_calls] == ["call_0", "call_1"]


def _anthropic_answer(content: list[dict[str, Any]]) -> Raw:
    return Raw(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "wire-model",
            "content": content,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def test_an_anthropic_call_without_an_id_gets_one(anthropic: WireServer) -> None:
    block = {"type": "tool_use", "name": "add", "input": {"a": 1}}
    anthropic.script(_anthropic_answer([{"type": "text", "text": "sure"}, block, block]))
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)

    answer = _ask(model)

    assert [c.id for c in answer.message.tool_calls] == ["call_0", "call_1"]


def test_a_session_runs_the_tools_such_a_server_calls(anthropic: WireServer) -> None:
    block = {"type": "tool_use", "name": "add", "input": {"a": 1}}
    anthropic.script(_anthropic_answer([block]))  # then the server echoes: "echo: ..."
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add]))
    try:
        ref.proxy().send("go").get(timeout=WAIT)
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()
    sent = anthropic.requests[-1].body["messages"][-1]["content"]
    assert sent == [{"type": "tool_result", "tool_use_id": "call_0", "content": "2"}]


def test_responses_streamed_arguments_given_as_an_object(responses: WireServer) -> None:
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "add",
        "arguments": {"a": 1},
        "status": "completed",
    }
    done = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "wire-model",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    responses.script(
        Raw(
            events=[
                {"type": "response.output_item.added", "output_index": 0, "item": item},
                {"type": "response.output_item.done", "output_index": 0, "item": item},
                {"type": "response.completed", "response": done},
            ]
        )
    )
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="k", max_retries=0, stream=True
    )

    answer = _ask(model, [])

    assert answer.message.tool_calls == (ToolCall("c1", "add", {"a": 1}),)


# -- token counts and stop reasons of odd types --------------------------------------------

ODD_COUNTS = [
    (3.0, 3),
    ("4", 4),
    (-1, 0),
    (None, 0),
    ("many", 0),
    ("²", 0),
    (2.5, 2),
    (float("nan"), 0),
    (2**70, 2**63 - 1),
]


def _chat_text_answer(usage: dict[str, Any], finish: Any = "stop") -> Raw:
    body = _chat_answer({"role": "assistant", "content": "hi"}, finish).body
    assert body is not None
    return Raw(body={**body, "usage": usage})


@pytest.mark.parametrize(("sent", "read"), ODD_COUNTS, ids=repr)
def test_chat_token_counts_of_odd_types_are_read_as_counts(
    chat: WireServer, sent: Any, read: int
) -> None:
    chat.script(_chat_text_answer({"prompt_tokens": sent, "completion_tokens": 1}))

    answer = _ask(_chat(chat))

    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (read, 1)


@pytest.mark.parametrize(("sent", "read"), ODD_COUNTS, ids=repr)
def test_responses_token_counts_of_odd_types_are_read_as_counts(
    responses: WireServer, sent: Any, read: int
) -> None:
    message = {
        "type": "message",
        "id": "m",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "hi", "annotations": []}],
    }
    raw = _responses_answer([message])
    assert raw.body is not None
    usage = {"input_tokens": sent, "output_tokens": 1, "output_tokens_details": None}
    responses.script(Raw(body={**raw.body, "usage": usage}))

    answer = _ask(_responses(responses))

    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (read, 1)


@pytest.mark.parametrize(("sent", "read"), ODD_COUNTS, ids=repr)
def test_anthropic_token_counts_of_odd_types_are_read_as_counts(
    anthropic: WireServer, sent: Any, read: int
) -> None:
    raw = _anthropic_answer([{"type": "text", "text": "hi"}])
    assert raw.body is not None
    anthropic.script(Raw(body={**raw.body, "usage": {"input_tokens": sent, "output_tokens": 1}}))
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)

    answer = _ask(model)

    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (read, 1)


def test_a_stop_reason_that_is_no_text_is_read_as_none(chat: WireServer) -> None:
    chat.script(_chat_text_answer({"prompt_tokens": 1, "completion_tokens": 1}, finish=3))
    model = _chat(chat)
    ref = AgentSession.start(AgentTemplate(model=model))
    try:
        assert ref.proxy().send("go").get(timeout=WAIT).content == "hi"
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()


# -- message content of odd shapes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "text"),
    [(None, None), ("hello", "hello"), ([{"type": "output_text", "text": "hello"}], "hello")],
    ids=["null", "text", "parts"],
)
def test_a_responses_message_with_content_of_odd_shape(
    responses: WireServer, content: Any, text: str | None
) -> None:
    message = {"type": "message", "id": "m", "role": "assistant", "content": content}
    responses.script(_responses_answer([message]))

    answer = _ask(_responses(responses))

    assert answer.message == Message.assistant(text)
    assert answer.stop_reason == "stop"


def test_an_anthropic_text_block_without_text(anthropic: WireServer) -> None:
    raw = _anthropic_answer([{"type": "text", "text": None}, {"type": "text", "text": "hi"}])
    anthropic.script(raw)
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)

    answer = _ask(model)

    assert answer.message == Message.assistant("hi")


def test_an_anthropic_streamed_text_delta_without_text(anthropic: WireServer) -> None:
    def event(kind: str, **data: Any) -> dict[str, Any]:
        return {"type": kind, **data}

    def text(value: str | None) -> dict[str, Any]:
        return event("content_block_delta", index=0, delta={"type": "text_delta", "text": value})

    usage = {"input_tokens": 3, "output_tokens": 1}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "wire-model"}
    started: dict[str, Any] = {**message, "content": [], "stop_reason": None, "usage": usage}
    anthropic.script(
        Raw(
            events=[
                event("message_start", message=started),
                text("hi"),
                text(None),
                event("message_delta", delta={"stop_reason": "end_turn"}, usage=usage),
                event("message_stop"),
            ]
        )
    )
    model = AnthropicModel(
        "wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0, stream=True
    )
    deltas: list[Any] = []

    answer = _ask(model, deltas)

    assert answer.message == Message.assistant("hi")
    assert deltas == [TextDelta("hi")]


def test_a_responses_streamed_text_delta_without_text(responses: WireServer) -> None:
    def text(value: str | None) -> dict[str, Any]:
        return {
            "type": "response.output_text.delta",
            "item_id": "m",
            "output_index": 0,
            "content_index": 0,
            "delta": value,
        }

    raw = _responses_answer([])
    assert raw.body is not None
    completed = {"type": "response.completed", "response": raw.body}
    responses.script(Raw(events=[text("hi"), text(None), completed]))
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="k", max_retries=0, stream=True
    )
    deltas: list[Any] = []

    answer = _ask(model, deltas)

    assert answer.message == Message.assistant("hi")
    assert deltas == [TextDelta("hi")]
