"""Chat Completions tool calls as OpenAI-compatible servers send them, found by a bug hunt.

* OpenAI sends a streamed tool call's ``id`` and ``function.name`` on its first delta only.
  Some servers (Alibaba DashScope, DeepSeek) repeat both as empty strings on every later
  delta of the call. The adapter took ``""`` for a new call's id: the arguments went to a
  second call that never got a name, and the turn failed with "tool call #1 of the stream
  never got a name". An empty id or name now reads as absent.
* A whole answer's tool call without ``"type": "function"`` (or with ``null``), as vLLM,
  Ollama and Mistral models on Azure may send, was dropped: the turn ended with an empty
  answer instead of calling the tool.
* A stream's chunks whose choice has no ``index``, or one that counts up chunk by chunk
  (some gateways and local servers), were skipped as another choice's: the turn failed
  with "the connection closed early". Without ``n`` in the options there is one choice.
* A stream always asked for ``stream_options``, whatever ``options`` said: a server that
  refuses it (Mistral's API answers 422, Databricks 400) could not be streamed from.
  ``options={"stream_options": None}`` now leaves it out, and a dict of one's own is sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors import Delta, Message, ModelRequest, ToolCall, ToolCallDelta
from actors.adapters.openai_chat import OpenAIChatModel
from tests.providers.wire import Raw, WireServer


def _chunk(delta: dict[str, Any], finish: str | None = None, **choice: Any) -> str:
    data = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "wire-model",
        "choices": [{"index": 0, **choice, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n"


def _without_index(delta: dict[str, Any], finish: str | None = None) -> str:
    data = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "wire-model",
        "choices": [{"delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n"


def _call(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    call = {"index": index, "id": call_id, "type": "function", "function": function}
    return {"tool_calls": [call]}


def test_empty_ids_and_names_on_later_deltas_continue_their_call(chat: WireServer) -> None:
    chat.script(
        Raw(
            events=[
                _chunk({"role": "assistant", "content": None, **_call(0, "call_a", "add", "")}),
                _chunk(_call(0, "", "", '{"a": ')),
                _chunk(_call(0, "", "", "1}")),
                _chunk(_call(1, "call_b", "mul", "")),
                _chunk(_call(1, "", "", '{"b": 2}')),
                _chunk({}, "tool_calls"),
                "data: [DONE]\n\n",
            ]
        )
    )
    model = OpenAIChatModel(
        "wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0, stream=True
    )
    deltas: list[Delta] = []
    try:
        answer = model.respond(ModelRequest([Message.user("hi")], on_delta=deltas.append))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("call_a", "add", {"a": 1}),
        ToolCall("call_b", "mul", {"b": 2}),
    )
    assert answer.stop_reason == "tool_calls"
    # The deltas say what OpenAI's would: the id and name on a call's first delta only.
    assert deltas == [
        ToolCallDelta(0, "call_a", "add", ""),
        ToolCallDelta(0, None, None, '{"a": '),
        ToolCallDelta(0, None, None, "1}"),
        ToolCallDelta(1, "call_b", "mul", ""),
        ToolCallDelta(1, None, None, '{"b": 2}'),
    ]


@pytest.mark.parametrize("shape", [{}, {"type": None}], ids=["no-type", "null-type"])
def test_whole_tool_calls_without_their_type_are_called(
    chat: WireServer, shape: dict[str, Any]
) -> None:
    # vLLM, Ollama and Mistral models on Azure may leave "type": "function" out of a
    # tool call, or send it as null: the adapter dropped such calls, and the turn ended
    # with an empty answer instead of calling the tool.
    calls = [
        {"id": "c1", **shape, "function": {"name": "add", "arguments": '{"a": 1}'}},
        {"id": "c2", **shape, "function": {"name": "mul", "arguments": '{"b": 2}'}},
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "wire-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }
    chat.script(Raw(body=body))
    model = OpenAIChatModel("wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0)
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("c1", "add", {"a": 1}),
        ToolCall("c2", "mul", {"b": 2}),
    )


@pytest.mark.parametrize("numbering", ["no-index", "counting-up"])
def test_a_streamed_answer_of_one_choice_reads_whatever_its_index(
    chat: WireServer, numbering: str
) -> None:
    pieces: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": "Hel"}, None),
        ({"content": "lo"}, None),
        ({}, "stop"),
    ]
    if numbering == "no-index":
        events = [_without_index(delta, finish) for delta, finish in pieces]
    else:
        events = [_chunk(delta, finish, index=n) for n, (delta, finish) in enumerate(pieces)]
    chat.script(Raw(events=[*events, "data: [DONE]\n\n"]))
    model = OpenAIChatModel(
        "wire-model", base_url=chat.base_url, api_key="sk-wire", max_retries=0, stream=True
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message == Message.assistant("Hello")
    assert answer.stop_reason == "stop"


def test_with_several_choices_asked_for_only_the_first_is_read(chat: WireServer) -> None:
    events = [
        _chunk({"role": "assistant", "content": "one"}),
        _chunk({"role": "assistant", "content": "two"}, index=1),
        _chunk({}, "stop"),
        _chunk({}, "stop", index=1),
        "data: [DONE]\n\n",
    ]
    chat.script(Raw(events=events))
    model = OpenAIChatModel(
        "wire-model",
        base_url=chat.base_url,
        api_key="sk-wire",
        max_retries=0,
        stream=True,
        options={"n": 2},
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message == Message.assistant("one")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_options_can_leave_stream_options_out(chat: WireServer, stream: bool) -> None:
    # Mistral's API (422), Databricks and older Azure API versions refuse the
    # stream_options the adapter always sent; options could not take it out.
    chat.script(_text_reply(stream))
    model = OpenAIChatModel(
        "wire-model",
        base_url=chat.base_url,
        api_key="sk-wire",
        max_retries=0,
        stream=stream,
        options={"stream_options": None},
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message == Message.assistant("Hello")
    assert "stream_options" not in chat.requests[-1].body


def test_options_set_their_own_stream_options(chat: WireServer) -> None:
    chat.script(_text_reply(True))
    options = {"stream_options": {"include_usage": True, "include_obfuscation": False}}
    model = OpenAIChatModel(
        "wire-model",
        base_url=chat.base_url,
        api_key="sk-wire",
        max_retries=0,
        stream=True,
        options=options,
    )
    try:
        model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert chat.requests[-1].body["stream_options"] == options["stream_options"]


def _text_reply(stream: bool) -> Raw:
    """The answer "Hello", streamed or whole."""
    if stream:
        return Raw(
            events=[
                _chunk({"role": "assistant", "content": "Hel"}),
                _chunk({"content": "lo"}),
                _chunk({}, "stop"),
                "data: [DONE]\n\n",
            ]
        )
    message = {"role": "assistant", "content": "Hello"}
    return Raw(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "wire-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )
