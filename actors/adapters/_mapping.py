"""Conversation pieces every provider mapping needs alike. Pure functions, thread-safe."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from actors.messages import Message, ToolCall
from actors.streaming import INVALID_ARGUMENTS

__all__ = ["arguments_json", "arguments_text", "normalized_stop", "split_system", "token_count"]


def arguments_json(call: ToolCall) -> str:
    """A call's arguments as the JSON text providers take back: what the model wrote, when
    it was not a JSON object (``INVALID_ARGUMENTS``)."""
    raw = call.arguments.get(INVALID_ARGUMENTS)
    if isinstance(raw, str) and len(call.arguments) == 1:
        return raw
    return json.dumps(call.arguments, ensure_ascii=False)


def arguments_text(raw: object) -> str:
    """A provider's tool-call arguments (or a piece of them) as the JSON text a
    ``ToolCallDelta`` carries: text as it is, ``None`` as ``""``, and a value already
    read (a dict some OpenAI-compatible servers and proxies send in place of the text) as
    its JSON; joined as text, such a value failed the stream's assembly."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return ""
    return json.dumps(raw, ensure_ascii=False, default=str)


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The system messages' text (joined by blank lines; ``None`` without any) and the rest,
    in order: for APIs that take the instructions apart from the conversation."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    rest = [m for m in messages if m.role != "system"]
    return ("\n\n".join(system) if system else None), rest


def normalized_stop(raw: object, table: dict[str, str]) -> str | None:
    """``raw`` in the words of ``ModelResponse.stop_reason`` (``table``), or as it came;
    ``None`` for what is no text (a server's number): the session refuses a stop reason
    that is not a ``str``, and the turn whose answer came failed for it."""
    if not isinstance(raw, str):
        return None
    return table.get(raw, raw)


_MAX_COUNT = 2**63 - 1
"""The largest count ``Usage`` takes."""


def token_count(value: object) -> int:
    """A token count as a provider sent it, as the ``int`` ``Usage`` takes: a float or a
    decimal text (some compatible servers' and proxies') read as the whole number it
    holds, capped at ``2**63 - 1``; ``None``, a negative number or what is no number at
    all as 0. ``Usage`` refused them, and the turn whose answer came failed for a count."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value):
        number = int(value)
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        return 0
    return min(max(number, 0), _MAX_COUNT)
