"""Plugin hooks that return the wrong kind of replacement, found by a bug hunt: such a
result is that hook's failure (a ``plugin_error`` event naming plugin, hook and what it
must return) and the turn goes on with the value unchanged, as when a hook raises. Before,
the turn failed later with an error that named neither (``'dict' object has no attribute
'to_dict'``)."""

from __future__ import annotations

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
    Plugin,
    PluginContext,
    Snapshot,
    SnapshotDecodeError,
    Tool,
    ToolCall,
    tool,
)

WAIT = 5.0


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class CallAsDict(Plugin):
    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> Any:
        return call.to_dict()


class ResponseAsMessage(Plugin):
    def after_model(self, ctx: PluginContext, response: ModelResponse) -> Any:
        return response.message


class PromptAsText(Plugin):
    def before_model(self, ctx: PluginContext, messages: list[Message]) -> Any:
        return "be brief"


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    started: list[pykka.ActorRef[AgentSession]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


@pytest.mark.parametrize(
    ("plugin", "hook", "must"),
    [
        (CallAsDict(), "on_tool_call", "a ToolCall"),
        (ResponseAsMessage(), "after_model", "a ModelResponse"),
        (PromptAsText(), "before_model", "a list of Message"),
    ],
)
def test_a_replacement_of_the_wrong_type_is_a_plugin_error_and_the_turn_goes_on(
    refs: list[pykka.ActorRef[AgentSession]], plugin: Plugin, hook: str, must: str
) -> None:
    template = AgentTemplate(model="echo", tools=[add], plugins=[plugin])
    refs.append(AgentSession.start(template))
    proxy = refs[0].proxy()

    answer = proxy.send('/add {"a": 2, "b": 40}').get(timeout=WAIT)

    assert answer.content == "add returned: 42"
    assert [m.content for m in proxy.history().get(timeout=WAIT)][-1] == "add returned: 42"
    events = proxy.events().get(timeout=WAIT).events
    assert "error" not in [e.type for e in events]
    errors = [e.data for e in events if e.type == "plugin_error"]
    assert errors
    assert {(e["plugin"], e["hook"]) for e in errors} == {(plugin.name, hook)}
    assert f"{hook} must return {must}" in errors[0]["error"]
    assert "TypeError" in errors[0]["error"]


def test_a_tuple_of_messages_is_a_prompt(refs: list[pykka.ActorRef[AgentSession]]) -> None:
    class TuplePrompt(Plugin):
        def before_model(self, ctx: PluginContext, messages: list[Message]) -> Any:
            return (*messages[:-1], Message.user("rewritten"))

    refs.append(AgentSession.start(AgentTemplate(model="echo", plugins=[TuplePrompt()])))
    proxy = refs[0].proxy()
    assert proxy.send("hi").get(timeout=WAIT).content == "echo: rewritten"
    assert "plugin_error" not in [e.type for e in proxy.events().get(timeout=WAIT).events]


class FailingEcho:
    """The echo model, except that it raises for the user text ``boom`` (a provider down)."""

    def __init__(self) -> None:
        self.inner = EchoModel()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        if messages[-1].content == "boom":
            raise ConnectionError("the provider is down")
        return self.inner.generate(messages, tools)


class Notes(Plugin):
    """Offers a ``note`` tool that closes over the list of notes in its state."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("notes", [])
        ctx.state.setdefault("index", {"count": 0})

    def session_tools(self, ctx: PluginContext) -> Sequence[Tool]:
        notes, index = ctx.state["notes"], ctx.state["index"]

        @tool
        def note(text: str) -> int:
            """Remember a note; returns how many there are."""
            notes.append(text)
            index["count"] += 1
            return len(notes)

        return [note]

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["notes"].append("turn")  # undone with a turn whose checkpoint fails


def test_a_rolled_back_turn_keeps_the_containers_a_plugins_tool_closes_over(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    saves: list[Snapshot] = []
    failing = [False]

    def save(snapshot: Snapshot) -> None:
        if failing[0]:
            raise OSError("disk full")
        saves.append(snapshot)

    template = AgentTemplate(model=FailingEcho(), plugins=[Notes()])
    refs.append(AgentSession.start(template, checkpointer=save))
    proxy = refs[0].proxy()
    assert proxy.send('/note {"text": "a"}').get(timeout=WAIT).content == "note returned: 1"
    with pytest.raises(ConnectionError):
        proxy.send("boom").get(timeout=WAIT)
    failing[0] = True
    with pytest.raises(OSError, match="disk full"):
        proxy.send('/note {"text": "lost"}').get(timeout=WAIT)
    failing[0] = False

    assert proxy.send('/note {"text": "b"}').get(timeout=WAIT).content == "note returned: 3"

    state = saves[-1].state["plugins"]["notes"]
    assert state == {"notes": ["a", "turn", "b", "turn"], "index": {"count": 2}}


@pytest.mark.parametrize("saved", [[1, 2], None, "text"])
def test_a_checkpoint_whose_plugin_state_is_not_a_dict_is_refused_as_such(saved: object) -> None:
    template = AgentTemplate(model="echo", plugins=[Notes()])
    restored = {"session_id": "s", "messages": [], "plugins": {"notes": saved}}

    with pytest.raises(SnapshotDecodeError, match=r"state\.plugins\.notes must be a dict"):
        AgentSession.start(template, restored_state=restored)
