"""A model or a plugin hook that raises ``asyncio.CancelledError`` fails as an ``Exception``
would, found by a bug hunt.

``CancelledError`` is a ``BaseException``: a model (or hook) that ran asyncio code inside
raised it past the turn's error handling, and the session ended (a restart under a host).
Now a model's fails the turn with ``ModelCallAborted`` (rolled back, the session goes on),
and a hook's is a ``plugin_error`` event, as their ``Exception`` is; so is any other
``BaseException`` but ``SystemExit``, ``KeyboardInterrupt`` and a group holding one, which
keep their meaning (a model's ``SystemExit`` still ends its session alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    ModelCallAborted,
    ModelRequest,
    ModelResponse,
    Plugin,
    PluginContext,
    ProviderError,
    Send,
    Tool,
    Usage,
)

WAIT = 5.0


class Interrupted(BaseException):
    """A ``BaseException`` of a library's own."""


class Raising(EchoModel):
    """``EchoModel`` whose ``generate`` raises ``error`` for user text ``!raise``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        if messages[-1].content == "!raise":
            raise self.error
        return super().generate(messages, tools)


class Responding:
    """A model of the ``respond`` form that raises ``CancelledError`` for ``!raise``."""

    model_string = "responding"

    def respond(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].content == "!raise":
            raise asyncio.CancelledError("stream cancelled")
        return ModelResponse(Message.assistant("fine"), Usage(1, 1))


class Hooks(Plugin):
    """Raises ``error`` in every per-turn hook and in ``session_end``."""

    name = "hooks"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def before_model(self, ctx: PluginContext, messages: list[Message]) -> None:
        raise self.error

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> None:
        raise self.error

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        raise self.error

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        raise self.error


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def _ask(ref: pykka.ActorRef[Any], text: str) -> Message:
    return cast(Message, ref.ask(Send(text), timeout=WAIT))


@pytest.mark.parametrize(
    "model",
    [
        Raising(asyncio.CancelledError("request cancelled")),
        Raising(Interrupted("stopped")),
        Raising(BaseExceptionGroup("tasks", [asyncio.CancelledError(), ValueError("x")])),
        Responding(),
    ],
    ids=["cancelled", "own-base-exception", "group", "respond-cancelled"],
)
def test_a_model_raising_a_base_exception_fails_the_turn_only(
    refs: list[pykka.ActorRef[Any]], model: Any
) -> None:
    ref = AgentSession.start(AgentTemplate(model=model))
    refs.append(ref)
    first = _ask(ref, "one").content

    with pytest.raises(ModelCallAborted, match="the model call ended with") as raised:
        _ask(ref, "!raise")

    assert isinstance(raised.value, ProviderError)
    assert not isinstance(raised.value.error, Exception)
    assert raised.value.__cause__ is raised.value.error
    assert ref.is_alive()
    events = ref.proxy().events().get(timeout=WAIT).events
    assert [e.type for e in events][-2:] == ["turn_started", "error"]
    assert "ModelCallAborted" in events[-1].data["error"]
    assert [m.content for m in ref.proxy().history().get(timeout=WAIT)] == ["one", first]
    assert _ask(ref, "two").content is not None  # the session goes on


def test_a_model_raising_a_group_holding_system_exit_still_ends_its_session(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    model = Raising(BaseExceptionGroup("tasks", [asyncio.CancelledError(), SystemExit(3)]))
    ref = AgentSession.start(AgentTemplate(model=model))
    refs.append(ref)

    with pytest.raises(pykka.ActorDeadError) as died:
        _ask(ref, "!raise")

    assert isinstance(died.value.__cause__, BaseExceptionGroup)
    assert ref.actor_stopped.wait(WAIT)


@pytest.mark.parametrize(
    "error",
    [asyncio.CancelledError("hook cancelled"), Interrupted("stopped")],
    ids=["cancelled", "own-base-exception"],
)
def test_a_hook_raising_a_base_exception_is_a_plugin_error(
    refs: list[pykka.ActorRef[Any]], error: BaseException
) -> None:
    ref = AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[Hooks(error)]))
    refs.append(ref)

    assert _ask(ref, "hi").content == "echo: hi"

    events = ref.proxy().events().get(timeout=WAIT).events
    failed = [e.data["hook"] for e in events if e.type == "plugin_error"]
    assert failed == ["before_model", "after_model", "after_turn"]
    assert events[-1].type == "turn_finished"
    buffer = ref.proxy().event_buffer.get(timeout=WAIT)
    cursor = buffer.last_seq
    ref.stop(block=True, timeout=WAIT)  # session_end's error is reported, not raised
    ended = buffer.since(cursor).events
    assert [(e.type, e.data["hook"]) for e in ended] == [("plugin_error", "session_end")]
    assert type(error).__name__ in ended[0].data["error"]
