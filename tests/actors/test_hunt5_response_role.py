"""A model (or an ``after_model`` plugin) that answers with a message of another role fails
its turn naming the field, found by a bug hunt: a ``user``, ``system`` or ``tool`` message
was taken as the model's answer, returned by ``send`` and stored, and every later request
then showed the model a conversation it never had (a ``tool`` message answering no call is
refused by providers outright)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    ScriptedModel,
    Snapshot,
    ToolCall,
)

WAIT = 5.0


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


@pytest.mark.parametrize(
    "answer",
    [Message.user("hi"), Message.system("be nice"), Message.tool(ToolCall("c", "t"), "out")],
    ids=["user", "system", "tool"],
)
def test_a_model_answering_with_another_role_fails_its_turn(
    refs: list[pykka.ActorRef[Any]], answer: Message
) -> None:
    saved: list[Snapshot] = []
    ref = AgentSession.start(
        AgentTemplate(model=ScriptedModel([answer, "fine"])), checkpointer=saved.append
    )
    refs.append(ref)
    session = ref.proxy()

    with pytest.raises(TypeError, match=r"message\.role must be 'assistant'.*" + answer.role):
        session.send("hello").get(timeout=WAIT)

    assert session.history().get(timeout=WAIT) == []
    assert saved == []
    assert session.send("again").get(timeout=WAIT).content == "fine"


class Rewrites(Plugin):
    name = "rewrites"

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
        return ModelResponse(Message.user(response.message.content or ""), response.usage)


def test_an_after_model_hook_rewriting_the_role_fails_the_turn(
    refs: list[pykka.ActorRef[Any]],
) -> None:
    ref = AgentSession.start(AgentTemplate(model=ScriptedModel(["x"]), plugins=[Rewrites()]))
    refs.append(ref)
    with pytest.raises(TypeError, match=r"message\.role must be 'assistant'"):
        ref.proxy().send("hello").get(timeout=WAIT)
    assert ref.proxy().history().get(timeout=WAIT) == []
