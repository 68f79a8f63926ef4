"""Conversation pieces every provider mapping needs alike. Pure functions, thread-safe."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from actors.errors import ProviderError
from actors.messages import Message, ToolCall
from actors.request import ModelRequest
from actors.streaming import INVALID_ARGUMENTS

__all__ = [
    "arguments_json",
    "arguments_text",
    "normalized_stop",
    "split_system",
    "streamed_answer",
    "token_count",
    "tool_name",
]

_NAMELESS = (
    "{model} answered a tool call without a tool name ({which}): no tool can run it, and no "
    "provider takes it back in a later request"
)
"""Why a turn fails when the model's answer holds a call without a name."""


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


def tool_name(name: object, index: int, call_id: str, model_string: str) -> str:
    """The tool name a provider gave the call at ``index`` of its whole answer.

    Raises:
        ProviderError: the name is absent, null, ``""`` or no text (some compatible
            servers'). Unlike the odd output the adapters read as what it holds, such a call
            has lost what it is: no tool can run it, and sent back with the history (as
            every later request does) the provider refuses it, HTTP 400 on every turn.
            Failing the turn rolls it back; the session goes on. A stream's call without a
            name fails alike (``streamed_answer``).
    """
    if isinstance(name, str) and name:
        return name
    which = f"tool call #{index}, id {call_id!r}"
    raise ProviderError(_NAMELESS.format(model=model_string, which=which))


def streamed_answer(request: ModelRequest, model_string: str) -> Message:
    """The assistant message a stream's deltas made (an empty one when none came).

    Raises:
        ProviderError: a streamed tool call never got a name (see ``tool_name``); the
            ``StreamAssembler``'s ``ValueError`` says which, and is the cause.
    """
    if not request.streamed:
        return Message.assistant(None)
    try:
        return request.streamed_message()
    except ValueError as exc:  # the only one a stream that emitted makes: a nameless call
        raise ProviderError(_NAMELESS.format(model=model_string, which=exc)) from exc
