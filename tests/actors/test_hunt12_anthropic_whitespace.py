"""Whitespace-only text goes to the Messages API as no text, found by a bug hunt.

The Anthropic API refuses a request holding a text block that is empty *or whitespace
only* (HTTP 400 "text content blocks must contain non-whitespace text"). The mapping
dropped empty text, but sent whitespace (``"\\n\\n"``, which Claude itself may answer,
alone or before its tool calls) as a text block. Once such an answer was in a session's
history, every later request of the session was refused: the session could not go on.
Now text that is only whitespace counts as none, as empty text does.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import Message, ToolCall
from actors.adapters.anthropic_messages import anthropic_messages

CALL = ToolCall("c1", "add", {"a": 1})


def _text_blocks(mapped: list[dict[str, Any]]) -> list[str]:
    """Every text the mapped conversation holds, short forms included."""
    texts = []
    for message in mapped:
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
            continue
        texts += [block["text"] for block in content if block["type"] == "text"]
    return texts


@pytest.mark.parametrize("blank", ["\n\n", " ", "\t \r\n"], ids=repr)
def test_a_whitespace_answer_is_sent_as_no_text(blank: str) -> None:
    messages = [Message.user("hi"), Message.assistant(blank), Message.user("still there?")]

    mapped = anthropic_messages(messages)

    assert mapped == [{"role": "user", "content": [_block("hi"), _block("still there?")]}]


@pytest.mark.parametrize("blank", ["\n\n", " "], ids=repr)
def test_whitespace_before_tool_calls_is_left_out(blank: str) -> None:
    messages = [Message.user("sum"), Message.assistant(blank, (CALL,)), Message.tool(CALL, "1")]

    mapped = anthropic_messages(messages)

    assert mapped[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1}}],
    }
    assert all(text.strip() for text in _text_blocks(mapped))


def test_whitespace_user_text_after_tool_results_is_left_out() -> None:
    messages = [
        Message.user("go"),
        Message.assistant(None, (CALL,)),
        Message.tool(CALL, "ok"),
        Message.user("  "),
    ]

    mapped = anthropic_messages(messages)

    assert mapped[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}],
    }


def test_text_with_words_and_whitespace_is_kept_as_it_is() -> None:
    messages = [Message.user(" hi "), Message.assistant("\nhello\n")]

    assert anthropic_messages(messages) == [
        {"role": "user", "content": " hi "},
        {"role": "assistant", "content": "\nhello\n"},
    ]


def _block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
