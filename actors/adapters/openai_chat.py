"""``OpenAIChatModel``: the OpenAI Chat Completions API, and every server that speaks it.

Needs ``sessionvisor[openai]`` (the official ``openai`` SDK). Through
``base_url`` it serves any OpenAI-compatible server: vLLM, Ollama, LM Studio,
a LiteLLM proxy, Azure OpenAI's ``/openai/v1`` endpoint.

Mapping, both ways:

- ``system``/``user`` messages as they are; an ``assistant`` message's text (``""``
  for an empty answer: the API takes ``null`` only beside tool calls) and its tool
  calls as ``tool_calls`` (``id``, ``function.name``, ``function.arguments``
  as JSON text); a ``tool`` message as ``role: tool`` with its ``tool_call_id``;
- a tool-call id longer than the API takes (40 characters: a Responses item id
  ``fc_...`` another library passed on, another provider's, one the session lengthened to
  ``<id>_2``) goes shortened, in its call and its ``tool_call_id`` alike: its first 31
  characters, ``_`` and 8 hex digits of its SHA-256, so distinct ids stay distinct and
  an id is the same in every request (``_2``, ... if another call has it already); a
  call's name the API refuses (it takes ``^[a-zA-Z0-9_-]{1,64}$``; ``functions.add``: a
  tool the model made up, which the session answered "unknown tool") goes cleaned alike.
  Only the request changes: the session's history keeps the original. Sent as they
  were, they failed every later request of the session (HTTP 400; see
  ``actors.adapters._mapping.Spelling``);
- a ``@tool`` as ``{"type": "function", "function": {name, description, parameters}}``;
- usage: ``prompt_tokens`` (cached: ``prompt_tokens_details.cached_tokens``),
  ``completion_tokens`` (reasoning: ``completion_tokens_details.reasoning_tokens``);
- ``finish_reason`` as the stop reason (``function_call`` reads as ``tool_calls``); a
  refusal is the answer's text, with the stop reason ``content_filter``.

Streaming asks for usage in the last chunk (``stream_options.include_usage``), unless
``options`` set ``stream_options`` (``None`` leaves it out, for servers that refuse it:
Mistral's API, Databricks, older Azure API versions). It
takes what OpenAI-compatible servers send besides: chunks without ``choices``
(usage or filter results alone), chunks whose choice has no ``index`` or a wrong
one (one choice is asked for, unless ``options`` set ``n``), tool-call deltas
without an ``index`` (a new call id then opens the next call), and later deltas
of a call that repeat its id and name as empty strings (read as absent). A whole
answer's tool call counts when it has a ``function``, whatever its ``type`` (some
servers leave it out, or send null). A tool call without an id (or with ``""``), streamed
or not, gets ``call_<index>``. Arguments sent as a JSON object instead of its text (some
proxies) are taken as they are, streamed or not; a chunk whose choice has no ``delta``
(Azure's content-filter chunks) counts for its ``finish_reason`` alone; ``content`` given
as a list of parts (Mistral's reasoning models: ``thinking`` and ``text`` chunks) is its
``text`` parts joined. A choice without a ``message`` is a ``ProviderError``, and so is a
tool call without a function name (absent, null or ``""``), streamed or not: no tool can
run it, and sent back with the history it failed every later request of the session.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import openai

from actors.adapters._mapping import (
    Spelling,
    arguments_json,
    arguments_text,
    normalized_stop,
    sendable_ids,
    sendable_name,
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

__all__ = ["OpenAIChatModel", "chat_messages", "chat_tools", "chat_usage"]

_STOP = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


_CALL_IDS = Spelling(re.compile(r".{1,40}", re.DOTALL), None, 40, "call")
"""The tool-call ids the API takes: 1 to 40 characters, any."""


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Chat Completions ``messages``; tool-call ids and names the API
    refuses go cleaned (see the module docstring)."""
    ids = sendable_ids(messages, _CALL_IDS)
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": ids.get(call_id, call_id),
                    "content": message.content or "",
                }
            )
        elif message.role == "assistant":
            # Text may be null only beside tool calls: an empty answer (a filtered one, or
            # a provider's empty reply) goes as "", or every later request is refused.
            content = message.content if message.tool_calls else message.content or ""
            item: dict[str, Any] = {"role": "assistant", "content": content}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": ids.get(call.id, call.id),
                        "type": "function",
                        "function": {
                            "name": sendable_name(call.name),
                            "arguments": arguments_json(call),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(item)
        else:
            out.append({"role": message.role, "content": message.content or ""})
    return out


def chat_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """``@tool`` schemas as Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def chat_usage(usage: Any) -> Usage:
    """A ``CompletionUsage`` (or ``None``) as ``Usage``."""
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Usage(
        token_count(getattr(usage, "prompt_tokens", None)),
        token_count(getattr(usage, "completion_tokens", None)),
        token_count(getattr(prompt, "cached_tokens", None)),
        token_count(getattr(completion, "reasoning_tokens", None)),
    )


class OpenAIChatModel(OpenAIAdapter):
    """A model served by the Chat Completions API (``POST /chat/completions``).

    Thread-safe (see ``ProviderAdapter``). Picklable as configuration: in a
    worker process it builds its own client on first use.

    Args:
        model_id: The model's name on the server.
        **settings: ``AdapterSettings``: ``base_url``, ``api_key``,
            ``max_retries``, ``timeout``, ``stream``, ``default_headers``,
            ``end_user`` (sent as ``safety_identifier``), ``max_tokens`` (sent as
            ``max_completion_tokens``), ``options`` (``stream_options``: ``None`` sends
            none, for a server that refuses them; by default usage is asked for).
    """

    provider = "openai"

    def _arguments(self, request: ModelRequest) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": self.model_id,
            "messages": chat_messages(request.messages),
        }
        if request.tools:
            arguments["tools"] = chat_tools(request.tools)
        if self.settings.max_tokens is not None:
            arguments["max_completion_tokens"] = self.settings.max_tokens
        end_user = self.end_user(request)
        if end_user is not None:
            arguments["safety_identifier"] = end_user
        arguments.update(self.settings.options)
        return arguments

    def _once(self, client: openai.OpenAI, request: ModelRequest) -> ModelResponse:
        create: Any = client.chat.completions.create
        arguments = self._arguments(request)
        arguments.pop("stream_options", None)  # options' (for streams): refused without one
        completion = create(**arguments)
        if not completion.choices:
            raise ProviderError(f"{self.model_string} answered without a choice")
        choice = completion.choices[0]
        answer = getattr(choice, "message", None)
        if answer is None:
            raise ProviderError(
                f"{self.model_string} answered a choice without a message: not a Chat "
                "Completions answer (check base_url)"
            )
        # A call with a ``function``, whatever its ``type`` says: vLLM, Ollama and Mistral
        # models on Azure may leave ``"type": "function"`` out, or send null, and such
        # calls were dropped (the turn ended with an empty answer). A ``custom`` call has none.
        # A call with no id (or ``""``: a server's) gets ``call_<index>``, as a streamed one
        # does: ``None`` failed every turn that called a tool (an id must be a str), and
        # ``""`` on every call gave the provider results it could not tell apart.
        # A call without a name is a ``ProviderError`` (see ``tool_name``).
        calls = tuple(
            _call_of(call, function, index, self.model_string)
            for index, call in enumerate(answer.tool_calls or ())
            if (function := getattr(call, "function", None)) is not None
        )
        content = _content_text(answer.content)
        text = content if content is not None else answer.refusal
        stop = normalized_stop(choice.finish_reason, _STOP)
        if answer.refusal and stop == "stop":
            stop = "content_filter"
        return ModelResponse(
            Message.assistant(text, calls), chat_usage(completion.usage), stop_reason=stop
        )

    def _stream(self, client: openai.OpenAI, request: ModelRequest) -> ModelResponse:
        create: Any = client.chat.completions.create
        arguments = self._arguments(request)
        arguments["stream"] = True
        # Usage in the last chunk, unless ``options`` say otherwise: ``None`` leaves
        # stream_options out, for servers that refuse it (Mistral's API, Databricks).
        if "stream_options" not in arguments:
            arguments["stream_options"] = {"include_usage": True}
        elif arguments["stream_options"] is None:
            del arguments["stream_options"]
        finish: str | None = None
        refused = False
        usage: Any = None
        calls = _CallIndexes()
        # One choice unless the options ask for more (``n``): then only the first is read.
        # Of one, every chunk is read whatever its index says: some servers leave it out,
        # or count it up chunk by chunk, and their whole answer was skipped.
        several = self.settings.options.get("n", 1) not in (1, None)
        with create(**arguments) as chunks:
            for chunk in chunks:
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices or ():  # None: a chunk of usage or filter results
                    if several and choice.index not in (0, None):
                        continue
                    # None (or none at all): Azure's content-filter chunks; the finish counts.
                    delta = getattr(choice, "delta", None)
                    if delta is not None:
                        refused = _take_delta(delta, request, calls) or refused
                    if choice.finish_reason is not None:
                        finish = choice.finish_reason
        if finish is None:
            raise ProviderError(
                f"the stream of {self.model_string} ended before the model finished "
                "(no finish_reason): the connection closed early"
            )
        message = streamed_answer(request, self.model_string)
        stop = normalized_stop(finish, _STOP)
        if refused and stop == "stop":
            stop = "content_filter"
        return ModelResponse(message, chat_usage(usage), stop_reason=stop)


def _call_of(call: Any, function: Any, index: int, model_string: str) -> ToolCall:
    """A whole answer's tool ``call`` (at ``index``, its ``function`` given) as a
    ``ToolCall``: ``call_<index>`` without an id; ``ProviderError`` without a name."""
    call_id = getattr(call, "id", None) or f"call_{index}"
    name = tool_name(getattr(function, "name", None), index, call_id, model_string)
    return ToolCall(call_id, name, parse_tool_arguments(function.arguments))


def _content_text(content: object) -> str | None:
    """A message's (or a delta's) ``content`` as text: a ``str`` as it is; a list of parts
    (Mistral's reasoning models send ``thinking`` and ``text`` chunks) as its ``text``
    parts joined, ``None`` when it has none; anything else as ``None``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return "".join(texts) if texts else None


def _take_delta(delta: Any, request: ModelRequest, calls: _CallIndexes) -> bool:
    """Emit what one chunk's ``delta`` holds; whether it held a refusal."""
    text = _content_text(delta.content) or delta.refusal
    if text:
        request.emit(TextDelta(text))
    for call in delta.tool_calls or ():
        # An empty id or name is none: some servers (DashScope, DeepSeek)
        # repeat both as "" on every later delta of a call.
        function = call.function
        call_id = call.id or None
        request.emit(
            ToolCallDelta(
                calls.index(call.index, call_id),
                call_id,
                None if function is None else function.name or None,
                "" if function is None else arguments_text(function.arguments),
            )
        )
    return bool(delta.refusal)


class _CallIndexes:
    """The index of each streamed tool-call delta in the message. Used on one thread.

    OpenAI numbers a stream's calls (``index``) and gives each call's id on its first
    delta. Some OpenAI-compatible servers leave the index out, or give every call
    index 0. So a delta with an id the stream has not had opens a call of its own
    (at the index it names, unless a call took that one already), and a delta without
    an id continues the call last opened at its index (the last one, without an
    index): parallel calls stay apart instead of being glued into one call with
    broken arguments.
    """

    __slots__ = ("_given", "_ids", "_last")

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # call id -> its index in the message
        self._given: dict[int, int] = {}  # the server's index -> the call last opened there
        self._last = -1

    def index(self, given: int | None, call_id: str | None) -> int:
        """The delta's index in the message (see the class docstring)."""
        if call_id is not None and call_id not in self._ids:
            taken = self._ids.values()
            if given is not None and given not in taken:
                self._last = given
            else:
                self._last = max(taken, default=-1) + 1
            self._ids[call_id] = self._last
            if given is not None:
                self._given[given] = self._last
        elif call_id is not None:
            self._last = self._ids[call_id]
        elif given is not None:
            self._last = self._given.get(given, given)
        else:
            self._last = max(self._last, 0)
        return self._last
