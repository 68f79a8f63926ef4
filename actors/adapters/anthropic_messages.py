"""``AnthropicModel``: the Anthropic Messages API.

Needs ``sessionvisor[anthropic]`` (the official ``anthropic`` SDK).

Mapping, both ways:

- system messages as ``system``; the conversation as alternating ``user`` and
  ``assistant`` messages of content blocks: an assistant's text as a ``text``
  block and each tool call as a ``tool_use`` block (``id``, ``name``,
  ``input``); ``tool`` messages as ``tool_result`` blocks (``tool_use_id``) of
  the next user message, which also takes any user text that follows them; a
  message of one text block goes as its text; text that is empty or only whitespace
  goes as none (the API refuses such a block), except the user's last: a request whose
  user turn would hold nothing raises ``UnsendableRequest`` before it is sent (left out,
  the model would continue its own last answer as a prefill);
- a tool-call id the API refuses (it takes ``^[a-zA-Z0-9_-]+$`` only; ids another
  provider gave, such as ``call.1`` or ``fc:abc``, in a history resumed on an Anthropic
  model) goes cleaned, in its ``tool_use`` and its ``tool_result`` alike: each character
  the API refuses as ``_``, then ``_`` and 8 hex digits of the id's SHA-256, so distinct
  ids stay distinct and an id is the same in every request (``_2``, ... if another call
  has it already); a call's name the API refuses (``functions.add``: a tool the model
  made up, which the session answered "unknown tool") goes cleaned alike, within 64
  characters. Only the request changes: the session's history keeps the original. Sent
  as they were, they failed every later request of the session (HTTP 400; see
  ``actors.adapters._mapping.Spelling``);
- a ``@tool`` as ``{name, description, input_schema}``;
- usage: input tokens are ``input_tokens`` plus the cache's
  (``cache_read_input_tokens``, ``cache_creation_input_tokens``), cached input
  the cache reads; output tokens ``output_tokens`` (reasoning:
  ``output_tokens_details.thinking_tokens``);
- stop reason: ``end_turn`` and ``stop_sequence`` read as ``stop``, ``tool_use``
  as ``tool_calls``, ``max_tokens`` as ``length``, ``refusal`` as
  ``content_filter``.

Extended thinking (``options={"thinking": {...}}``): the API wants an answer's
thinking blocks back, unchanged, when it answered with tool calls (else the
request that carries the tool results fails with HTTP 400). The adapter keeps
them in the provider state (``{"thinking": [blocks], "before": <first call id>}``)
and puts them back first in that assistant message: the conversation's last that called
tools, whose first call has that id or one the session made of it (``<id>_2``, ...: the
history had the id already, see ``actors._call_ids``); thinking of earlier answers is not
sent (the API ignores it).

A streamed ``tool_use`` block's arguments are its ``input_json_delta`` pieces, or, when
none comes (some Anthropic-compatible servers), the ``input`` its start held. An
``input`` given as JSON text (a proxy's) is read as the other adapters read arguments.
A ``tool_use`` block without an id (a compatible server's) gets ``call_<index>``, streamed
or not; one without a ``name`` (absent, null or ``""``) is a ``ProviderError``, streamed or
not (see ``actors.adapters._mapping.tool_name``).

``max_tokens`` is required by the API: 4096 unless the settings say otherwise.
A stream cut off halfway raises ``anthropic.APIConnectionError``, and one that
stalls past ``timeout`` ``anthropic.APITimeoutError``, as the same failures do
outside a stream.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import anthropic
import httpx2

from actors.adapters._base import ProviderAdapter, api_key, merged_headers
from actors.adapters._mapping import (
    Spelling,
    normalized_stop,
    sendable_ids,
    sendable_name,
    split_system,
    streamed_answer,
    token_count,
    tool_name,
)
from actors.errors import ProviderError, UnsendableRequest
from actors.messages import Message, ToolCall, Usage
from actors.model import ModelResponse
from actors.request import Credentials, ModelRequest
from actors.streaming import INVALID_ARGUMENTS, TextDelta, ToolCallDelta, parse_tool_arguments
from actors.tools import Tool

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicModel", "anthropic_messages", "anthropic_tools"]

DEFAULT_MAX_TOKENS = 4096
"""The output limit sent when the settings give none (the API requires one)."""

_THINKING = ("thinking", "redacted_thinking")
"""The content blocks of extended thinking, which go back to the API with tool results."""

_CALL_IDS = Spelling(re.compile(r"[a-zA-Z0-9_-]+"), re.compile(r"[^a-zA-Z0-9_-]"), None, "call")
"""The tool-call ids the API takes: its ``^[a-zA-Z0-9_-]+$`` (ASCII only, any length)."""

_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _has_text(content: str | None) -> bool:
    """Whether ``content`` goes as a text block: the API refuses one that is empty or only
    whitespace (HTTP 400), which Claude itself may answer (``"\\n\\n"``, before tool calls
    too); sent back, it failed every later request of the session."""
    return bool(content and not content.isspace())


def _tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's ``input``: what the model wrote, as a string, when it was not JSON."""
    if INVALID_ARGUMENTS in call.arguments and len(call.arguments) == 1:
        return {INVALID_ARGUMENTS: call.arguments[INVALID_ARGUMENTS]}
    return dict(call.arguments)


def _blocks(
    message: Message,
    thinking: Sequence[Mapping[str, Any]] = (),
    ids: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``message`` as content blocks, ``thinking`` first (the blocks of the answer it is, see
    ``_thinking_with``); ``ids``: the id to send for a tool-call id the API refuses
    (``sendable_ids``). A call's name the API refuses goes cleaned (``sendable_name``)."""
    ids = ids or {}
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        return [
            {
                "type": "tool_result",
                "tool_use_id": ids.get(call_id, call_id),
                "content": message.content or "",
            }
        ]
    blocks: list[dict[str, Any]] = []
    blocks.extend(dict(block) for block in thinking)
    if _has_text(message.content):
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {
            "type": "tool_use",
            "id": ids.get(call.id, call.id),
            "name": sendable_name(call.name),
            "input": _tool_input(call),
        }
        for call in message.tool_calls
    )
    return blocks


def anthropic_messages(
    messages: Sequence[Message], provider_state: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Conversation messages (no system ones) as Messages API ``messages``: consecutive
    messages of one side (tool results and the user text after them) share one message,
    and a message that is one text block is sent as its text (the API's short form,
    which the SDK also prepares faster). The thinking blocks ``provider_state`` holds
    go first in the assistant message they came with (see the module docstring).

    Runs at every model call over the whole conversation, so the usual message (text
    alone, on the other side than the one before) becomes its short form directly,
    with no block list built and taken apart again.
    """
    thinking = _thinking_of(provider_state)
    thinker = _thinking_with(messages, thinking)
    ids = sendable_ids(messages, _CALL_IDS)
    out: list[dict[str, Any]] = []
    last_role = None
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        if role != last_role and message.role != "tool" and not message.tool_calls:
            if _has_text(message.content):  # one text block: its short form
                out.append({"role": role, "content": message.content})
                last_role = role
            continue
        blocks = _blocks(message, thinking[1] if thinking and message is thinker else (), ids)
        if not blocks:
            continue
        if role == last_role:  # joins the message before it
            before = out[-1]
            content = before["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            before["content"] = [*content, *blocks]
        else:
            out.append({"role": role, "content": blocks})
            last_role = role
    return out


_Thinking = tuple[str, Sequence[Mapping[str, Any]]] | None
"""The first tool call id of an answer and its thinking blocks, or ``None``."""


def _thinking_of(state: Mapping[str, Any] | None) -> _Thinking:
    """The thinking blocks a provider state keeps, with the call id they go before."""
    if not state:
        return None
    before, blocks = state.get("before"), state.get("thinking")
    if not isinstance(before, str) or not isinstance(blocks, list):
        return None
    return before, [b for b in blocks if isinstance(b, Mapping)]


def _thinking_with(messages: Sequence[Message], thinking: _Thinking) -> Message | None:
    """The message ``thinking``'s blocks go with: the last assistant message that called
    tools (a provider state holds the thinking of the latest answer only, and only when it
    called tools), if its first call has the id kept with them, or one the session made of
    it (``<id>_<n>``: an id the history had already, see ``actors._call_ids``; a server
    without ids gives ``call_0`` on every answer). ``None`` when that message is another
    answer's (a plugin rewrote it): the blocks go nowhere, as the thinking of earlier
    answers does."""
    if thinking is None:
        return None
    kept = thinking[0]
    for message in reversed(messages):
        if message.role == "assistant" and message.tool_calls:
            first = message.tool_calls[0].id
            number = first.removeprefix(f"{kept}_")
            renamed = number != first and number.isascii() and number.isdigit()
            return message if first == kept or renamed else None
    return None


def _state_after(
    request: ModelRequest, calls: Sequence[ToolCall], thinking: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The provider state an answer leaves: its thinking blocks when it called tools (the
    API wants them back with the results); ``{}`` to forget older ones; ``None`` when
    there is nothing to keep or forget (the usual case: no thinking)."""
    if calls and thinking:
        return {"thinking": thinking, "before": calls[0].id}
    return {} if _thinking_of(request.provider_state) is not None else None


def _input_of(value: object) -> dict[str, Any]:
    """A ``tool_use`` block's ``input`` as a call's arguments: an object as it is; JSON text
    (what a proxy converting another API's answer may pass on) read as the other adapters
    read arguments (``parse_tool_arguments``: no JSON object is refused to the model);
    anything else as none. The text read as ``{}`` and the tool ran with no arguments."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str):
        return parse_tool_arguments(value)
    return {}


def anthropic_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """``@tool`` schemas as Messages API tools."""
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in tools
    ]


def _usage(usage: Any, output: Any = None) -> Usage:
    """The Messages API's usage as ``Usage``; ``output``, a stream's last ``message_delta``
    usage, overrides the counts it has."""
    counts = {
        name: token_count(getattr(usage, name, None))
        for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    }
    out_tokens = token_count(getattr(usage, "output_tokens", None))
    details = getattr(usage, "output_tokens_details", None)
    if output is not None:
        counts.update(
            {
                name: token_count(getattr(output, name))
                for name in counts
                if getattr(output, name, None)
            }
        )
        out_tokens = token_count(getattr(output, "output_tokens", None)) or out_tokens
        details = getattr(output, "output_tokens_details", None) or details
    return Usage(
        min(sum(counts.values()), 2**63 - 1),
        out_tokens,
        counts["cache_read_input_tokens"],
        token_count(getattr(details, "thinking_tokens", None)),
    )


def _check_asks(
    conversation: Sequence[Message], mapped: Sequence[Mapping[str, Any]], model_string: str
) -> None:
    """Raise ``UnsendableRequest`` if ``conversation`` ends with the user's turn but ``mapped``
    (its Messages API form) holds none: the user's text was empty or only whitespace, which
    the API refuses and the mapping leaves out. Sent anyway, the request ended with the
    model's own last answer, which the API continues as a prefill instead of answering it
    (or held no message at all: HTTP 400). A conversation that ends with an assistant
    message (a prefill a plugin chose) goes as it is."""
    if not conversation or conversation[-1].role == "assistant":
        return
    if mapped and mapped[-1]["role"] == "user":
        return
    raise UnsendableRequest(
        f"{model_string} cannot be sent an empty user message: the Messages API refuses "
        "text that is empty or only whitespace, and without it the request would end with "
        "the model's own last answer, which it would continue instead of answering; "
        "send some text"
    )


class AnthropicModel(ProviderAdapter[anthropic.Anthropic]):
    """A model served by the Messages API (``POST /v1/messages``).

    Thread-safe (see ``ProviderAdapter``). Picklable as configuration: in a
    worker process it builds its own client on first use.

    Args:
        model_id: The model's name.
        **settings: ``AdapterSettings``: ``base_url``, ``api_key``,
            ``max_retries``, ``timeout``, ``stream``, ``default_headers``,
            ``end_user`` (sent as ``metadata.user_id``), ``max_tokens``
            (``DEFAULT_MAX_TOKENS`` if unset), ``options``.
    """

    provider = "anthropic"

    def _new_http_client(self) -> Any:
        return anthropic.DefaultHttpxClient()

    def _new_client(self, http: Any, credentials: Credentials | None) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key=api_key(self.settings, credentials),
            default_headers=merged_headers(self.settings, credentials) or None,
            http_client=http,
            **self.sdk_options(),
        )

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        system, conversation = split_system(request.messages)
        messages = anthropic_messages(conversation, request.provider_state)
        _check_asks(conversation, messages, self.model_string)
        arguments: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": self.settings.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
        }
        if system is not None:
            arguments["system"] = system
        if request.tools:
            arguments["tools"] = anthropic_tools(request.tools)
        end_user = self.end_user(request)
        if end_user is not None:
            arguments["metadata"] = {"user_id": end_user}
        arguments.update(self.settings.options)
        return arguments

    def _once(self, client: anthropic.Anthropic, request: ModelRequest) -> ModelResponse:
        create: Any = client.messages.create
        answer = create(**self._arguments(request))
        if answer.content is None:  # a proxy's error body sent with HTTP 200, say
            raise ProviderError(
                f"{self.model_string} answered without content: not a Messages API answer "
                "(check base_url)"
            )
        texts: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[dict[str, Any]] = []
        for block in answer.content:
            if block.type == "text":
                if isinstance(block.text, str):  # a compatible server's null: no text
                    texts.append(block.text)
            elif block.type == "tool_use":
                # No id (a compatible server's): ``call_<index>``, as a streamed call gets.
                call_id = getattr(block, "id", None) or f"call_{len(calls)}"
                name = getattr(block, "name", None)
                name = tool_name(name, len(calls), call_id, self.model_string)
                calls.append(ToolCall(call_id, name, _input_of(block.input)))
            elif block.type in _THINKING:
                thinking.append(block.model_dump(mode="json", exclude_none=True))
        return ModelResponse(
            Message.assistant("".join(texts) if texts else None, tuple(calls)),
            _usage(answer.usage),
            _state_after(request, calls, thinking),
            normalized_stop(answer.stop_reason, _STOP),
        )

    def _stream(self, client: anthropic.Anthropic, request: ModelRequest) -> ModelResponse:
        create: Any = client.messages.create
        arguments = self._arguments(request)
        arguments["stream"] = True
        read = _StreamRead(request)
        with create(**arguments) as events:
            try:
                for event in events:
                    read.take(event)
            except httpx2.TimeoutException as exc:  # the SDK's types, as outside a stream
                raise anthropic.APITimeoutError(request=events.response.request) from exc
            except httpx2.TransportError as exc:
                raise anthropic.APIConnectionError(request=events.response.request) from exc
        if not read.finished:
            raise ProviderError(
                f"the stream of {self.model_string} ended before message_stop: the "
                "connection closed early"
            )
        message = streamed_answer(request, self.model_string)
        return ModelResponse(
            message,
            _usage(read.started, read.last),
            _state_after(request, message.tool_calls, read.thinking),
            normalized_stop(read.stop, _STOP),
        )


class _StreamRead:
    """What one Messages stream said so far; emits its deltas. Used on one thread.

    A ``tool_use`` block's arguments are its ``input_json_delta`` pieces. Anthropic opens
    the block with ``input: {}``; some compatible servers (Ollama's, proxies converting
    another API's whole calls) put the whole input there and send no piece. That input
    is emitted as the call's arguments when its block ends without a piece (``inputs``):
    dropped, the tool ran with no arguments at all.
    """

    __slots__ = (
        "calls",
        "finished",
        "inputs",
        "last",
        "request",
        "started",
        "stop",
        "thinking",
        "thoughts",
    )

    def __init__(self, request: ModelRequest) -> None:
        self.request = request
        self.calls: dict[int, int] = {}  # content block index -> the call's index
        self.inputs: dict[int, str] = {}  # content block index -> its start's input, as JSON
        self.thoughts: dict[int, dict[str, Any]] = {}  # content block index -> thinking block
        self.thinking: list[dict[str, Any]] = []  # the thinking blocks, in order
        self.started: Any = None  # message_start's usage
        self.last: Any = None  # the last message_delta's usage
        self.stop: str | None = None
        self.finished = False

    def take(self, event: Any) -> None:
        """Act on one stream event."""
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                if isinstance(delta.text, str):  # a compatible server's null: no text
                    self.request.emit(TextDelta(delta.text))
            elif delta.type == "input_json_delta" and event.index in self.calls:
                index = self.calls[event.index]
                self.inputs.pop(event.index, None)  # the pieces are the arguments
                self.request.emit(ToolCallDelta(index, arguments=delta.partial_json))
            elif delta.type == "thinking_delta" and event.index in self.thoughts:
                self.thoughts[event.index]["thinking"] += delta.thinking
            elif delta.type == "signature_delta" and event.index in self.thoughts:
                self.thoughts[event.index]["signature"] += delta.signature
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            index = self.calls[event.index] = len(self.calls)
            if isinstance(block.input, str) and block.input.strip():
                self.inputs[event.index] = block.input  # JSON text (see ``_input_of``)
            elif isinstance(block.input, dict) and block.input:
                self.inputs[event.index] = json.dumps(block.input, ensure_ascii=False)
            self.request.emit(ToolCallDelta(index, block.id, block.name))
        elif kind == "content_block_stop":
            self._whole_input(event.index)
        elif kind == "content_block_start" and event.content_block.type in _THINKING:
            block = event.content_block.model_dump(mode="json", exclude_none=True)
            if block["type"] == "thinking":
                block.setdefault("thinking", "")
                block.setdefault("signature", "")
                self.thoughts[event.index] = block
            self.thinking.append(block)
        elif kind == "message_start":
            self.started = event.message.usage
        elif kind == "message_delta":
            self.last = event.usage
            self.stop = event.delta.stop_reason or self.stop
        elif kind == "message_stop":
            for block_index in list(self.inputs):  # a block whose stop never came
                self._whole_input(block_index)
            self.finished = True

    def _whole_input(self, block_index: int) -> None:
        """Emit the input a ``tool_use`` block's start held, if no piece of it came since."""
        arguments = self.inputs.pop(block_index, None)
        if arguments is not None:
            self.request.emit(ToolCallDelta(self.calls[block_index], arguments=arguments))
