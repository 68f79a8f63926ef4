"""Streamed model output: the deltas a model emits while it runs, and their assembly.

A model that streams calls ``request.emit(delta)`` (see ``actors.request``) for
each piece as the provider sends it: ``TextDelta`` for answer text,
``ToolCallDelta`` for a tool call's id, name and a fragment of its JSON
arguments. The session publishes each one at once as a ``delta`` event and
assembles them (``StreamAssembler``) into the assistant ``Message`` the model
then returns with ``request.streamed_message()``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from actors.messages import Message, ToolCall

__all__ = [
    "INVALID_ARGUMENTS",
    "Delta",
    "StreamAssembler",
    "TextDelta",
    "ToolCallDelta",
    "parse_tool_arguments",
]

INVALID_ARGUMENTS = "__invalid_json__"
"""The one key of a tool call's arguments when the model's JSON could not be read as an
object; its value is the raw text. The session does not run such a call: the model gets
an error naming the problem instead (see ``actors._storable``)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer's text, in order. Immutable and thread-safe."""

    text: str

    def event_data(self) -> dict[str, Any]:
        """The data of its ``delta`` event: ``{"kind": "text", "text": ...}``."""
        return {"kind": "text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of one tool call. Immutable and thread-safe.

    Attributes:
        index: The call's position in the message (0 for the first call); the
            deltas of parallel calls may interleave.
        id: The call's id, on the delta that opens it (``None`` on later ones).
        name: The tool's name, likewise.
        arguments: The next fragment of the call's JSON arguments (may be empty).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def event_data(self) -> dict[str, Any]:
        """The data of its ``delta`` event: ``{"kind": "tool_call", "index", "id", "name",
        "arguments"}``."""
        return {
            "kind": "tool_call",
            "index": self.index,
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
        }


Delta = TextDelta | ToolCallDelta
"""What a streaming model emits."""


def parse_tool_arguments(raw: object) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict: ``{}`` for empty text, and
    ``{INVALID_ARGUMENTS: raw}`` for text that is not a JSON object (the session then
    tells the model instead of running the tool). Pure, thread-safe.

    Arguments already read (a dict, which some servers and proxies send in place of the
    JSON text) are taken as they are; any other JSON value (a list, a number) is no
    object, and is kept as its JSON text under ``INVALID_ARGUMENTS``."""
    if isinstance(raw, dict):
        return dict(raw)
    if raw is not None and not isinstance(raw, str):
        return {INVALID_ARGUMENTS: json.dumps(raw, ensure_ascii=False, default=str)}
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {INVALID_ARGUMENTS: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS: raw}


class _Call:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class StreamAssembler:
    """Builds the assistant ``Message`` that a stream of deltas makes.

    Not thread-safe: it belongs to one model call, fed from the thread that
    streams it.
    """

    __slots__ = ("_calls", "_text")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}

    def add(self, delta: Delta) -> None:
        """Take the next delta."""
        if isinstance(delta, TextDelta):
            self._text.append(delta.text)
            return
        call = self._calls.get(delta.index)
        if call is None:
            call = self._calls[delta.index] = _Call()
        if not call.id:  # an empty id or name is none (a server's later deltas may repeat "")
            call.id = delta.id or None
        if not call.name:
            call.name = delta.name or None
        if delta.arguments:
            call.arguments.append(delta.arguments)

    def message(self) -> Message:
        """The message so far: the text joined (``None`` if there was none) and the tool calls
        in index order, their arguments parsed (``parse_tool_arguments``).

        Raises:
            ValueError: a tool call never got its name; the provider's stream is malformed.
        """
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise ValueError(
                    f"tool call #{index} of the stream never got a name; the provider's "
                    "stream is malformed"
                )
            arguments = parse_tool_arguments("".join(call.arguments))
            calls.append(ToolCall(call.id or f"call_{index}", call.name, arguments))
        text = "".join(self._text) if self._text else None
        return Message.assistant(text, tuple(calls))


for _cls in (TextDelta, ToolCallDelta, StreamAssembler):
    _cls.__module__ = "actors"
