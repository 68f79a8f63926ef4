"""Anthropic tool calls whose input comes in other shapes than Anthropic's, found by a bug
hunt.

* Anthropic opens a streamed ``tool_use`` block with ``input: {}`` and sends the arguments
  as ``input_json_delta`` pieces. Some Anthropic-compatible servers (Ollama's, proxies
  that turn another API's whole calls into Messages events) put the complete input in
  ``content_block_start`` and send no delta: the adapter dropped it, and the tool ran
  with no arguments at all. The start's input now counts when no delta follows; deltas,
  when they come, remain the arguments.
* A proxy may pass a call's input on as JSON text instead of an object: it read as ``{}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import INVALID_ARGUMENTS, Message, ModelRequest, ToolCall
from actors.adapters.anthropic_messages import AnthropicModel
from tests.providers.wire import ANTHROPIC, Raw, WireServer


@pytest.fixture
def anthropic_server() -> Iterator[WireServer]:
    with WireServer(ANTHROPIC) as server:
        yield server


def _events(blocks: list[tuple[dict[str, Any], list[str]]]) -> Raw:
    """A Messages stream of ``tool_use`` blocks, each with its input_json_delta pieces."""
    usage = {"input_tokens": 5, "output_tokens": 1}
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "wire-model",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[dict[str, Any] | str] = [{"type": "message_start", "message": message}]
    for index, (block, pieces) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in pieces
        ]
        events.append({"type": "content_block_stop", "index": index})
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
        {"type": "message_stop"},
    ]
    return Raw(events=events)


def test_a_tool_use_start_holding_the_whole_input_is_the_calls_arguments(
    anthropic_server: WireServer,
) -> None:
    whole = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}
    streamed = {"type": "tool_use", "id": "toolu_2", "name": "mul", "input": {}}
    # A server that sends both: the deltas are the arguments, not the start's copy of them.
    both = {"type": "tool_use", "id": "toolu_3", "name": "neg", "input": {"x": 3}}
    anthropic_server.script(
        _events([(whole, []), (streamed, ['{"c": ', "4}"]), (both, ['{"x": 3}'])])
    )
    model = AnthropicModel(
        "wire-model",
        base_url=anthropic_server.base_url,
        api_key="sk-wire",
        max_retries=0,
        stream=True,
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("toolu_1", "add", {"a": 1, "b": 2}),
        ToolCall("toolu_2", "mul", {"c": 4}),
        ToolCall("toolu_3", "neg", {"x": 3}),
    )
    assert answer.stop_reason == "tool_calls"


def test_a_whole_answers_tool_input_sent_as_json_text_is_read(
    anthropic_server: WireServer,
) -> None:
    # A proxy that converts an OpenAI-compatible answer may pass the call's arguments on
    # as JSON text instead of an object: the call ran with no arguments at all. Text that
    # is no JSON object is refused to the model (INVALID_ARGUMENTS), as from any adapter.
    content = [
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": '{"a": 1}'},
        {"type": "tool_use", "id": "toolu_2", "name": "mul", "input": "{broken"},
    ]
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "wire-model",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 7},
    }
    anthropic_server.script(Raw(body=body))
    model = AnthropicModel(
        "wire-model", base_url=anthropic_server.base_url, api_key="sk-wire", max_retries=0
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("toolu_1", "add", {"a": 1}),
        ToolCall("toolu_2", "mul", {INVALID_ARGUMENTS: "{broken"}),
    )
