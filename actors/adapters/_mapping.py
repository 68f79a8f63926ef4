"""Conversation pieces every provider mapping needs alike. Pure functions, thread-safe."""

from __future__ import annotations

import json
from collections.abc import Sequence

from actors.messages import Message, ToolCall
from actors.streaming import INVALID_ARGUMENTS

__all__ = ["arguments_json", "normalized_stop", "split_system"]


def arguments_json(call: ToolCall) -> str:
    """A call's arguments as the JSON text providers take back: what the model wrote, when
    it was not a JSON object (``INVALID_ARGUMENTS``)."""
    raw = call.arguments.get(INVALID_ARGUMENTS)
    if isinstance(raw, str) and len(call.arguments) == 1:
        return raw
    return json.dumps(call.arguments, ensure_ascii=False)


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The system messages' text (joined by blank lines; ``None`` without any) and the rest,
    in order: for APIs that take the instructions apart from the conversation."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    rest = [m for m in messages if m.role != "system"]
    return ("\n\n".join(system) if system else None), rest


def normalized_stop(raw: str | None, table: dict[str, str]) -> str | None:
    """``raw`` in the words of ``ModelResponse.stop_reason`` (``table``), or as it came."""
    if raw is None:
        return None
    return table.get(raw, raw)
