"""``OpenAIResponsesModel``: the OpenAI Responses API, continuing on the server's state.

Needs ``sessionvisor[openai]``. Each answer's id is kept in the session's
``provider_state`` as ``previous_response_id``, with ``covers``: how many
messages of the conversation (system messages aside) the server holds under
that id, and ``ends``: a digest of the first of them and of the answer. The
next request then sends ``previous_response_id`` and only the messages after
those (tool results, the next user text); since the state is in every
checkpoint, this holds after a resume too. When the conversation no longer
matches (a turn rolled back; a plugin that rewrote the prompt, such as one that
drops old messages or puts retrieved context first), the whole conversation is
sent without an id: else the server would answer from what it held, without
the rewrite.

Mapping, both ways:

- system messages as ``instructions`` (sent every time: the API does not carry
  them over a ``previous_response_id``);
- ``user`` and ``assistant`` text as input messages; an assistant's tool calls
  as ``function_call`` items (``call_id``, ``name``, ``arguments``); a ``tool``
  message as a ``function_call_output`` item;
- a ``call_id`` longer than the API takes (64 characters: another provider's or
  library's) goes shortened when the whole conversation is sent, in its ``function_call``
  and its ``function_call_output`` alike: its first 55 characters, ``_`` and 8 hex digits
  of its SHA-256, so distinct ids stay distinct and an id is the same in every request
  (``_2``, ... if another call has it already). Continuing from a
  ``previous_response_id``, the results answer calls the server holds under the ids it
  gave: those go as they are. A call's name the API refuses (it takes
  ``^[a-zA-Z0-9_-]{1,64}$``; ``functions.add``: a tool the model made up, which the
  session answered "unknown tool") goes cleaned alike. Only the request changes: the
  session's history keeps the original. Sent as they were, they failed every later
  request of the session (HTTP 400; see ``actors.adapters._mapping.Spelling``);
- a ``@tool`` as ``{"type": "function", name, description, parameters}``;
- usage: ``input_tokens`` (cached: ``input_tokens_details.cached_tokens``),
  ``output_tokens`` (reasoning: ``output_tokens_details.reasoning_tokens``);
- a refusal (``refusal`` content, streamed as ``response.refusal.delta``) as the
  answer's text, as the Chat Completions adapter does, so the model's reason reaches
  the caller instead of an empty answer;
- stop reason: ``tool_calls`` when it called tools, ``content_filter`` when it
  refused, else ``stop``; an incomplete response's reason (``max_output_tokens``
  reads as ``length``).

A streamed function call's arguments are its ``function_call_arguments.delta``
pieces or, when none comes (some compatible servers), the whole arguments an event
of its item carries (``output_item.added``, ``function_call_arguments.done``,
``output_item.done``), taken once. Arguments sent as a JSON object instead of its text
(some compatible servers) are taken as they are, streamed or not; a function call
without a ``call_id`` gets ``call_<index>``, streamed or not; a ``message`` item whose
``content`` is the text itself (or null) is read as that text (or none). A function
call without a ``name`` (absent, null or ``""``) is a ``ProviderError``, streamed or not
(see ``actors.adapters._mapping.tool_name``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import openai

from actors.adapters._mapping import (
    Spelling,
    arguments_json,
    arguments_text,
    normalized_stop,
    sendable_ids,
    sendable_name,
    split_system,
    streamed_answer,
    token_count,
    tool_name,
)
from actors.adapters._openai_base import OpenAIAdapter
from actors.errors import ProviderError
from actors.messages import Message, ToolCall, Usage
from actors.model import ModelResponse
from actors.request import ModelRequest
from actors.streaming import TextDelta, ToolCallDelta, parse_tool_arguments
from actors.tools import Tool

__all__ = [
    "OpenAIResponsesModel",
    "ends_digest",
    "responses_input",
    "responses_tools",
    "responses_usage",
    "unsent",
]

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


_CALL_IDS = Spelling(re.compile(r".{1,64}", re.DOTALL), None, 64, "call")
"""The ``call_id`` values the API takes: 1 to 64 characters, any."""


def responses_input(messages: Sequence[Message], continuing: bool = False) -> list[dict[str, Any]]:
    """Conversation messages (no system ones) as Responses ``input`` items; call ids and
    names the API refuses go cleaned (see the module docstring). ``continuing``: the
    messages follow a response the server holds (``previous_response_id``), so the results
    among them answer calls under the ids the server gave, which go as they are."""
    ids = {} if continuing else sendable_ids(messages, _CALL_IDS)
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": ids.get(call_id, call_id),
                    "output": message.content or "",
                }
            )
            continue
        if message.content or message.role != "assistant":
            items.append({"role": message.role, "content": message.content or ""})
        items.extend(
            {
                "type": "function_call",
                "call_id": ids.get(call.id, call.id),
                "name": sendable_name(call.name),
                "arguments": arguments_json(call),
            }
            for call in message.tool_calls
        )
    return items


def responses_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """``@tool`` schemas as Responses function tools."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": dict(t.parameters),
            "strict": False,
        }
        for t in tools
    ]


def responses_usage(usage: Any) -> Usage:
    """A ``ResponseUsage`` (or ``None``) as ``Usage``."""
    if usage is None:
        return Usage()
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None)
    reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None)
    return Usage(
        token_count(getattr(usage, "input_tokens", None)),
        token_count(getattr(usage, "output_tokens", None)),
        token_count(cached),
        token_count(reasoning),
    )


def unsent(
    conversation: Sequence[Message], state: Mapping[str, Any] | None
) -> tuple[str | None, Sequence[Message]]:
    """The ``previous_response_id`` to continue from and the messages the server lacks, or
    ``(None, conversation)`` when ``state`` does not match the conversation: its
    ``covers`` messages do not end with an answer, or (``ends``, absent from states
    written before it) their first message or the answer differ from those the server
    holds."""
    if not state:
        return None, conversation
    previous, covers = state.get("previous_response_id"), state.get("covers")
    if (
        not isinstance(previous, str)
        or not isinstance(covers, int)
        or not 0 < covers <= len(conversation)
        or conversation[covers - 1].role != "assistant"
    ):
        return None, conversation
    ends = state.get("ends")
    if ends is not None and ends != ends_digest(conversation[0], conversation[covers - 1]):
        return None, conversation
    return previous, conversation[covers:]


def ends_digest(first: Message, answer: Message) -> str:
    """A digest of the first message a response covers and of its answer (``ends`` in the
    provider state): a rewrite of the prompt's start, or of the answer, changes it. Two
    messages, not all: it is computed at every call of a conversation that may be long."""
    digest = hashlib.sha256()
    for message in (first, answer):
        calls = [[c.id, c.name, c.arguments] for c in message.tool_calls]
        shown = [message.role, message.content, message.tool_call_id, calls]
        digest.update(json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def _message_of(response: Any, model_string: str) -> Message:
    """The assistant message of a whole ``Response``: its text and refusals, its calls.

    Raises:
        ProviderError: the answer has no ``output`` (a proxy's error body sent with
            HTTP 200, say), so it is no Responses API answer.
    """
    if response.output is None:
        raise ProviderError(
            f"{model_string} answered without an output list: not a Responses API answer "
            "(check base_url)"
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            texts.extend(_texts_of(item))
        elif item.type == "function_call":
            # No call_id (a compatible server's): ``call_<index>``, as a streamed call gets.
            call_id = getattr(item, "call_id", None) or f"call_{len(calls)}"
            name = tool_name(getattr(item, "name", None), len(calls), call_id, model_string)
            calls.append(ToolCall(call_id, name, parse_tool_arguments(item.arguments)))
    return Message.assistant("".join(texts) if texts else None, tuple(calls))


def _texts_of(item: Any) -> list[str]:
    """The texts and refusals of a ``message`` output item, in order. Its ``content`` is a
    list of parts; some compatible servers send the text itself, or null (no text)."""
    content = getattr(item, "content", None)
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content or ():
        kind = getattr(part, "type", None)
        text = getattr(part, "text" if kind == "output_text" else "refusal", None)
        if kind in ("output_text", "refusal") and isinstance(text, str):
            texts.append(text)
    return texts


def _refused(response: Any) -> bool:
    """Whether a finished ``Response`` holds a refusal."""
    return any(
        getattr(part, "type", None) == "refusal"
        for item in response.output or ()
        if item.type == "message" and not isinstance(getattr(item, "content", None), str)
        for part in getattr(item, "content", None) or ()
    )


class OpenAIResponsesModel(OpenAIAdapter):
    """A model served by the Responses API (``POST /responses``), continuing with
    ``previous_response_id`` (see the module docstring).

    Thread-safe (see ``ProviderAdapter``). Picklable as configuration: in a
    worker process it builds its own client on first use.

    Args:
        model_id: The model's name.
        **settings: ``AdapterSettings``: ``base_url``, ``api_key``,
            ``max_retries``, ``timeout``, ``stream``, ``default_headers``,
            ``end_user`` (sent as ``safety_identifier``), ``max_tokens`` (sent as
            ``max_output_tokens``), ``options``.
    """

    provider = "openai-responses"

    def _arguments(self, request: ModelRequest) -> tuple[dict[str, Any], Sequence[Message]]:
        """The create call's arguments, and the conversation (without system messages)."""
        instructions, conversation = split_system(request.messages)
        previous, new = unsent(conversation, request.provider_state)
        items = responses_input(new, continuing=previous is not None)
        arguments: dict[str, Any] = {"model": self.model_id, "input": items}
        if previous is not None:
            arguments["previous_response_id"] = previous
        if instructions is not None:
            arguments["instructions"] = instructions
        if request.tools:
            arguments["tools"] = responses_tools(request.tools)
        if self.settings.max_tokens is not None:
            arguments["max_output_tokens"] = self.settings.max_tokens
        end_user = self.end_user(request)
        if end_user is not None:
            arguments["safety_identifier"] = end_user
        arguments.update(self.settings.options)
        return arguments, conversation

    def _answer(
        self, response: Any, message: Message, conversation: Sequence[Message]
    ) -> ModelResponse:
        """The ``ModelResponse`` of a finished ``Response`` whose message is ``message``, the
        answer to ``conversation``."""
        if response.status == "failed":
            error = response.error
            detail = f"{error.code}: {error.message}" if error is not None else "no detail"
            raise ProviderError(f"{self.model_string} failed the response ({detail})")
        stop = "tool_calls" if message.tool_calls else "stop"
        if _refused(response):
            stop = "content_filter"
        if response.status == "incomplete":
            details = response.incomplete_details
            stop = normalized_stop(getattr(details, "reason", None), _INCOMPLETE) or "incomplete"
        first = conversation[0] if conversation else message
        state = {
            "previous_response_id": response.id,
            "covers": len(conversation) + 1,
            "ends": ends_digest(first, message),
        }
        return ModelResponse(message, responses_usage(response.usage), state, stop)

    def _once(self, client: openai.OpenAI, request: ModelRequest) -> ModelResponse:
        create: Any = client.responses.create
        arguments, conversation = self._arguments(request)
        response = create(**arguments)
        return self._answer(response, _message_of(response, self.model_string), conversation)

    def _stream(self, client: openai.OpenAI, request: ModelRequest) -> ModelResponse:
        create: Any = client.responses.create
        arguments, conversation = self._arguments(request)
        arguments["stream"] = True
        calls = _StreamedCalls(request)
        final: Any = None
        with create(**arguments) as events:
            for event in events:
                kind = event.type
                if kind in ("response.output_text.delta", "response.refusal.delta"):
                    if isinstance(event.delta, str):  # a compatible server's null: no text
                        request.emit(TextDelta(event.delta))
                elif kind == "response.function_call_arguments.delta":
                    calls.piece(event.output_index, event.delta)
                elif kind == "response.output_item.added" and event.item.type == "function_call":
                    item = event.item
                    calls.opened(event.output_index, item.call_id, item.name, item.arguments)
                elif kind == "response.function_call_arguments.done":
                    calls.whole(event.output_index, event.arguments)
                elif kind == "response.output_item.done" and event.item.type == "function_call":
                    calls.whole(event.output_index, event.item.arguments)
                elif kind in ("response.completed", "response.incomplete", "response.failed"):
                    final = event.response
                elif kind == "error":
                    raise ProviderError(
                        f"{self.model_string} streamed an error ({event.code}: {event.message})"
                    )
        calls.finish()
        if final is None:
            raise ProviderError(
                f"the stream of {self.model_string} ended before the response was complete: "
                "the connection closed early"
            )
        if request.streamed:
            message = streamed_answer(request, self.model_string)
        else:
            message = _message_of(final, self.model_string)
        return self._answer(final, message, conversation)


class _StreamedCalls:
    """Emits the deltas of a stream's function calls, each call's arguments once. Used on
    one thread.

    A call's arguments are its ``function_call_arguments.delta`` pieces (OpenAI opens the
    item with empty ``arguments``). Some compatible servers send no piece: the arguments
    come whole, in the item's ``output_item.added`` or only in its
    ``function_call_arguments.done`` or ``output_item.done``; they are emitted once, when
    the item is done (or the stream ends), unless pieces came. Ignored, the tool ran
    without its arguments; taken besides the pieces, the two copies made no JSON object.
    """

    __slots__ = ("_indexes", "_pending", "_pieces", "_request")

    def __init__(self, request: ModelRequest) -> None:
        self._request = request
        self._indexes: dict[int, int] = {}  # output index -> the call's index in the message
        self._pending: dict[int, str] = {}  # output index -> whole arguments not yet emitted
        self._pieces: set[int] = set()  # output indexes whose arguments came as pieces

    def _index(self, output_index: int) -> int:
        return self._indexes.setdefault(output_index, len(self._indexes))

    def opened(self, output_index: int, call_id: str, name: str, arguments: object) -> None:
        """An ``output_item.added`` of a function call (its arguments, if any, held back)."""
        self._request.emit(ToolCallDelta(self._index(output_index), call_id, name))
        if arguments and output_index not in self._pieces:
            self._pending[output_index] = arguments_text(arguments)

    def piece(self, output_index: int, arguments: str) -> None:
        """A ``function_call_arguments.delta``: the arguments come as pieces."""
        self._pieces.add(output_index)
        self._pending.pop(output_index, None)
        self._request.emit(ToolCallDelta(self._index(output_index), arguments=arguments))

    def whole(self, output_index: int, arguments: object) -> None:
        """The item's whole arguments (its ``.done`` events): emitted unless pieces came."""
        if output_index in self._pieces:
            return
        held = self._pending.pop(output_index, None)
        text = arguments_text(arguments) or held
        if text:
            self._pieces.add(output_index)  # emitted now: not again at the item's next .done
            self._request.emit(ToolCallDelta(self._index(output_index), arguments=text))

    def finish(self) -> None:
        """The stream ended: emit the arguments still held back (no ``.done`` came)."""
        for output_index in list(self._pending):
            self.whole(output_index, None)
