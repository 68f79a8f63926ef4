"""A failed turn's rollback of plugin state held in dict and list subclasses, found by a
bug hunt.

A failed turn puts every plugin's ``ctx.state`` back as the turn found it, in place, down
through its dicts, lists and sets. Only containers of exactly those types were recorded:
a ``Counter``, ``defaultdict`` or ``OrderedDict`` (what a plugin counting tool calls
naturally keeps) or a list subclass kept what the failed turn wrote into it, while a plain
dict beside it was rolled back, and the next checkpoint saved the failed turn's counts.
An immutable subclass (one whose ``clear`` raises) is left as it is, not made to fail the
rollback.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    Plugin,
    PluginContext,
    ScriptedModel,
    ToolCall,
    tool,
)


class _Tally(list[str]):
    """A list subclass, as a plugin may keep one."""


class _Counting(Plugin):
    """Counts tool calls in containers of several kinds."""

    name = "counting"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["plain"] = {}
        ctx.state["counter"] = collections.Counter()
        ctx.state["by_tool"] = collections.defaultdict(list)
        ctx.state["ordered"] = collections.OrderedDict()
        ctx.state["tally"] = _Tally()

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> None:
        state = ctx.state
        state["plain"][call.name] = state["plain"].get(call.name, 0) + 1
        state["counter"][call.name] += 1
        state["by_tool"][call.name].append(call.id)
        state["ordered"][call.id] = call.name
        state["tally"].append(call.id)


@tool
def ping() -> str:
    """Ping."""
    return "pong"


def _state_after(script: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one good turn and then one that calls ``ping`` and fails; the plugin's live
    state after the good turn and after the failed one, as plain values."""
    good: list[Any] = [Message.assistant(None, (ToolCall("a", "ping", {}),)), "fine"]
    ref = AgentSession.start(
        AgentTemplate(model=ScriptedModel(good + script), tools=[ping], plugins=[_Counting()])
    )
    try:
        proxy = ref.proxy()
        assert proxy.send("one").get(timeout=10).content == "fine"
        before = proxy.state().get(timeout=10)["plugins"]["counting"]
        with pytest.raises(RuntimeError, match="model down"):
            proxy.send("two").get(timeout=10)
        after = proxy.state().get(timeout=10)["plugins"]["counting"]
    finally:
        ref.stop()
    return before, after


def test_a_failed_turn_rolls_back_counters_defaultdicts_and_list_subclasses() -> None:
    before, after = _state_after(
        [Message.assistant(None, (ToolCall("b", "ping", {}),)), RuntimeError("model down")]
    )
    assert before["counter"] == {"ping": 1}
    assert before["by_tool"] == {"ping": ["a"]}
    assert after == before


class _Frozen(dict[str, int]):
    """An immutable dict subclass, as some libraries define one."""

    def clear(self) -> None:
        raise TypeError("frozen")


class _Settings(Plugin):
    name = "settings"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["limits"] = _Frozen(calls=3)
        ctx.state["seen"] = []

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> None:
        ctx.state["seen"].append(call.id)


def test_an_immutable_dict_subclass_in_the_state_leaves_the_turns_error_alone() -> None:
    # Recording subclasses must not make the rollback fail on one that refuses clear():
    # the caller gets the turn's own error, and the rest of the state is rolled back.
    script: list[Any] = [
        Message.assistant(None, (ToolCall("a", "ping", {}),)),
        RuntimeError("model down"),
    ]
    ref = AgentSession.start(
        AgentTemplate(model=ScriptedModel(script), tools=[ping], plugins=[_Settings()])
    )
    try:
        proxy = ref.proxy()
        with pytest.raises(RuntimeError, match="model down"):
            proxy.send("go").get(timeout=10)
        state = proxy.state().get(timeout=10)["plugins"]["settings"]
    finally:
        ref.stop()
    assert state == {"limits": {"calls": 3}, "seen": []}
