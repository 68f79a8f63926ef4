"""Plugins offering tools to their session (``Plugin.session_tools``), with real actors.

Every wait is bounded (``WAIT``).
"""

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
    PluginError,
    Tool,
    tool,
)

WAIT = 5.0

Ref = pykka.ActorRef[AgentSession]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Counter(Plugin):
    """Offers ``count``, a tool that counts its calls in this session's ``ctx.state``.

    ``tool_name`` renames the tool; ``offer`` replaces what ``session_tools``
    returns; records which sessions started and ended.
    """

    name = "counter"

    def __init__(self, name: str = "counter", tool_name: str = "count") -> None:
        self.name = name
        self.tool_name = tool_name
        self.offer: Sequence[Any] | None = None
        self.ended: list[str] = []

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("calls", 0)

    def session_tools(self, ctx: PluginContext) -> Sequence[Tool]:
        if self.offer is not None:
            return self.offer

        def count(step: int = 1) -> int:
            """Count this call (by ``step``) and return the count so far."""
            ctx.state["calls"] += step
            return int(ctx.state["calls"])

        return [tool(name=self.tool_name)(count)]

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        self.ended.append(reason)


class ToolsSeen:
    """A model recording the tool names of each call; answers like ``EchoModel``."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []
        self._echo = EchoModel()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.seen.append([t.name for t in tools])
        return self._echo.generate(messages, tools)


@pytest.fixture
def refs() -> Iterator[list[Ref]]:
    started: list[Ref] = []
    yield started
    for ref in started:
        if ref.is_alive():
            ref.stop(timeout=WAIT)


def test_a_plugins_tools_are_offered_next_to_the_templates(refs: list[Ref]) -> None:
    model = ToolsSeen()
    template = AgentTemplate(model=model, tools=[add], plugins=[Counter()])
    refs.append(ref := AgentSession.start(template))
    session = ref.proxy()
    assert session.send('/count {"step": 2}').get(timeout=WAIT).content == "count returned: 2"
    assert session.send("/count").get(timeout=WAIT).content == "count returned: 3"
    assert session.send('/add {"a": 1, "b": 2}').get(timeout=WAIT).content == "add returned: 3"
    assert model.seen[0] == ["add", "count"]  # the template's first, then the plugins'
    assert session.state().get(timeout=WAIT)["plugins"]["counter"] == {"calls": 3}


def test_each_session_gets_its_own_tools(refs: list[Ref]) -> None:
    template = AgentTemplate(model=EchoModel(), plugins=[Counter()])
    refs += [AgentSession.start(template), AgentSession.start(template)]
    first, second = (ref.proxy() for ref in refs)
    first.send("/count").get(timeout=WAIT)
    first.send("/count").get(timeout=WAIT)
    assert second.send("/count").get(timeout=WAIT).content == "count returned: 1"


def test_a_resumed_session_gets_the_tools_again(refs: list[Ref]) -> None:
    template = AgentTemplate(model=EchoModel(), plugins=[Counter()])
    refs.append(ref := AgentSession.start(template, session_id="s"))
    ref.proxy().send("/count").get(timeout=WAIT)
    state = ref.proxy().snapshot().get(timeout=WAIT).state
    ref.stop(timeout=WAIT)
    refs.append(again := AgentSession.start(template, restored_state=state))
    assert again.proxy().send("/count").get(timeout=WAIT).content == "count returned: 2"


def test_a_name_taken_by_the_template_fails_the_start() -> None:
    plugin = Counter(tool_name="add")
    template = AgentTemplate(model=EchoModel(), tools=[add], plugins=[plugin])
    with pytest.raises(PluginError) as info:
        AgentSession.start(template)
    assert (info.value.plugin, info.value.hook) == ("counter", "session_tools")
    assert isinstance(info.value.error, ValueError)
    assert "'add' is already taken by the template" in str(info.value)
    assert plugin.ended == ["error"]  # it had started: its session_end ran


def test_a_name_taken_by_another_plugin_fails_the_start() -> None:
    first, second = Counter("first"), Counter("second")
    template = AgentTemplate(model=EchoModel(), plugins=[first, second])
    with pytest.raises(PluginError, match="already taken by plugin 'first'") as info:
        AgentSession.start(template)
    assert info.value.plugin == "second"
    assert first.ended == second.ended == ["error"]


def test_two_instances_of_one_plugin_class_may_have_their_own_names(refs: list[Ref]) -> None:
    template = AgentTemplate(
        model=EchoModel(), plugins=[Counter("a", "count_a"), Counter("b", "count_b")]
    )
    refs.append(ref := AgentSession.start(template))
    ref.proxy().send("/count_b").get(timeout=WAIT)
    assert ref.proxy().state().get(timeout=WAIT)["plugins"] == {
        "a": {"calls": 0},
        "b": {"calls": 1},
    }


@pytest.mark.parametrize(
    ("offer", "error"),
    [
        pytest.param(["not a tool"], TypeError, id="not-a-tool"),
        pytest.param([add, add], ValueError, id="twice"),
    ],
)
def test_what_is_not_a_set_of_tools_fails_the_start(offer: list[Any], error: type) -> None:
    plugin = Counter()
    plugin.offer = offer
    with pytest.raises(PluginError) as info:
        AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[plugin]))
    assert isinstance(info.value.error, error)
    assert info.value.hook == "session_tools"


def test_a_session_tools_hook_that_raises_fails_the_start() -> None:
    class Broken(Counter):
        def session_tools(self, ctx: PluginContext) -> Sequence[Tool]:
            raise RuntimeError("cannot list")

    with pytest.raises(PluginError, match="cannot list"):
        AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[Broken()]))


def test_a_plugin_without_session_tools_offers_none(refs: list[Ref]) -> None:
    model = ToolsSeen()
    refs.append(ref := AgentSession.start(AgentTemplate(model=model, plugins=[Plugin()])))
    ref.proxy().send("hi").get(timeout=WAIT)
    assert model.seen == [[]]
