"""Conversation pieces every provider mapping needs alike. Pure functions, thread-safe."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from actors.errors import ProviderError
from actors.messages import Message, ToolCall
from actors.request import ModelRequest
from actors.streaming import INVALID_ARGUMENTS
from actors.tools import TOOL_NAME

__all__ = [
    "TOOL_NAMES",
    "Spelling",
    "arguments_json",
    "arguments_text",
    "normalized_stop",
    "sendable_ids",
    "sendable_name",
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


@dataclass(frozen=True, slots=True)
class Spelling:
    """What a provider takes as a tool-call id, or as a tool name, in a request; what it
    refuses goes cleaned (``cleaned``).

    A history may hold what the provider refuses: ids another provider gave (``call.1``,
    a Responses item's 53 characters), ids the session lengthened (``<id>_2``, see
    ``actors._call_ids``), names a model made up (``functions.add``). Sent as they were,
    every later request of the session failed (HTTP 400). Only the request changes: the
    session's history keeps the originals.

    Attributes:
        accepted: What the provider takes, matched whole (``fullmatch``).
        refused_character: A character it refuses, sent as ``_``; ``None`` when it takes
            any.
        max_length: The most characters it takes; ``None`` without a limit.
        empty: What an empty original is cleaned to, before its digest.
    """

    accepted: re.Pattern[str]
    refused_character: re.Pattern[str] | None
    max_length: int | None
    empty: str

    def takes(self, text: str) -> bool:
        """Whether the provider takes ``text`` as it is (one match: the usual case)."""
        return self.accepted.fullmatch(text) is not None

    def cleaned(self, text: str) -> str:
        """``text`` as the provider takes it: each character it refuses as ``_`` (``empty``
        for ``""``), cut short to leave room for ``_`` and the first 8 hex digits of
        ``text``'s SHA-256, which follow: originals that clean to the same readable part
        (``call.1``, ``call:1``, two long ids with one start) stay apart, and one original
        cleans the same in every request."""
        readable = text
        if self.refused_character is not None:
            readable = self.refused_character.sub("_", readable)
        readable = readable or self.empty
        if self.max_length is not None:
            readable = readable[: self.max_length - 9]
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return f"{readable}_{digest}"

    def numbered(self, cleaned: str, number: int) -> str:
        """``cleaned`` made distinct from an id another call has: ``_<number>`` after it,
        within ``max_length`` (the end of ``cleaned`` makes room)."""
        suffix = f"_{number}"
        if self.max_length is not None:
            cleaned = cleaned[: self.max_length - len(suffix)]
        return cleaned + suffix


TOOL_NAMES = Spelling(TOOL_NAME, re.compile(r"[^a-zA-Z0-9_-]"), 64, "tool")
"""The tool names OpenAI (Chat Completions and Responses) and Anthropic take
(``^[a-zA-Z0-9_-]{1,64}$``, the rule ``actors.tools`` holds a ``Tool``'s name to: the
template's own tools go as they are)."""


def sendable_name(name: str) -> str:
    """A tool call's ``name`` as the providers take it: as it is (the usual case: one check,
    no copy), or cleaned (``TOOL_NAMES``). A model may call a tool that does not exist by a
    name they refuse (``functions.add``, ``add numbers``); the session answers "unknown
    tool" and the call stays in the history, so every later request would carry it. Cleaned,
    it keeps a digest of the original, so it never reads as a tool that exists."""
    return name if TOOL_NAMES.takes(name) else TOOL_NAMES.cleaned(name)


def _call_ids_in(message: Message) -> list[str]:
    """The tool-call ids ``message`` sends: its calls', or the one a tool result answers."""
    if message.role == "tool":
        return [message.tool_call_id or ""]
    return [call.id for call in message.tool_calls]


def sendable_ids(messages: Sequence[Message], spelling: Spelling) -> dict[str, str]:
    """The id to send in place of each tool-call id of ``messages`` the provider refuses
    (``spelling``), in a call and in the result that answers it alike; ``{}`` when it takes
    them all (the usual case: one check per id).

    A cleaned id depends on the original alone (the same in every request, as the
    conversation grows: results keep answering their calls, the prompt cache keeps
    matching), unless another call of the conversation has it already: then it takes
    ``_2``, ``_3``, ... (the first free; see ``Spelling.numbered``)."""
    taken: set[str] = set()
    refused: dict[str, None] = {}  # in order of appearance, once each
    for message in messages:
        for call_id in _call_ids_in(message):
            if spelling.takes(call_id):
                taken.add(call_id)
            else:
                refused[call_id] = None
    sendable: dict[str, str] = {}
    for call_id in refused:
        base = fresh = spelling.cleaned(call_id)
        number = 2
        while fresh in taken:
            fresh = spelling.numbered(base, number)
            number += 1
        taken.add(fresh)
        sendable[call_id] = fresh
    return sendable
