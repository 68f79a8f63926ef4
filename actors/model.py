"""The two forms of ``Model`` and the two embedded deterministic models.

A model turns a conversation (and the tools it may call) into one assistant
message plus token usage. It has one of two methods; a session looks once,
when it starts, which one:

- ``respond(request) -> ModelResponse`` (``RespondModel``): gets a
  ``ModelRequest`` with the session's identity, its provider state and the
  tenant's credentials, and may stream (``request.emit``). The provider
  adapters (``actors.adapters``) have this form. A model with both methods is
  called through this one.
- ``generate(messages, tools) -> ModelResponse`` (``GenerateModel``): the
  prompt and tools only. ``EchoModel`` and ``ScriptedModel`` have this form;
  it stays supported.

``EchoModel`` and ``ScriptedModel`` need no network, so every example and test
runs offline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from actors.errors import ModelScriptExhausted
from actors.messages import Message, ToolCall, Usage

if TYPE_CHECKING:
    from actors.request import ModelRequest
    from actors.tools import Tool

__all__ = [
    "EchoModel",
    "GenerateModel",
    "Model",
    "ModelResponse",
    "RespondModel",
    "ScriptedModel",
    "model_string_of",
]


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """What one model call returns. Immutable and thread-safe.

    Attributes:
        message: The assistant message (text, tool calls, or both).
        usage: Tokens this call consumed.
        provider_state: Plain data the provider wants back on the next call
            (for example a server-side conversation id); ``None`` keeps the
            session's current provider state. Persisted in snapshots, and
            handed back as ``ModelRequest.provider_state``. One that is not a dict
            (a bare id) fails the turn with ``TypeError``; one a checkpoint cannot
            hold, or holding a live value (a lock, a client), with
            ``SnapshotEncodeError`` naming the path.
        stop_reason: Why the model stopped, if it says: ``stop`` (it answered),
            ``tool_calls``, ``length`` (the output limit), ``content_filter``,
            or the provider's own word for anything else. Published with the
            ``model_response`` event, not persisted. A ``str`` or ``None``: anything
            else (an SDK's enum that is not a ``str``) fails the turn with ``TypeError``;
            a ``str`` subclass (a ``StrEnum`` member) is published as a plain ``str``.
    """

    message: Message
    usage: Usage = field(default_factory=Usage)
    provider_state: dict[str, Any] | None = None
    stop_reason: str | None = None


@runtime_checkable
class GenerateModel(Protocol):
    """A model of the two-argument form: ``generate(messages, tools)``.

    ``generate`` is called on the session's actor thread, one call at a time per
    session; a model shared by several sessions must be thread-safe. An
    exception it raises fails that turn only: the caller of ``send`` gets it,
    the turn is rolled back and the session lives on.
    """

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        """Answer ``messages`` (system prompt first), optionally calling ``tools``."""
        ...


@runtime_checkable
class RespondModel(Protocol):
    """A model of the one-argument form: ``respond(request)`` (see ``ModelRequest``).

    Called as ``GenerateModel.generate`` is (the session's thread, one call at a
    time per session, thread-safe if shared; an exception fails the turn only,
    rolled back, a stream that broke off halfway included). A streaming model
    calls ``request.emit(delta)`` for each piece as it arrives and returns
    ``ModelResponse(request.streamed_message(), usage, ...)``.
    """

    def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request.messages``, optionally calling ``request.tools``."""
        ...


Model = GenerateModel | RespondModel
"""Anything that can answer a conversation: either form (``isinstance`` works with it)."""


def model_string_of(model: Model | str) -> str:
    """The model string recorded in a session's state for ``model``.

    A string is kept as is (``registry:...`` strings are re-resolved on resume);
    a model object contributes its ``model_string`` attribute, else its class name.
    """
    if isinstance(model, str):
        return model
    return str(getattr(model, "model_string", type(model).__name__))


def _count_tokens(messages: Iterable[Message]) -> int:
    """A deterministic stand-in for a tokenizer: whitespace-separated words."""
    return sum(len((m.content or "").split()) for m in messages)


def _unread(messages: Sequence[Message]) -> list[Message]:
    """Messages after the last assistant message: what an offline model newly reads.

    Offline models charge input tokens for these only, so a long conversation
    costs them constant time per call (a real provider bills the whole prompt).
    """
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return list(messages[index + 1 :])
    return list(messages)


def _answer(text: str, messages: Sequence[Message]) -> ModelResponse:
    message = Message.assistant(text)
    return ModelResponse(message, Usage(_count_tokens(_unread(messages)), _count_tokens([message])))


class EchoModel:
    """Answers with the text of the last user message; shows tools without a network.

    When the last user message is ``/<tool_name> {json arguments}`` and names a
    tool of the session, the model first calls that tool, then answers with the
    tool's result. Usage counts words: input tokens are the words of the messages
    after the last assistant message. Stateless, hence thread-safe. Its model
    string is ``echo``.
    """

    model_string = "echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        """Echo the last user message, or run the tool it names."""
        if messages and messages[-1].role == "tool":
            result = messages[-1]
            return _answer(f"{result.name} returned: {result.content}", messages)
        text = ""
        for message in reversed(messages):
            if message.role == "user":
                text = message.content or ""
                break
        call = self._tool_call(text, tools, len(messages)) if text.startswith("/") else None
        if isinstance(call, ToolCall):
            message = Message.assistant(None, (call,))
            return ModelResponse(message, Usage(_count_tokens(_unread(messages)), 1))
        return _answer(call or f"echo: {text}", messages)

    @staticmethod
    def _tool_call(text: str, tools: Sequence[Tool], position: int) -> ToolCall | str | None:
        """The call ``/name {json}`` asks for, a complaint about its arguments, or ``None``."""
        name, _, raw_args = text[1:].partition(" ")
        if name not in {t.name for t in tools}:
            return None
        try:
            arguments = json.loads(raw_args) if raw_args.strip() else {}
        except json.JSONDecodeError as exc:
            return f"echo: cannot call {name}: arguments are not valid JSON ({exc.msg})"
        if not isinstance(arguments, dict):
            return f"echo: cannot call {name}: arguments must be a JSON object"
        return ToolCall(f"call_{position}", name, arguments)


class ScriptedModel:
    """Returns the given responses in order, for tests and demos of exact dialogues.

    Each response may be a ``ModelResponse``, a ``Message``, a plain string (an
    assistant answer), or an exception instance (raised by that call, to test
    how a session handles a failing model). Thread-safe: a lock guards the
    position in the script. Picklable, so it works in worker processes too: each
    worker gets a copy of the script from the position it had when it was sent.

    Raises:
        ModelScriptExhausted: from ``generate`` once every response was used.
    """

    model_string = "scripted"

    def __init__(self, responses: Iterable[ModelResponse | Message | str | BaseException]) -> None:
        self._responses = list(responses)
        self._next = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        """Its script and position, for a worker process (the lock is made anew there)."""
        with self._lock:
            return {"responses": self._responses, "next": self._next}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._responses = list(state["responses"])
        self._next = int(state["next"])
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many responses are left."""
        with self._lock:
            return len(self._responses) - self._next

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        """Return the next scripted response."""
        with self._lock:
            if self._next >= len(self._responses):
                raise ModelScriptExhausted(len(self._responses))
            item = self._responses[self._next]
            self._next += 1
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return item
        message = Message.assistant(item) if isinstance(item, str) else item
        return ModelResponse(
            message, Usage(_count_tokens(_unread(messages)), _count_tokens([message]))
        )


for _cls in (ModelResponse, GenerateModel, RespondModel, EchoModel, ScriptedModel):
    _cls.__module__ = "actors"
