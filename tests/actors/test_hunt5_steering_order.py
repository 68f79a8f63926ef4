"""Steering keeps the order things were said in, found by a bug hunt: text steered while a
session was idle landed in the history *after* the user message of the next ``send``
(the queue was drained only right before the model call), so the history, every
checkpoint and every resumed session read as if the user had said them the other way
round. Text steered during a turn still goes right before that turn's next model call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    ModelResponse,
    ScriptedModel,
    Snapshot,
    SteeringQueue,
    Tool,
    ToolCall,
    tool,
)
from supervisor import AgentHost, MemoryCheckpointStore, SessionCrashed
from tests.supervisor.host_helpers import MODES, host_options, watch_events

WAIT = 5.0


class Recording(EchoModel):
    """``EchoModel`` that keeps every prompt it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[list[Message]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.prompts.append(list(messages))
        return super().generate(messages, tools)


class Crashing(EchoModel):
    """``EchoModel`` whose session dies (``SystemExit``) on an unanswered ``!crash``."""

    model_string = "crashing-echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        for message in reversed(messages):
            if message.role == "assistant":
                break
            if message.role == "user" and message.content == "!crash":
                raise SystemExit("the session died")
        return super().generate(messages, tools)


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    started: list[pykka.ActorRef[AgentSession]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def _contents(messages: Sequence[Message]) -> list[str | None]:
    return [m.content for m in messages]


def test_steering_waiting_when_a_turn_begins_goes_before_its_user_message(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    model = Recording()
    saved: list[Snapshot] = []
    ref = AgentSession.start(
        AgentTemplate(model=model, instructions="sys"), checkpointer=saved.append
    )
    refs.append(ref)
    proxy = ref.proxy()
    proxy.steer("first note").get(timeout=WAIT)
    proxy.steer("second note").get(timeout=WAIT)

    answer = proxy.send("question").get(timeout=WAIT)

    said = [Message.user("first note"), Message.user("second note"), Message.user("question")]
    assert model.prompts == [[Message.system("sys"), *said]]
    assert proxy.history().get(timeout=WAIT) == [*said, answer]
    assert _contents(saved[-1].messages()) == [
        "first note",
        "second note",
        "question",
        answer.content,
    ]
    events = [(e.type, e.data.get("text")) for e in proxy.events().get(timeout=WAIT).events]
    assert events[:3] == [
        ("turn_started", "question"),
        ("steered", "first note"),
        ("steered", "second note"),
    ]


def test_steering_during_a_turn_still_reaches_its_next_model_call(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    entered, release = threading.Event(), threading.Event()

    @tool
    def wait_here() -> str:
        """Block until the test releases it."""
        entered.set()
        return "waited" if release.wait(WAIT) else "timed out"

    call = ToolCall("c1", "wait_here", {})
    queue = SteeringQueue(4)
    ref = AgentSession.start(
        AgentTemplate(
            model=ScriptedModel([Message.assistant(None, tool_calls=(call,)), "final"]),
            tools=[wait_here],
        ),
        steering=queue,
    )
    refs.append(ref)
    queue.put("before")
    future = ref.proxy().send("go")
    try:
        assert entered.wait(WAIT), "tool never started"
        queue.put("during")
    finally:
        release.set()
    future.get(timeout=WAIT)

    assert _contents(ref.proxy().history().get(timeout=WAIT)) == [
        "before",
        "go",
        None,
        "waited",
        "during",
        "final",
    ]


def test_steering_a_failed_turn_took_goes_before_the_retrys_user_message(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    ref = AgentSession.start(AgentTemplate(model=ScriptedModel([RuntimeError("down"), "ok"])))
    refs.append(ref)
    proxy = ref.proxy()
    proxy.steer("be brief").get(timeout=WAIT)
    with pytest.raises(RuntimeError, match="down"):
        proxy.send("one").get(timeout=WAIT)
    assert proxy.history().get(timeout=WAIT) == []

    proxy.send("two").get(timeout=WAIT)

    assert _contents(proxy.history().get(timeout=WAIT)) == ["be brief", "two", "ok"]


def test_a_resumed_session_reads_in_the_same_order(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    saved: list[Snapshot] = []
    template = AgentTemplate(model=EchoModel())
    ref = AgentSession.start(template, checkpointer=saved.append)
    refs.append(ref)
    ref.proxy().steer("note").get(timeout=WAIT)
    ref.proxy().send("question").get(timeout=WAIT)
    restored = Snapshot.deserialize(saved[-1].serialize())

    resumed = AgentSession.start(template, restored_state=restored.state, checkpointer=saved.append)
    refs.append(resumed)
    resumed.proxy().steer("later note").get(timeout=WAIT)
    resumed.proxy().send("again").get(timeout=WAIT)

    expected = ["note", "question", "echo: question", "later note", "again", "echo: again"]
    assert _contents(resumed.proxy().history().get(timeout=WAIT)) == expected
    assert _contents(saved[-1].messages()) == expected


@pytest.mark.parametrize("mode", MODES)
def test_host_modes_agree_on_the_order_in_history_and_checkpoint(mode: str) -> None:
    store = MemoryCheckpointStore()
    options: dict[str, Any] = host_options(mode)
    with AgentHost(store, **options) as host:
        sid = host.start_session(AgentTemplate(model="echo"))
        host.steer(sid, "note")
        assert host.send(sid, "question").content == "echo: question"
        expected = ["note", "question", "echo: question"]
        assert _contents(host.history(sid)) == expected
        assert _contents(store.load(sid).messages()) == expected

        assert host.hibernate(sid)
        host.steer(sid, "while asleep")
        host.send(sid, "again")

        expected += ["while asleep", "again", "echo: again"]
        assert _contents(host.history(sid)) == expected
        assert _contents(store.load(sid).messages()) == expected


@pytest.mark.parametrize("mode", MODES)
def test_steering_a_crashed_turn_took_goes_before_the_next_turns_user_message(mode: str) -> None:
    store = MemoryCheckpointStore()
    with AgentHost(store, **host_options(mode)) as host:
        sid = host.start_session(AgentTemplate(model=Crashing()))
        waiter = watch_events(host, sid)
        host.steer(sid, "remember X")
        with pytest.raises(SessionCrashed):
            host.send(sid, "!crash")  # the turn takes the steering, then dies
        waiter.wait_for("resumed")

        assert host.send(sid, "next").content == "echo: next"
        expected = ["remember X", "next", "echo: next"]
        assert _contents(host.history(sid)) == expected
        assert _contents(store.load(sid).messages()) == expected
