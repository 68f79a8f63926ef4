"""What each provider must receive for a conversation: written out by hand, per provider,
from the providers' API references (not from the adapters' code), so a test compares the
adapters' mapping with an independent one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from actors import Message, ToolCall

__all__ = ["CONVERSATION", "expected_conversation"]

CONVERSATION = (
    Message.system("Be brief."),
    Message.user("What is 1+2 and 3+4?"),
    Message.assistant(
        None, (ToolCall("c1", "add", {"a": 1, "b": 2}), ToolCall("c2", "add", {"a": 3, "b": 4}))
    ),
    Message("tool", "3", tool_call_id="c1", name="add"),
    Message("tool", "7", tool_call_id="c2", name="add"),
    Message.user("steer: hurry"),
    Message.assistant("3 and 7"),
    Message.user("thanks"),
)
"""A conversation with every shape: system, parallel tool calls, their results, a
steering message right after the results, an answer, and the next user text."""


def _chat(messages: Sequence[Message]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": m.content, "tool_calls": calls})
        else:
            out.append({"role": m.role, "content": m.content})
    return {"messages": out}


def _responses(messages: Sequence[Message]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content}
            )
        elif m.tool_calls:
            items += [
                {
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": json.dumps(c.arguments),
                }
                for c in m.tool_calls
            ]
        else:
            items.append({"role": m.role, "content": m.content})
    system = [m.content for m in messages if m.role == "system"]
    return {"instructions": system[0], "input": items} if system else {"input": items}


def _anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            ]
            role = "user"
        elif m.role == "assistant":
            block = [{"type": "text", "text": m.content}] if m.content else []
            block += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            ]
            role = "assistant"
        else:
            block = [{"type": "text", "text": m.content}]
            role = "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"] += block
        else:
            out.append({"role": role, "content": block})
    for message in out:  # the short form: one text block is sent as its text
        if len(message["content"]) == 1 and message["content"][0]["type"] == "text":
            message["content"] = message["content"][0]["text"]
    system = [m.content for m in messages if m.role == "system"]
    return {"system": system[0], "messages": out} if system else {"messages": out}


def expected_conversation(flavour_name: str, messages: Sequence[Message]) -> dict[str, Any]:
    """The request fields that carry ``messages`` for the adapter named ``flavour_name``."""
    build = {"chat": _chat, "responses": _responses, "anthropic": _anthropic}[flavour_name]
    return build(messages)
