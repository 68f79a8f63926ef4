"""Builders of realistic session states for the snapshot and checkpoint-store tests."""

from __future__ import annotations

from typing import Any

from actors import Message, ToolCall, Usage

__all__ = ["session_state"]


def session_state(turns: int = 3, *, session_id: str = "sess-1", pad: int = 0) -> dict[str, Any]:
    """A state in the shape ``AgentSession.state()`` returns, with one tool call per turn.

    Args:
        turns: Number of user/assistant exchanges.
        session_id: The session id stored inside the state.
        pad: Extra characters in every message, to make snapshots bigger.
    """
    messages: list[dict[str, Any]] = [Message.system("You are terse.").to_dict()]
    usage = Usage()
    for turn in range(turns):
        call = ToolCall(f"call-{turn}", "lookup", {"query": f"item {turn}", "limit": turn % 5})
        messages.append(Message.user(f"question {turn} " + "q" * pad).to_dict())
        messages.append(Message.assistant(None, (call,)).to_dict())
        messages.append(Message.tool(call, f"result {turn} " + "r" * pad).to_dict())
        messages.append(Message.assistant(f"answer {turn} " + "a" * pad).to_dict())
        usage = usage + Usage(input_tokens=10 + turn, output_tokens=5 + turn)
    return {
        "session_id": session_id,
        "messages": messages,
        "usage": usage.to_dict(),
        "metadata": {"tenant": "acme"},
        "model": "registry:default:echo:echo-1",
        "instructions": "You are terse.",
        "plugins": {"memory": {"facts": ["sky is blue"], "version": 2}},
        "provider_state": {"cursor": turns},
        "turns": turns,
    }
