"""User text a checkpoint could not hold never enters a session, found by a bug hunt: on
``AgentSession`` itself too, not only behind ``AgentHost``. Steering text is the sharp
case: a failed turn puts it back at the front of the queue, so one bad steering message
failed every later turn of the session."""

from __future__ import annotations

from collections.abc import Iterator

import pykka
import pytest

from actors import AgentSession, AgentTemplate, Snapshot, SteeringQueue

WAIT = 5.0
BAD = "report-\udcff.txt"


class Text(str):
    """A ``str`` subclass: a checkpoint refuses it (it would not read back as itself)."""


@pytest.fixture
def saved() -> list[Snapshot]:
    return []


@pytest.fixture
def ref(saved: list[Snapshot]) -> Iterator[pykka.ActorRef[AgentSession]]:
    started = AgentSession.start(AgentTemplate(model="echo"), checkpointer=saved.append)
    yield started
    started.stop(block=True, timeout=WAIT)


def test_steering_with_a_lone_surrogate_is_refused_and_the_session_goes_on(
    ref: pykka.ActorRef[AgentSession], saved: list[Snapshot]
) -> None:
    proxy = ref.proxy()
    with pytest.raises(ValueError, match="steering text holds a lone surrogate at index 7"):
        proxy.steer(BAD).get(timeout=WAIT)

    assert proxy.send("hello").get(timeout=WAIT).content == "echo: hello"
    assert proxy.send("again").get(timeout=WAIT).content == "echo: again"
    assert [m.content for m in saved[-1].messages()] == [
        "hello",
        "echo: hello",
        "again",
        "echo: again",
    ]


def test_send_with_a_lone_surrogate_is_refused_before_the_turn(
    ref: pykka.ActorRef[AgentSession], saved: list[Snapshot]
) -> None:
    proxy = ref.proxy()
    with pytest.raises(ValueError, match="user's text holds a lone surrogate at index 7"):
        proxy.send(BAD).get(timeout=WAIT)

    assert proxy.history().get(timeout=WAIT) == []
    assert [e.type for e in proxy.events().get(timeout=WAIT).events] == []
    assert saved == []


def test_str_subclass_text_is_taken_as_plain_text(
    ref: pykka.ActorRef[AgentSession], saved: list[Snapshot]
) -> None:
    proxy = ref.proxy()
    proxy.steer(Text("steered")).get(timeout=WAIT)

    assert proxy.send(Text("hello")).get(timeout=WAIT).content == "echo: hello"
    assert [m.content for m in saved[-1].messages()] == ["steered", "hello", "echo: hello"]
    assert proxy.send("more").get(timeout=WAIT).content == "echo: more"
    saved[-1].serialize()


def test_steering_queue_refuses_text_no_checkpoint_can_hold() -> None:
    queue = SteeringQueue(4)
    with pytest.raises(ValueError, match="lone surrogate"):
        queue.put(BAD)
    queue.put(Text("x"))
    assert [type(t) for t in queue.drain()] == [str]
