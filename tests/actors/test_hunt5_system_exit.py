"""A bare session whose tool raises ``SystemExit`` ends alone, found by a bug hunt: Pykka
meets a ``BaseException`` in an actor by stopping every actor of the process, so one
session's tool stopped every other session (and left its own caller waiting for an
answer that never came). Now it does what a supervised session does: that session
ends, its ``send`` fails with ``ActorDeadError`` caused by the exception, its
``on_failure`` runs (steering back in the queue, plugins ended with ``error``), and every
other actor goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    Plugin,
    PluginContext,
    ScriptedModel,
    Send,
    SteeringQueue,
    ToolCall,
    tool,
)

WAIT = 5.0


@tool
def leave(code: int) -> str:
    """Raise ``SystemExit(code)``."""
    raise SystemExit(code)


class Ends(Plugin):
    """Records the reason each session end is reported with."""

    name = "ends"

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        self.reasons.append(reason)


class Echo(pykka.ThreadingActor):
    """An unrelated actor of the same process."""

    def on_receive(self, message: object) -> object:
        return message


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def _exiting_session(
    plugin: Plugin, steering: SteeringQueue | None = None
) -> pykka.ActorRef[AgentSession]:
    call = ToolCall("c1", "leave", {"code": 3})
    model = ScriptedModel([Message.assistant(None, (call,)), "never"])
    return AgentSession.start(
        AgentTemplate(model=model, tools=[leave], plugins=[plugin]), steering=steering
    )


def test_a_tools_system_exit_ends_its_session_alone(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    ends = Ends()
    steering = SteeringQueue(4)
    doomed = _exiting_session(ends, steering)
    other = AgentSession.start(AgentTemplate(model=EchoModel()))
    bystander = Echo.start()
    refs += [doomed, other, bystander]
    steering.put("note")

    with pytest.raises(pykka.ActorDeadError, match="SystemExit") as died:
        doomed.ask(Send("go"), timeout=WAIT)
    assert isinstance(died.value.__cause__, SystemExit)

    assert doomed.actor_stopped.wait(WAIT)
    assert ends.reasons == ["error"]  # on_failure ran, on_stop did not
    assert steering.drain() == ["note"]  # the turn's steering is back in the queue
    assert other.proxy().send("still here?").get(timeout=WAIT).content == "echo: still here?"
    assert bystander.ask("ping", timeout=WAIT) == "ping"
    assert other.is_alive()
    assert bystander.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        doomed.ask(Send("again"), timeout=WAIT)


def test_a_tell_that_exits_ends_only_its_session(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    ends = Ends()
    doomed = _exiting_session(ends)
    other = AgentSession.start(AgentTemplate(model=EchoModel()))
    refs += [doomed, other]

    doomed.tell(Send("go"))

    assert doomed.actor_stopped.wait(WAIT)
    assert ends.reasons == ["error"]
    assert other.proxy().send("hi").get(timeout=WAIT).content == "echo: hi"
