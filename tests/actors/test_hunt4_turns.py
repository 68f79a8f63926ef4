"""The turn loop against odd tools and models, found by a bug hunt.

- A ``str`` subclass (a ``StrEnum`` member) that a tool returns, or that a model puts in
  its content or a call's arguments, was stored as it was: every later snapshot of the
  session failed (``... is not a plain value``).
- Two calls of one step with the same id (servers that send ``""`` for every id): the
  refusal meant for one call went to the first of them, and the refused call ran.
- A model whose response has the wrong types (a ``str`` for a message, a dict for a
  call, an ``int`` id, a set in the arguments) failed the turn with an error that named
  neither the model nor the field, or worse, was stored: a snapshot that saved and then
  could not be resumed.
- ``@tool`` took an ``async def``: the tool never ran and the model got
  ``<coroutine object ...>``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    PluginError,
    ScriptedModel,
    Snapshot,
    SnapshotEncodeError,
    Tool,
    ToolCall,
    ToolDefinitionError,
    Usage,
    tool,
)

WAIT = 5.0


class Color(enum.StrEnum):
    RED = "red"


@tool
def color() -> str:
    """The colour of the day."""
    return Color.RED


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    started: list[pykka.ActorRef[AgentSession]] = []
    yield started
    for ref in started:
        ref.stop(block=True, timeout=WAIT)


def _session(refs: list[pykka.ActorRef[AgentSession]], script: list[Any], tools: list[Tool]) -> Any:
    ref = AgentSession.start(AgentTemplate(model=ScriptedModel(script), tools=tools))
    refs.append(ref)
    return ref.proxy()


def _resumed_history(snapshot: Snapshot, tools: list[Tool]) -> list[Message]:
    """The history of a session resumed from ``snapshot`` after a round trip through bytes."""
    state = Snapshot.deserialize(snapshot.serialize()).state
    ref = AgentSession.start(
        AgentTemplate(model=ScriptedModel([]), tools=tools), restored_state=state
    )
    try:
        return list(ref.proxy().history().get(timeout=WAIT))
    finally:
        ref.stop(block=True, timeout=WAIT)


def test_a_str_subclass_from_a_tool_or_the_model_is_stored_as_plain_text(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    call = ToolCall("c1", "color", {"shade": Color.RED})
    session = _session(
        refs, [Message.assistant(Color.RED, (call,)), Message.assistant(Color.RED)], [color]
    )
    assert session.send("colour?").get(timeout=WAIT).content == "red"
    history = _resumed_history(session.snapshot().get(timeout=WAIT), [color])
    assert [m.content for m in history] == [
        "colour?",
        "red",
        "error: TypeError: color() got an unexpected keyword argument 'shade'",
        "red",
    ]
    for message in history[1:]:
        assert type(message.content) is str
    assert type(history[1].tool_calls[0].arguments["shade"]) is str


def test_a_refusal_reaches_its_own_call_when_calls_share_an_id(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    seen: list[object] = []

    @tool
    def record(x: int | str) -> str:
        """Record ``x``."""
        seen.append(x)
        return "ok"

    calls = (ToolCall("", "record", {"x": 1}), ToolCall("", "record", {"x": 2**70}))
    session = _session(refs, [Message.assistant(None, calls), "done"], [record])
    session.send("go").get(timeout=WAIT)
    assert seen == [1]  # the out-of-range call is not run, the other one is
    results = [m.content or "" for m in session.history().get(timeout=WAIT) if m.role == "tool"]
    assert results[0] == "ok"
    assert "beyond 64 bits" in results[1]


def _calling(*calls: Any) -> Message:
    """An assistant message calling ``calls`` (of any type: these tests pass wrong ones)."""
    return Message.assistant(None, calls)


FIRST = "message.tool_calls[0]"


def _unchecked_usage(count: object) -> Usage:
    """A ``Usage`` holding ``count`` unchecked (``Usage(...)`` refuses it), as a model
    could still hand one over: the turn checks what it gets."""
    usage = Usage()
    object.__setattr__(usage, "input_tokens", count)
    return usage


@pytest.mark.parametrize(
    ("response", "field"),
    [
        ("hello", "the response"),
        (ModelResponse(cast(Message, "hello")), "message"),
        (ModelResponse(Message.assistant("x"), cast(Usage, None)), "usage"),
        (ModelResponse(Message.assistant("x"), _unchecked_usage(1.5)), "usage.input_tokens"),
        (Message.assistant(cast(str, 5)), "message.content"),
        (_calling({"id": "1", "name": "color"}), FIRST),
        (_calling(ToolCall(cast(str, 7), "color")), f"{FIRST}.id"),
        (_calling(ToolCall("1", cast(str, None))), f"{FIRST}.name"),
        (_calling(ToolCall("1", "color", cast(dict[str, Any], "{}"))), f"{FIRST}.arguments"),
        (_calling(ToolCall("1", "color", {"a": {1}})), f"{FIRST}.arguments.a"),
        (_calling(ToolCall("1", "color", {"a": {0: 1}})), f"a key of {FIRST}.arguments.a"),
    ],
    ids=[
        "not-a-response",
        "message",
        "usage",
        "float-count",
        "content",
        "call",
        "id",
        "name",
        "arguments",
        "set",
        "int-key",
    ],
)
def test_a_model_response_of_the_wrong_types_fails_its_turn_naming_the_field(
    refs: list[pykka.ActorRef[AgentSession]], response: Any, field: str
) -> None:
    class Raw:
        def generate(self, messages: Any, tools: Any) -> Any:
            return ModelResponse(response) if isinstance(response, Message) else response

    ref = AgentSession.start(AgentTemplate(model=Raw(), tools=[color]))
    refs.append(ref)
    session = ref.proxy()
    with pytest.raises(TypeError, match="the model's response") as failed:
        session.send("hi").get(timeout=WAIT)
    assert field in str(failed.value)
    assert session.history().get(timeout=WAIT) == []  # rolled back
    assert _resumed_history(session.snapshot().get(timeout=WAIT), [color]) == []


def test_usage_of_a_response_is_checked_but_a_plain_response_passes(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    response = ModelResponse(Message.assistant("fine"), Usage(3, 4))
    session = _session(refs, [response], [])
    assert session.send("hi").get(timeout=WAIT).content == "fine"
    assert session.usage().get(timeout=WAIT) == Usage(3, 4)


def test_tool_refuses_an_async_function() -> None:
    async def fetch(url: str) -> str:
        return url

    with pytest.raises(ToolDefinitionError, match=r"tool 'fetch'.*async def"):
        tool(fetch)


class Loud:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


@pytest.mark.parametrize(
    ("result", "shown"),
    [({(1, 2): 3}, "{(1, 2): 3}"), (Loud(), "<Loud object>")],
    ids=["tuple-keys", "str-raises"],
)
def test_a_result_json_cannot_encode_is_shown_as_text_and_counts_as_run(
    refs: list[pykka.ActorRef[AgentSession]], result: object, shown: str
) -> None:
    ran: list[bool] = []

    @tool
    def act() -> object:
        """Do something with a side effect."""
        ran.append(True)
        return result

    session = _session(refs, [Message.assistant(None, (ToolCall("1", "act"),)), "done"], [act])
    session.send("go").get(timeout=WAIT)
    assert ran == [True]
    answer = [m.content for m in session.history().get(timeout=WAIT) if m.role == "tool"]
    assert answer == [shown]  # not "error: TypeError: keys must be str, ...": it ran
    events = session.events().get(timeout=WAIT).events
    assert [e.data["ok"] for e in events if e.type == "tool_result"] == [True]


class Replaces(Plugin):
    """Replaces its ``ctx.state`` with a list after every turn (it must stay a dict)."""

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state = ["oops"]  # type: ignore[assignment]


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_a_plugin_state_replaced_by_a_non_dict_fails_the_turn_not_the_resume(
    refs: list[pykka.ActorRef[AgentSession]], checkpointed: bool
) -> None:
    saved: list[Snapshot] = []
    template = AgentTemplate(model=ScriptedModel(["a"]), plugins=[Replaces()])
    ref = AgentSession.start(template, checkpointer=saved.append if checkpointed else None)
    refs.append(ref)
    session = ref.proxy()
    with pytest.raises(SnapshotEncodeError, match=r"state\.plugins\.replaces.*must be a dict"):
        session.send("hi").get(timeout=WAIT)
    assert saved == []
    assert session.state().get(timeout=WAIT)["plugins"] == {"replaces": {}}  # rolled back
    state = Snapshot.deserialize(session.snapshot().get(timeout=WAIT).serialize()).state
    resumed = AgentSession.start(template, restored_state=state)
    resumed.stop(block=True, timeout=WAIT)


def test_a_plugin_state_replaced_by_a_non_dict_at_start_fails_the_start() -> None:
    class AtStart(Plugin):
        def session_start(self, ctx: PluginContext) -> None:
            ctx.state = None  # type: ignore[assignment]

    with pytest.raises(PluginError, match="at_start"):
        AgentSession.start(AgentTemplate(model=ScriptedModel([]), plugins=[AtStart()]))


class Renames(Plugin):
    """Sends every call to ``color`` under an id of its own."""

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> ToolCall:
        return ToolCall("plugin-id", "color", {})


def test_the_tool_message_answers_the_models_call_when_a_plugin_replaces_it(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    template = AgentTemplate(
        model=ScriptedModel([_calling(ToolCall("c1", "colour", {"x": 1})), "done"]),
        tools=[color],
        plugins=[Renames()],
    )
    ref = AgentSession.start(template)
    refs.append(ref)
    session = ref.proxy()
    session.send("go").get(timeout=WAIT)
    _, asked, answered, _ = session.history().get(timeout=WAIT)
    # A provider pairs a tool message with its call by id: the model's id, not the plugin's.
    assert (answered.tool_call_id, answered.name) == ("c1", "colour")
    assert answered.tool_call_id == asked.tool_calls[0].id
    assert answered.content == "red"  # the replacement ran


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_tool_error_that_cannot_be_printed_is_still_the_tools_error(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    @tool
    def fail() -> str:
        """Fail oddly."""
        raise Unprintable

    session = _session(refs, [_calling(ToolCall("1", "fail")), "done"], [fail])
    assert session.send("go").get(timeout=WAIT).content == "done"
    answer = [m.content for m in session.history().get(timeout=WAIT) if m.role == "tool"]
    assert answer == ["error: Unprintable"]


class MalformedCall(Plugin):
    """Replaces every call with a ``ToolCall`` whose arguments are JSON text, not a dict."""

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> ToolCall:
        return ToolCall(call.id, call.name, cast(dict[str, Any], '{"x": 1}'))


def test_a_replacement_call_of_the_wrong_types_is_a_plugin_error_and_the_call_runs(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    template = AgentTemplate(
        model=ScriptedModel([_calling(ToolCall("c1", "color")), "done"]),
        tools=[color],
        plugins=[MalformedCall()],
    )
    ref = AgentSession.start(template)
    refs.append(ref)
    session = ref.proxy()
    assert session.send("go").get(timeout=WAIT).content == "done"
    events = session.events().get(timeout=WAIT).events
    [failure] = [e.data for e in events if e.type == "plugin_error"]
    assert failure["plugin"] == "malformed_call"
    assert "arguments" in failure["error"]
    assert [m.content for m in session.history().get(timeout=WAIT) if m.role == "tool"] == ["red"]


class Scale:
    """A callable object: a tool needs ``name=`` for it, having no ``__name__``."""

    def __call__(self, x: int, factor: int = 2) -> int:
        return x * factor


def test_tool_of_a_callable_object_or_partial_needs_only_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match=r"has no __name__.*name="):
        tool(Scale())
    scaled = tool(name="scale")(Scale())
    assert scaled.parameters["required"] == ["x"]
    assert scaled(x=3) == 6
    tripled = tool(name="triple")(functools.partial(Scale().__call__, factor=3))
    assert tripled.parameters["properties"]["x"] == {"type": "integer"}
    assert tripled(x=3) == 9
