"""``anthropic_messages``: the conversation as the Messages API takes it, for every way
messages of one side follow each other (what ``test_adapters`` checks end to end, here on
the mapping alone, including the cases a session rarely produces)."""

from __future__ import annotations

from typing import Any

import pytest

from actors import Message, ToolCall
from actors.adapters.anthropic_messages import anthropic_messages

CALL = ToolCall("c1", "add", {"a": 1})
CALL_2 = ToolCall("c2", "mul", {"b": 2})


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}


def _result(call: ToolCall, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call.id, "content": content}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [Message.user("hi"), Message.assistant("hello"), Message.user("bye")],
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"},
            ],
            id="alternating-text",
        ),
        pytest.param(
            [Message.user("a"), Message.user("b"), Message.user("c")],
            [{"role": "user", "content": [_text("a"), _text("b"), _text("c")]}],
            id="consecutive-user-texts",
        ),
        pytest.param(
            [
                Message.user("sum"),
                Message.assistant("let me", (CALL, CALL_2)),
                Message.tool(CALL, "1"),
                Message.tool(CALL_2, "2"),
                Message.user("and?"),
                Message.assistant("3"),
            ],
            [
                {"role": "user", "content": "sum"},
                {"role": "assistant", "content": [_text("let me"), _use(CALL), _use(CALL_2)]},
                {
                    "role": "user",
                    "content": [_result(CALL, "1"), _result(CALL_2, "2"), _text("and?")],
                },
                {"role": "assistant", "content": "3"},
            ],
            id="tool-turn",
        ),
        pytest.param(
            [Message.user("go"), Message.assistant(None, (CALL,)), Message.tool(CALL, "ok")],
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [_use(CALL)]},
                {"role": "user", "content": [_result(CALL, "ok")]},
            ],
            id="call-without-text",
        ),
        pytest.param(
            [Message.user("x"), Message.assistant(""), Message.assistant("y"), Message.user("")],
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            id="empty-messages-dropped",
        ),
        pytest.param(
            [Message.assistant("a"), Message.assistant("b", (CALL,))],
            [{"role": "assistant", "content": [_text("a"), _text("b"), _use(CALL)]}],
            id="assistant-text-then-call",
        ),
    ],
)
def test_the_conversation_maps_to_alternating_messages(
    messages: list[Message], expected: list[dict[str, Any]]
) -> None:
    assert anthropic_messages(messages) == expected


def test_mapping_twice_gives_equal_results_and_leaves_no_shared_lists() -> None:
    messages = [Message.user("a"), Message.user("b"), Message.assistant("c", (CALL,))]
    first = anthropic_messages(messages)
    first[0]["content"].append(_text("changed"))
    assert anthropic_messages(messages) == [
        {"role": "user", "content": [_text("a"), _text("b")]},
        {"role": "assistant", "content": [_text("c"), _use(CALL)]},
    ]
