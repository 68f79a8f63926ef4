"""A session checks a send's ``tag``, found by a bug hunt: ``AgentHost.send`` checks it,
but ``ref.ask(Send(text, tag=...))`` and the proxy's ``send(text, tag=...)`` took
anything, and a tag that is not a ``str`` went into the ``turn_started`` event, where a
follower comparing tags, a JSON encoder or a worker's pipe met it later."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pykka
import pytest

from actors import AgentSession, AgentTemplate, EchoModel, Message, Send

WAIT = 5.0


@pytest.fixture
def session() -> Iterator[pykka.ActorRef[AgentSession]]:
    ref = AgentSession.start(AgentTemplate(model=EchoModel()))
    yield ref
    ref.stop(block=True, timeout=WAIT)


@pytest.mark.parametrize("tag", [42, b"req-1", ["req-1"]], ids=["int", "bytes", "list"])
def test_a_tag_that_is_not_a_str_is_refused_before_the_turn(
    session: pykka.ActorRef[AgentSession], tag: object
) -> None:
    with pytest.raises(TypeError, match=r"tag must be a str or None, got"):
        session.ask(Send("hi", tag=cast(Any, tag)), timeout=WAIT)
    with pytest.raises(TypeError, match=r"tag must be a str or None, got"):
        session.proxy().send("hi", tag=tag).get(timeout=WAIT)

    assert session.proxy().events().get(timeout=WAIT).events == ()
    assert session.proxy().history().get(timeout=WAIT) == []
    answer = cast(Message, session.ask(Send("again", tag="req-2"), timeout=WAIT))
    assert answer.content == "echo: again"


def test_a_tag_with_a_lone_surrogate_is_refused(session: pykka.ActorRef[AgentSession]) -> None:
    with pytest.raises(ValueError, match="tag"):
        session.ask(Send("hi", tag="req-\udcff"), timeout=WAIT)
    assert session.proxy().events().get(timeout=WAIT).events == ()


def test_a_str_tag_reaches_turn_started(session: pykka.ActorRef[AgentSession]) -> None:
    session.ask(Send("hi", tag="req-1"), timeout=WAIT)
    (started,) = [
        e for e in session.proxy().events().get(timeout=WAIT).events if e.type == "turn_started"
    ]
    assert started.data["tag"] == "req-1"
