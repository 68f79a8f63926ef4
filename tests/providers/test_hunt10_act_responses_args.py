"""Streamed Responses API function calls whose arguments come whole, found by a bug hunt.

OpenAI streams a ``function_call`` item's arguments as ``function_call_arguments.delta``
events, after an ``output_item.added`` whose ``arguments`` is empty. Some compatible
servers send no delta: the arguments come only in ``function_call_arguments.done`` or in
``output_item.done``, and the adapter read them as ``{}`` (the tool ran without its
arguments). Others put them in ``output_item.added`` and stream them as deltas too, and
the two copies glued together were no JSON object (the call was refused). The whole
arguments now count when no delta came; the deltas, when they come, are the arguments.
"""

from __future__ import annotations

import json
from typing import Any

from actors import Message, ModelRequest, ToolCall
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.wire import Raw, WireServer


def _item(index: int, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": f"call_{index}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def _response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "wire-model",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 4,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 7,
        },
    }


def _stream() -> Raw:
    """Four calls: arguments only in ``.done``; only in ``output_item.done``; in
    ``output_item.added`` and as deltas; as deltas then repeated whole (OpenAI's way)."""
    whole = [
        _item(0, "add", '{"a": 1}'),
        _item(1, "mul", '{"b": 2}'),
        _item(2, "neg", '{"c": 3}'),
        _item(3, "inc", '{"d": 4}'),
    ]
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])}
    ]

    def add(index: int, arguments: str) -> None:
        opened = {**whole[index], "arguments": arguments, "status": "in_progress"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": opened})

    def delta(index: int, piece: str) -> None:
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{index}",
                "output_index": index,
                "delta": piece,
            }
        )

    def args_done(index: int) -> None:
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": f"fc_{index}",
                "output_index": index,
                "arguments": whole[index]["arguments"],
            }
        )

    def item_done(index: int) -> None:
        events.append(
            {"type": "response.output_item.done", "output_index": index, "item": whole[index]}
        )

    add(0, "")
    args_done(0)
    item_done(0)
    add(1, "")
    item_done(1)
    add(2, '{"c": 3}')
    delta(2, '{"c": ')
    delta(2, "3}")
    item_done(2)
    add(3, "")
    delta(3, '{"d": ')
    delta(3, "4}")
    args_done(3)
    item_done(3)
    events.append({"type": "response.completed", "response": _response("completed", whole)})
    return Raw(events=[f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])


def test_whole_streamed_arguments_count_once(responses: WireServer) -> None:
    responses.script(_stream())
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="sk-wire", max_retries=0, stream=True
    )
    try:
        answer = model.respond(ModelRequest([Message.user("hi")]))
    finally:
        model.close()
    assert answer.message.tool_calls == (
        ToolCall("call_0", "add", {"a": 1}),
        ToolCall("call_1", "mul", {"b": 2}),
        ToolCall("call_2", "neg", {"c": 3}),
        ToolCall("call_3", "inc", {"d": 4}),
    )
    assert answer.stop_reason == "tool_calls"
