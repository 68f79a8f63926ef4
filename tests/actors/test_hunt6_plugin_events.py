"""What a plugin may emit, found by a bug hunt.

``ctx.emit(type_, plugin=...)`` failed with Python's own ``TypeError`` (``publish() got
multiple values for keyword argument 'plugin'``), naming neither the plugin nor what to
do; data named ``type_`` likewise. And a plugin could emit the types
the session and its host publish themselves (``turn_finished``, ``crashed``...), which
the host's steering tracker and the gateway's streamed sends take as the end of a turn:
one plugin event ended someone's streamed turn early. ``emit`` now refuses them, naming
the type; a plugin's own event types work as before, with ``plugin`` in their data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pykka
import pytest

from actors import (
    RESERVED_EVENT_TYPES,
    AgentSession,
    AgentTemplate,
    EchoModel,
    EventBuffer,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Send,
)

WAIT = 5.0

# What the session and its host publish, as consumers match them (gateway, workers).
BUILT_IN = [
    "turn_started",
    "turn_finished",
    "steered",
    "delta",
    "model_response",
    "tool_call",
    "tool_result",
    "error",
    "plugin_error",
    "plugin_state_kept",
    "crashed",
    "resumed",
    "hibernated",
    "reactivated",
    "given_up",
    "moved",
    "checkpoint_damaged",
]


def _context(buffer: EventBuffer) -> PluginContext:
    return PluginContext(session_id="s-1", plugin="audit", state={}, events=buffer)


def test_data_named_plugin_is_refused_naming_the_clash() -> None:
    buffer = EventBuffer(10)
    with pytest.raises(TypeError, match=r"emit\('found'\).*'plugin'.*'audit'"):
        _context(buffer).emit("found", plugin="other")
    assert buffer.since(0).events == ()


def test_data_named_type_is_refused_naming_the_clash() -> None:
    buffer = EventBuffer(10)
    with pytest.raises(TypeError, match=r"emit\('found'\) cannot carry data named 'type_'"):
        _context(buffer).emit("found", type_="csv", rows=3)
    assert buffer.since(0).events == ()


@pytest.mark.parametrize("kind", BUILT_IN)
def test_a_built_in_event_type_is_refused_naming_it(kind: str) -> None:
    buffer = EventBuffer(10)
    with pytest.raises(ValueError, match=rf"type {kind!r}: .*choose another name"):
        _context(buffer).emit(kind, turn=1)
    assert buffer.since(0).events == ()
    assert kind in RESERVED_EVENT_TYPES


@pytest.mark.parametrize("kind", [3, None, b"found"], ids=["int", "none", "bytes"])
def test_a_type_that_is_not_a_str_is_refused(kind: object) -> None:
    buffer = EventBuffer(10)
    with pytest.raises(TypeError, match=r"emit\(\) takes the event type as a str"):
        _context(buffer).emit(cast(Any, kind))
    assert buffer.since(0).events == ()


def test_a_plugin_s_own_event_types_still_work() -> None:
    buffer = EventBuffer(10)
    ctx = _context(buffer)
    ctx.emit("audit", note="called add")
    ctx.emit("turn_finished_elsewhere")
    assert [(e.type, e.data) for e in buffer.since(0).events] == [
        ("audit", {"plugin": "audit", "note": "called add"}),
        ("turn_finished_elsewhere", {"plugin": "audit"}),
    ]


class Impostor(Plugin):
    """Emits a ``turn_finished`` of its own in the middle of each turn."""

    name = "impostor"

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> None:
        ctx.emit("turn_finished", turn=99, content="not the answer")


@pytest.fixture
def session() -> Iterator[pykka.ActorRef[AgentSession]]:
    ref = AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[Impostor()]))
    yield ref
    ref.stop(block=True, timeout=WAIT)


def test_a_plugin_cannot_end_a_turn_it_is_in(session: pykka.ActorRef[AgentSession]) -> None:
    answer = cast(Message, session.ask(Send("hi", tag="mine"), timeout=WAIT))

    assert answer.content == "echo: hi"
    events = session.proxy().events().get(timeout=WAIT).events
    kinds = [e.type for e in events]
    assert kinds == ["turn_started", "plugin_error", "model_response", "turn_finished"]
    error = events[1].data
    assert (error["plugin"], error["hook"]) == ("impostor", "after_model")
    assert "'turn_finished'" in error["error"]
    assert "choose another name" in error["error"]
    assert events[3].data["content"] == "echo: hi"


def test_an_empty_type_is_refused() -> None:
    buffer = EventBuffer(10)
    with pytest.raises(ValueError, match=r"type '': it is empty; choose another name"):
        _context(buffer).emit("")
    assert buffer.since(0).events == ()
