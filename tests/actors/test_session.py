"""AgentSession as a real actor, driven through ``ref.proxy()``.

Every wait is bounded (``WAIT``); concurrency is synchronised with events and
futures, never with sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Event,
    EventBuffer,
    GenerateModel,
    Message,
    Model,
    ModelResponse,
    Plugin,
    PluginContext,
    PluginError,
    ProviderRegistry,
    RegistryProfileMissing,
    ScriptedModel,
    Send,
    SteeringQueue,
    SteeringQueueFull,
    Tool,
    ToolCall,
    TurnLimitExceeded,
    Usage,
    tool,
)

WAIT = 5.0

Ref = pykka.ActorRef[AgentSession]
Proxy = pykka.ActorProxy[AgentSession]
Starter = Callable[..., Ref]


@pytest.fixture
def start() -> Iterator[Starter]:
    """Start sessions (default template: EchoModel, no tools) and stop them afterwards."""
    refs: list[Ref] = []

    def _start(template: AgentTemplate | None = None, **kwargs: Any) -> Ref:
        ref = AgentSession.start(template or AgentTemplate(model=EchoModel()), **kwargs)
        refs.append(ref)
        return ref

    yield _start
    for ref in refs:
        ref.stop(block=True, timeout=WAIT)


class RecordingModel:
    """Wraps a model and records every prompt it was given (copied)."""

    def __init__(self, inner: GenerateModel) -> None:
        self.inner = inner
        self.prompts: list[list[Message]] = []
        self.model_string = "recording"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.prompts.append(list(messages))
        return self.inner.generate(messages, tools)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def fail(reason: str) -> str:
    """Always raises."""
    raise ValueError(reason)


def calls(*items: ToolCall) -> Message:
    return Message.assistant(None, items)


def send(proxy: Proxy, text: Any) -> Message:
    answer: Message = proxy.send(text).get(timeout=WAIT)
    return answer


def history(proxy: Proxy) -> list[Message]:
    result: list[Message] = proxy.history().get(timeout=WAIT)
    return result


def event_types(proxy: Proxy, since: int | None = None) -> list[str]:
    return [e.type for e in proxy.events(since).get(timeout=WAIT).events]


def join_new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Join threads started since ``before``; return those still alive after the bound."""
    for thread in set(threading.enumerate()) - before:
        thread.join(WAIT)
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


# -- plain and tool-calling turns --------------------------------------------------


def test_plain_turn(start: Starter) -> None:
    model = RecordingModel(EchoModel())
    proxy = start(AgentTemplate(model=model, instructions="Be brief.")).proxy()

    answer = send(proxy, "hello")

    assert answer == Message.assistant("echo: hello")
    assert history(proxy) == [Message.user("hello"), answer]
    assert model.prompts == [[Message.system("Be brief."), Message.user("hello")]]
    assert event_types(proxy) == ["turn_started", "model_response", "turn_finished"]


def test_second_turn_sees_whole_conversation(start: Starter) -> None:
    model = RecordingModel(EchoModel())
    proxy = start(AgentTemplate(model=model)).proxy()
    first = send(proxy, "one")
    second = send(proxy, "two")
    assert second.content == "echo: two"
    assert model.prompts[1] == [Message.user("one"), first, Message.user("two")]
    assert proxy.state().get(timeout=WAIT)["turns"] == 2


def test_tool_turn_with_echo_model(start: Starter) -> None:
    proxy = start(AgentTemplate(model=EchoModel(), tools=[add])).proxy()

    answer = send(proxy, '/add {"a": 2, "b": 3}')

    call = ToolCall("call_1", "add", {"a": 2, "b": 3})
    assert answer == Message.assistant("add returned: 5")
    assert history(proxy) == [
        Message.user('/add {"a": 2, "b": 3}'),
        calls(call),
        Message.tool(call, "5"),
        answer,
    ]
    assert event_types(proxy) == [
        "turn_started",
        "model_response",
        "tool_call",
        "tool_result",
        "model_response",
        "turn_finished",
    ]
    batch = proxy.events().get(timeout=WAIT)
    tool_call, tool_result = batch.events[2], batch.events[3]
    assert tool_call.data == {"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
    assert tool_result.data.pop("seconds") >= 0
    assert tool_result.data == {"id": "call_1", "name": "add", "ok": True, "content": "5"}


def test_tool_turn_with_scripted_model(start: Starter) -> None:
    first = ToolCall("c1", "add", {"a": 1, "b": 2})
    second = ToolCall("c2", "add", {"a": 10, "b": 20})
    model = RecordingModel(ScriptedModel([calls(first, second), "the sums are 3 and 30"]))
    proxy = start(AgentTemplate(model=model, tools=[add])).proxy()

    answer = send(proxy, "add please")

    expected = [
        Message.user("add please"),
        calls(first, second),
        Message.tool(first, "3"),
        Message.tool(second, "30"),
        Message.assistant("the sums are 3 and 30"),
    ]
    assert answer == expected[-1]
    assert history(proxy) == expected
    assert model.prompts == [expected[:1], expected[:4]]


def test_tool_result_that_is_not_a_string_is_json(start: Starter) -> None:
    @tool
    def info(key: str) -> dict[str, Any]:
        """Return a record."""
        return {"key": key, "values": [1, 2]}

    call = ToolCall("c1", "info", {"key": "k"})
    proxy = start(AgentTemplate(model=ScriptedModel([calls(call), "ok"]), tools=[info])).proxy()
    send(proxy, "go")
    tool_message = history(proxy)[2]
    assert json.loads(tool_message.content or "") == {"key": "k", "values": [1, 2]}


def test_tool_that_raises_gives_error_message_and_turn_goes_on(start: Starter) -> None:
    call = ToolCall("c1", "fail", {"reason": "disk on fire"})
    model = RecordingModel(ScriptedModel([calls(call), "sorry, it failed"]))
    proxy = start(AgentTemplate(model=model, tools=[fail])).proxy()

    answer = send(proxy, "try it")

    error_message = Message.tool(call, "error: ValueError: disk on fire")
    assert answer.content == "sorry, it failed"
    assert history(proxy)[2] == error_message
    assert model.prompts[1][-1] == error_message
    result = next(e for e in proxy.events().get(timeout=WAIT).events if e.type == "tool_result")
    assert result.data["ok"] is False


def test_tool_called_with_bad_arguments_reports_type_error(start: Starter) -> None:
    call = ToolCall("c1", "add", {"a": 1})
    proxy = start(AgentTemplate(model=ScriptedModel([calls(call), "ok"]), tools=[add])).proxy()
    assert send(proxy, "go").content == "ok"
    content = history(proxy)[2].content or ""
    assert content.startswith("error: TypeError:")


def test_unknown_tool_gives_error_message_and_turn_goes_on(start: Starter) -> None:
    call = ToolCall("c1", "nope", {})
    model = ScriptedModel([calls(call), "never mind"])
    proxy = start(AgentTemplate(model=model, tools=[add, fail])).proxy()

    answer = send(proxy, "call nope")

    assert answer.content == "never mind"
    assert history(proxy)[2] == Message.tool(
        call, "error: unknown tool 'nope'; available: ['add', 'fail']"
    )


# -- failed turns ------------------------------------------------------------------


def test_turn_limit_exceeded_rolls_back(start: Starter) -> None:
    call = ToolCall("c", "add", {"a": 1, "b": 1})
    per_call = Usage(2, 3)
    looping = [ModelResponse(calls(call), per_call) for _ in range(3)]
    model = ScriptedModel(["first answer", *looping, "after the limit"])
    proxy = start(AgentTemplate(model=model, tools=[add]), max_steps=3).proxy()
    send(proxy, "warm up")
    before = history(proxy)
    usage_before = proxy.usage().get(timeout=WAIT)
    cursor = proxy.events().get(timeout=WAIT).cursor

    with pytest.raises(TurnLimitExceeded) as info:
        send(proxy, "loop forever")

    assert info.value.max_steps == 3
    assert "max_steps=3" in str(info.value)
    assert model.remaining == 1  # exactly max_steps model calls were made
    assert history(proxy) == before
    assert proxy.usage().get(timeout=WAIT) == usage_before + Usage(6, 9)
    new = proxy.events(cursor).get(timeout=WAIT).events
    assert [e.type for e in new][-1] == "error"
    assert "TurnLimitExceeded" in new[-1].data["error"]
    assert "turn_finished" not in [e.type for e in new]
    assert proxy.state().get(timeout=WAIT)["turns"] == 1
    # The session lives on.
    assert send(proxy, "hello again").content == "after the limit"


def test_max_steps_one_allows_a_direct_answer(start: Starter) -> None:
    proxy = start(max_steps=1).proxy()
    assert send(proxy, "hi").content == "echo: hi"


def test_model_error_reaches_caller_and_rolls_back(start: Starter) -> None:
    model = ScriptedModel(["first", RuntimeError("model is down"), "recovered"])
    proxy = start(AgentTemplate(model=model)).proxy()
    send(proxy, "one")
    before = history(proxy)

    with pytest.raises(RuntimeError, match="model is down"):
        send(proxy, "two")

    assert history(proxy) == before
    types = event_types(proxy)
    assert types[-2:] == ["turn_started", "error"]
    assert send(proxy, "three").content == "recovered"
    assert [m.content for m in history(proxy)] == ["one", "first", "three", "recovered"]


def test_model_error_after_tool_call_rolls_back_whole_turn(start: Starter) -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    model = ScriptedModel(
        [ModelResponse(calls(call), Usage(4, 1)), RuntimeError("boom"), "fine"],
    )
    proxy = start(AgentTemplate(model=model, tools=[add])).proxy()
    with pytest.raises(RuntimeError, match="boom"):
        send(proxy, "go")
    assert history(proxy) == []
    assert proxy.usage().get(timeout=WAIT) == Usage(4, 1)
    assert send(proxy, "again").content == "fine"


def test_usage_accumulates_including_failed_turns(start: Starter) -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    model = ScriptedModel(
        [
            ModelResponse(Message.assistant("a"), Usage(1, 2)),
            ModelResponse(calls(call), Usage(10, 20)),
            ValueError("mid-turn failure"),
            ModelResponse(calls(call), Usage(100, 200)),
            ModelResponse(Message.assistant("b"), Usage(1000, 2000)),
        ]
    )
    proxy = start(AgentTemplate(model=model, tools=[add])).proxy()
    send(proxy, "1")
    with pytest.raises(ValueError, match="mid-turn failure"):
        send(proxy, "2")
    send(proxy, "3")
    usage = proxy.usage().get(timeout=WAIT)
    assert usage == Usage(1111, 2222)
    assert proxy.state().get(timeout=WAIT)["usage"] == usage.to_dict()


def test_send_requires_a_string(start: Starter) -> None:
    proxy = start().proxy()
    for bad in (None, 42, b"bytes", ["hi"]):
        with pytest.raises(TypeError, match="send\\(\\) takes the user's text as a str"):
            send(proxy, bad)
    assert history(proxy) == []
    assert event_types(proxy) == []
    assert send(proxy, "ok").content == "echo: ok"


# -- steering ----------------------------------------------------------------------


def test_steer_between_turns_is_injected_before_the_next_user_message(start: Starter) -> None:
    model = RecordingModel(EchoModel())
    proxy = start(AgentTemplate(model=model, instructions="sys")).proxy()
    proxy.steer("first note").get(timeout=WAIT)
    proxy.steer("second note").get(timeout=WAIT)

    answer = send(proxy, "question")

    expected_prompt = [
        Message.system("sys"),
        Message.user("first note"),
        Message.user("second note"),
        Message.user("question"),
    ]
    assert model.prompts == [expected_prompt]
    assert history(proxy) == [*expected_prompt[1:], answer]
    steered = [
        e.data["text"] for e in proxy.events().get(timeout=WAIT).events if e.type == "steered"
    ]
    assert steered == ["first note", "second note"]
    # Drained: the next turn has no steering.
    send(proxy, "next")
    assert model.prompts[1][-1] == Message.user("next")


@pytest.mark.parametrize(
    "queue_source",
    [
        "session_attribute",
        "passed_in",
    ],
)
def test_steering_during_a_running_turn_reaches_the_next_model_call(
    start: Starter, queue_source: str
) -> None:
    entered, release = threading.Event(), threading.Event()

    @tool
    def wait_here() -> str:
        """Block until the test releases it."""
        entered.set()
        return "waited" if release.wait(WAIT) else "timed out"

    call = ToolCall("c1", "wait_here", {})
    model = RecordingModel(ScriptedModel([calls(call), "final"]))
    queue = SteeringQueue(4)
    kwargs = {"steering": queue} if queue_source == "passed_in" else {}
    proxy = start(AgentTemplate(model=model, tools=[wait_here]), **kwargs).proxy()
    if queue_source == "session_attribute":
        queue = proxy.steering.get(timeout=WAIT)

    future = proxy.send("go")
    try:
        assert entered.wait(WAIT), "tool never started"
        queue.put("change of plan")
    finally:
        release.set()
    answer = future.get(timeout=WAIT)

    assert answer.content == "final"
    assert model.prompts[0] == [Message.user("go")]
    assert model.prompts[1] == [
        Message.user("go"),
        calls(call),
        Message.tool(call, "waited"),
        Message.user("change of plan"),
    ]
    assert history(proxy)[3] == Message.user("change of plan")
    assert len(queue) == 0


def test_passed_in_steering_queue_is_the_sessions_queue(start: Starter) -> None:
    queue = SteeringQueue(3)
    proxy = start(steering=queue).proxy()
    assert proxy.steering.get(timeout=WAIT) is queue


def test_passed_in_event_buffer_is_used(start: Starter) -> None:
    buffer = EventBuffer(10)
    proxy = start(event_buffer=buffer).proxy()
    assert proxy.event_buffer.get(timeout=WAIT) is buffer
    send(proxy, "hi")
    assert [e.type for e in buffer.since().events] == [
        "turn_started",
        "model_response",
        "turn_finished",
    ]


def test_steering_queue_full(start: Starter) -> None:
    proxy = start(max_steering_queue=2).proxy()
    proxy.steer("a").get(timeout=WAIT)
    proxy.steer("b").get(timeout=WAIT)
    with pytest.raises(SteeringQueueFull) as info:
        proxy.steer("c").get(timeout=WAIT)
    assert info.value.limit == 2
    assert "max_steering_queue" in str(info.value)
    # Nothing was queued by the refused call; a turn drains the queue.
    send(proxy, "q")
    assert [m.content for m in history(proxy)[:3]] == ["a", "b", "q"]
    proxy.steer("c").get(timeout=WAIT)


def test_steer_requires_a_string(start: Starter) -> None:
    proxy = start().proxy()
    with pytest.raises(TypeError, match="steering text must be a str"):
        proxy.steer(3).get(timeout=WAIT)


# -- events ------------------------------------------------------------------------


def test_event_buffer_overflow_and_cursors(start: Starter) -> None:
    proxy = start(event_buffer_size=3).proxy()
    send(proxy, "one")  # events 1..3
    first = proxy.events().get(timeout=WAIT)
    assert [e.seq for e in first.events] == [1, 2, 3]
    assert first.cursor == 3
    assert first.missed == 0

    send(proxy, "two")  # events 4..6; 1..3 dropped
    buffer = proxy.event_buffer.get(timeout=WAIT)
    assert buffer.dropped == 3

    fresh = proxy.events(first.cursor).get(timeout=WAIT)
    assert [e.seq for e in fresh.events] == [4, 5, 6]
    assert fresh.missed == 0
    assert fresh.cursor == 6

    stale = proxy.events(1).get(timeout=WAIT)  # had seen event 1 only
    assert [e.seq for e in stale.events] == [4, 5, 6]
    assert stale.missed == 2
    assert proxy.events(0).get(timeout=WAIT).missed == 3

    everything = proxy.events().get(timeout=WAIT)
    assert [e.seq for e in everything.events] == [4, 5, 6]
    assert everything.missed == 0

    caught_up = proxy.events(fresh.cursor).get(timeout=WAIT)
    assert caught_up.events == ()
    assert caught_up.cursor == 6
    assert caught_up.missed == 0

    send(proxy, "three")  # events 7..9
    after = proxy.events(caught_up.cursor).get(timeout=WAIT)
    assert [(e.seq, e.type) for e in after.events] == [
        (7, "turn_started"),
        (8, "model_response"),
        (9, "turn_finished"),
    ]
    assert after.missed == 0
    assert buffer.dropped == 6


def test_event_data(start: Starter) -> None:
    proxy = start().proxy()
    send(proxy, "hello world")
    started, response, finished = proxy.events().get(timeout=WAIT).events
    assert started.data == {"turn": 1, "text": "hello world"}
    model_seconds = response.data.pop("seconds")
    assert response.data == {
        "content": "echo: hello world",
        "tool_calls": [],
        "usage": Usage(2, 3).to_dict(),
    }
    turn_seconds = finished.data.pop("seconds")
    assert finished.data == {"turn": 1, "content": "echo: hello world"}
    assert 0 <= model_seconds <= turn_seconds <= finished.at - started.at + 0.01
    assert started.at <= response.at <= finished.at


def test_subscribers_get_events_on_the_session_thread(start: Starter) -> None:
    proxy = start(AgentTemplate(model=EchoModel(), tools=[add])).proxy()
    received: list[tuple[str, str]] = []

    def subscriber(event: Event) -> None:
        received.append((event.type, threading.current_thread().name))

    proxy.subscribe(subscriber).get(timeout=WAIT)
    send(proxy, '/add {"a": 1, "b": 1}')

    assert [t for t, _ in received] == event_types(proxy)
    threads = {name for _, name in received}
    assert len(threads) == 1
    assert threading.current_thread().name not in threads


def test_raising_subscriber_does_not_break_the_session(
    start: Starter, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = start().proxy()
    received: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber bug")

    proxy.subscribe(broken).get(timeout=WAIT)
    proxy.subscribe(lambda e: received.append(e.type)).get(timeout=WAIT)

    with caplog.at_level("ERROR", logger="actors.events"):
        assert send(proxy, "still fine").content == "echo: still fine"
    assert received == ["turn_started", "model_response", "turn_finished"]
    assert any("subscriber" in r.getMessage() for r in caplog.records)
    assert send(proxy, "again").content == "echo: again"


# -- plugins -----------------------------------------------------------------------

HookLog = list[tuple[str, str]]


class RecordingPlugin(Plugin):
    """Logs every hook as (plugin name, hook) into a shared list."""

    def __init__(self, log: HookLog) -> None:
        self.log = log
        self.threads: set[str] = set()
        self.end_reasons: list[str] = []

    def _record(self, hook: str) -> None:
        self.log.append((self.name, hook))
        self.threads.add(threading.current_thread().name)

    def session_start(self, ctx: PluginContext) -> None:
        self._record("session_start")

    def before_model(self, ctx: PluginContext, messages: list[Message]) -> list[Message] | None:
        self._record("before_model")
        return None

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse | None:
        self._record("after_model")
        return None

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> ToolCall | None:
        self._record("on_tool_call")
        return None

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        self._record("after_turn")

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        self._record("session_end")
        self.end_reasons.append(reason)


class First(RecordingPlugin):
    name = "first"


class Second(RecordingPlugin):
    name = "second"


def test_plugin_hook_order(start: Starter) -> None:
    log: HookLog = []
    first, second = First(log), Second(log)
    template = AgentTemplate(model=EchoModel(), tools=[add], plugins=[first, second])
    ref = start(template)
    assert log == [("first", "session_start"), ("second", "session_start")]

    send(ref.proxy(), '/add {"a": 1, "b": 2}')
    assert ref.stop(block=True, timeout=WAIT)

    both = ["first", "second"]
    expected = [(p, "session_start") for p in both]
    for hook in ("before_model", "after_model", "on_tool_call", "before_model", "after_model"):
        expected += [(p, hook) for p in both]
    expected += [(p, "after_turn") for p in both]
    expected += [("second", "session_end"), ("first", "session_end")]
    assert log == expected
    assert first.end_reasons == second.end_reasons == ["normal"]
    assert first.threads == second.threads
    assert len(first.threads) == 1
    assert threading.current_thread().name not in first.threads


def test_default_plugin_name_is_snake_case() -> None:
    class MyAuditPlugin(Plugin):
        pass

    assert MyAuditPlugin.name == "my_audit_plugin"
    assert First.name == "first"


def test_after_turn_gets_the_messages_the_turn_added(start: Starter) -> None:
    seen: list[list[Message]] = []

    class Watcher(Plugin):
        def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
            seen.append(list(messages))

    proxy = start(AgentTemplate(model=EchoModel(), tools=[add], plugins=[Watcher()])).proxy()
    send(proxy, "a")
    send(proxy, '/add {"a": 1, "b": 1}')
    full = history(proxy)
    assert seen == [full[:2], full[2:]]


def test_before_model_can_replace_the_prompt(start: Starter) -> None:
    class Redact(Plugin):
        def before_model(self, ctx: PluginContext, messages: list[Message]) -> list[Message]:
            return [Message.system("redacted")] + [
                Message.user((m.content or "").replace("secret", "***")) for m in messages
            ]

    class SeesRedacted(Plugin):
        def __init__(self) -> None:
            self.seen: list[list[Message]] = []

        def before_model(self, ctx: PluginContext, messages: list[Message]) -> None:
            self.seen.append(list(messages))

    model = RecordingModel(EchoModel())
    second = SeesRedacted()
    proxy = start(AgentTemplate(model=model, plugins=[Redact(), second])).proxy()

    answer = send(proxy, "my secret")

    prompt = [Message.system("redacted"), Message.user("my ***")]
    assert model.prompts == [prompt]
    assert second.seen == [prompt]  # plugins run in order, each sees the last replacement
    assert answer.content == "echo: my ***"
    assert history(proxy)[0] == Message.user("my secret")  # history itself is untouched


def test_on_tool_call_can_rewrite_arguments(start: Starter) -> None:
    class Double(Plugin):
        def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> ToolCall:
            doubled = {k: v * 2 for k, v in call.arguments.items()}
            return ToolCall(call.id, call.name, doubled)

    proxy = start(AgentTemplate(model=EchoModel(), tools=[add], plugins=[Double()])).proxy()

    answer = send(proxy, '/add {"a": 1, "b": 2}')

    assert answer.content == "add returned: 6"
    original = ToolCall("call_1", "add", {"a": 1, "b": 2})
    assert history(proxy)[1] == calls(original)
    assert history(proxy)[2] == Message.tool(original, "6")
    tool_call = next(e for e in proxy.events().get(timeout=WAIT).events if e.type == "tool_call")
    assert tool_call.data["arguments"] == {"a": 2, "b": 4}


def test_after_model_can_replace_the_response(start: Starter) -> None:
    class Shout(Plugin):
        def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
            text = (response.message.content or "").upper()
            return ModelResponse(Message.assistant(text), response.usage)

    proxy = start(AgentTemplate(model=EchoModel(), plugins=[Shout()])).proxy()
    answer = send(proxy, "quiet")
    assert answer == Message.assistant("ECHO: QUIET")
    assert history(proxy)[-1] == answer


def test_after_model_can_turn_an_answer_into_a_tool_call(start: Starter) -> None:
    class ForceTool(Plugin):
        def __init__(self) -> None:
            self.done = False

        def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse | None:
            if self.done:
                return None
            self.done = True
            return ModelResponse(calls(ToolCall("x1", "add", {"a": 4, "b": 4})), response.usage)

    proxy = start(AgentTemplate(model=EchoModel(), tools=[add], plugins=[ForceTool()])).proxy()
    assert send(proxy, "hi").content == "add returned: 8"


def test_plugin_context_and_state(start: Starter) -> None:
    contexts: list[PluginContext] = []

    class Counter(Plugin):
        def session_start(self, ctx: PluginContext) -> None:
            contexts.append(ctx)
            ctx.state.setdefault("turns", 0)

        def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
            ctx.state["turns"] += 1
            ctx.emit("counted", turns=ctx.state["turns"])

    proxy = start(AgentTemplate(model=EchoModel(), plugins=[Counter()]), session_id="s-1").proxy()
    send(proxy, "a")
    send(proxy, "b")

    (ctx,) = contexts
    assert ctx.session_id == "s-1"
    assert ctx.plugin == "counter"
    assert ctx.resumed is False
    assert ctx.stripped == ()
    assert proxy.state().get(timeout=WAIT)["plugins"] == {"counter": {"turns": 2}}
    counted = [e for e in proxy.events().get(timeout=WAIT).events if e.type == "counted"]
    assert [e.data for e in counted] == [
        {"plugin": "counter", "turns": 1},
        {"plugin": "counter", "turns": 2},
    ]


def test_session_start_failure_raises_plugin_error_and_stops(start: Starter) -> None:
    log: HookLog = []

    class Broken(RecordingPlugin):
        name = "broken"

        def session_start(self, ctx: PluginContext) -> None:
            super().session_start(ctx)
            raise ConnectionError("database unreachable")

    later = Second(log)
    template = AgentTemplate(model=EchoModel(), plugins=[First(log), Broken(log), later])
    before = set(threading.enumerate())

    with pytest.raises(PluginError) as info:
        AgentSession.start(template)

    error = info.value
    assert error.plugin == "broken"
    assert error.hook == "session_start"
    assert isinstance(error.error, ConnectionError)
    assert isinstance(error.__cause__, ConnectionError)
    assert "'broken'" in str(error)
    assert "database unreachable" in str(error)
    assert join_new_threads(before) == []
    assert pykka.ActorRegistry.get_by_class(AgentSession) == []
    # The plugin after the failing one never started; the one before it was ended.
    assert ("second", "session_start") not in log
    assert log[:2] == [("first", "session_start"), ("broken", "session_start")]
    assert ("first", "session_end") in log
    assert ("broken", "session_end") not in log


@pytest.mark.parametrize(
    "hook", ["before_model", "after_model", "on_tool_call", "after_turn", "session_end"]
)
def test_other_hook_failures_become_plugin_error_events(start: Starter, hook: str) -> None:
    log: HookLog = []

    class Flaky(RecordingPlugin):
        name = "flaky"

        def _record(self, name: str) -> None:
            super()._record(name)
            if name == hook:
                raise RuntimeError(f"{name} broke")

    after = Second(log)
    template = AgentTemplate(model=EchoModel(), tools=[add], plugins=[Flaky(log), after])
    ref = start(template)
    proxy = ref.proxy()
    buffer: EventBuffer = proxy.event_buffer.get(timeout=WAIT)

    answer = send(proxy, '/add {"a": 1, "b": 2}')
    assert answer.content == "add returned: 3"
    send(proxy, "second turn")
    assert ref.stop(block=True, timeout=WAIT)

    errors = [e for e in buffer.since().events if e.type == "plugin_error"]
    assert errors
    for event in errors:
        assert event.data["plugin"] == "flaky"
        assert event.data["hook"] == hook
        assert f"{hook} broke" in event.data["error"]
    # The plugin after the failing one still ran every hook.
    assert [h for p, h in log if p == "second"].count(hook) >= 1
    assert ("second", "session_end") in log


def test_hook_failure_result_is_ignored_and_later_plugins_still_rewrite(start: Starter) -> None:
    class Broken(Plugin):
        def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
            raise KeyError("oops")

    class Rewrite(Plugin):
        def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse:
            return ModelResponse(Message.assistant("rewritten"), response.usage)

    proxy = start(AgentTemplate(model=EchoModel(), plugins=[Broken(), Rewrite()])).proxy()
    assert send(proxy, "x").content == "rewritten"


# -- state and resume --------------------------------------------------------------


class Memory(Plugin):
    """Counts turns in its state; records what session_start saw."""

    def __init__(self) -> None:
        self.starts: list[tuple[bool, tuple[str, ...], dict[str, Any]]] = []

    def session_start(self, ctx: PluginContext) -> None:
        self.starts.append((ctx.resumed, ctx.stripped, dict(ctx.state)))
        ctx.state.setdefault("turns", 0)
        ctx.state.setdefault("notes", [])

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] += 1
        ctx.state["notes"].append(messages[0].content)


STATE_KEYS = {
    "session_id",
    "messages",
    "usage",
    "metadata",
    "model",
    "instructions",
    "plugins",
    "provider_state",
    "turns",
}


def test_state_shape_and_codecs(start: Starter) -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    model = ScriptedModel(
        [
            ModelResponse(calls(call), Usage(3, 1), provider_state={"conversation": "abc"}),
            ModelResponse(Message.assistant("three"), Usage(5, 1)),
        ]
    )
    template = AgentTemplate(model=model, tools=[add], instructions="Be exact.", plugins=[Memory()])
    proxy = start(
        template, session_id="sess-42", metadata={"owner": "ada", "tags": ["x", "y"]}
    ).proxy()
    send(proxy, "add 1 and 2")

    state = proxy.state().get(timeout=WAIT)

    assert set(state) == STATE_KEYS
    assert state["session_id"] == "sess-42"
    assert state["model"] == "scripted"
    assert state["instructions"] == "Be exact."
    assert state["metadata"] == {"owner": "ada", "tags": ["x", "y"]}
    assert state["usage"] == Usage(8, 2).to_dict()
    assert state["plugins"] == {"memory": {"turns": 1, "notes": ["add 1 and 2"]}}
    # A later response without provider_state keeps the earlier one.
    assert state["provider_state"] == {"conversation": "abc"}
    assert state["turns"] == 1
    assert [Message.from_dict(m) for m in state["messages"]] == history(proxy)
    assert msgpack.unpackb(msgpack.packb(state)) == state
    assert json.loads(json.dumps(state)) == state


def test_state_of_a_new_session(start: Starter) -> None:
    state = start(AgentTemplate(model="echo")).proxy().state().get(timeout=WAIT)
    assert set(state) == STATE_KEYS
    assert len(state["session_id"]) >= 8
    assert state["messages"] == []
    assert state["usage"] == Usage().to_dict()
    assert state["metadata"] == {}
    assert state["model"] == "echo"
    assert state["instructions"] is None
    assert state["plugins"] == {}
    assert state["provider_state"] is None
    assert state["turns"] == 0


def test_session_ids_are_unique_by_default(start: Starter) -> None:
    ids = {start().proxy().state().get(timeout=WAIT)["session_id"] for _ in range(3)}
    assert len(ids) == 3


def test_state_is_a_copy(start: Starter) -> None:
    proxy = start(AgentTemplate(model=EchoModel(), plugins=[Memory()]), metadata={"k": [1]}).proxy()
    send(proxy, "hi")
    state = proxy.state().get(timeout=WAIT)
    state["plugins"]["memory"]["notes"].append("tampered")
    state["metadata"]["k"].append(2)
    state["messages"].clear()
    again = proxy.state().get(timeout=WAIT)
    assert again["plugins"]["memory"]["notes"] == ["hi"]
    assert again["metadata"] == {"k": [1]}
    assert len(again["messages"]) == 2


def test_restored_state_continues_the_session(start: Starter) -> None:
    memory = Memory()
    template = AgentTemplate(model=EchoModel(), instructions="sys", plugins=[memory])
    first_ref = start(template, session_id="resume-me", metadata={"user": "ada"})
    first = first_ref.proxy()
    send(first, "one")
    send(first, "two")
    saved = first.state().get(timeout=WAIT)
    saved_history = history(first)
    saved_usage = first.usage().get(timeout=WAIT)
    assert first_ref.stop(block=True, timeout=WAIT)
    saved = msgpack.unpackb(msgpack.packb(saved))  # as if read back from disk

    model = RecordingModel(EchoModel())
    resumed = start(
        AgentTemplate(model=model, instructions="sys", plugins=[memory]),
        restored_state=saved,
        stripped_fields=["plugins.memory.conn", "plugins.memory.pool.handle", "plugins.other.x"],
    ).proxy()

    assert memory.starts[0] == (False, (), {})
    resumed_flag, stripped, state_at_start = memory.starts[1]
    assert resumed_flag is True
    assert stripped == ("conn", "pool.handle")
    assert state_at_start == {"turns": 2, "notes": ["one", "two"]}

    assert history(resumed) == saved_history
    answer = send(resumed, "three")
    assert model.prompts[0] == [Message.system("sys"), *saved_history, Message.user("three")]
    assert history(resumed) == [*saved_history, Message.user("three"), answer]
    assert resumed.usage().get(timeout=WAIT) == saved_usage + answer_usage(model, answer)

    state = resumed.state().get(timeout=WAIT)
    assert state["session_id"] == "resume-me"
    assert state["metadata"] == {"user": "ada"}
    assert state["turns"] == 3
    assert state["plugins"]["memory"] == {"turns": 3, "notes": ["one", "two", "three"]}
    # The restored dict itself was not mutated by the resumed session.
    assert saved["plugins"]["memory"] == {"turns": 2, "notes": ["one", "two"]}


def answer_usage(model: RecordingModel, answer: Message) -> Usage:
    """Usage EchoModel reports for the last prompt and ``answer``: word counts of the
    messages after the prompt's last assistant message, and of the answer."""
    prompt = model.prompts[-1]
    last = max((i for i, m in enumerate(prompt) if m.role == "assistant"), default=-1)
    words = sum(len((m.content or "").split()) for m in prompt[last + 1 :])
    return Usage(words, len((answer.content or "").split()))


def test_restored_state_with_invalid_messages_is_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        AgentSession.start(AgentTemplate(), restored_state={"messages": [{"role": "robot"}]})


# -- templates and constructor validation --------------------------------------------


def test_template_rejects_duplicate_tool_names() -> None:
    @tool(name="add")
    def other(a: int) -> int:
        return a

    with pytest.raises(ValueError, match="two tools are named 'add'"):
        AgentTemplate(tools=[add, other])


def test_template_rejects_duplicate_plugin_names() -> None:
    log: HookLog = []
    with pytest.raises(ValueError, match="two plugins are named 'first'"):
        AgentTemplate(plugins=[First(log), First(log)])


def test_template_rejects_non_tools_and_non_plugins() -> None:
    def plain(a: int) -> int:
        return a

    with pytest.raises(TypeError, match="use @tool"):
        AgentTemplate(tools=[plain])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="Plugin instances"):
        AgentTemplate(plugins=[object()])  # type: ignore[list-item]


def test_template_normalises_sequences_and_model_string() -> None:
    template = AgentTemplate(model=ScriptedModel([]), tools=[add])
    assert template.tools == (add,)
    assert template.plugins == ()
    assert template.model_string == "scripted"
    assert AgentTemplate().model_string == "echo"


def test_model_string_resolved_through_registry(start: Starter) -> None:
    registry = ProviderRegistry()
    built: list[str] = []

    def factory(model_id: str) -> Model:
        built.append(model_id)
        return ScriptedModel([f"hello from {model_id}"])

    registry.register("work", "fake", factory)
    model_string = "registry:work:fake:m-1"
    proxy = start(AgentTemplate(model=model_string), providers=registry).proxy()
    assert send(proxy, "hi").content == "hello from m-1"
    assert built == ["m-1"]
    assert proxy.state().get(timeout=WAIT)["model"] == model_string


def test_missing_profile_fails_start_without_a_thread() -> None:
    before = set(threading.enumerate())
    with pytest.raises(RegistryProfileMissing) as info:
        AgentSession.start(AgentTemplate(model="registry:gone:fake:m"))
    assert info.value.profile == "gone"
    assert join_new_threads(before) == []


def test_explicit_model_overrides_template_model(start: Starter) -> None:
    proxy = start(AgentTemplate(model="registry:gone:fake:m"), model=ScriptedModel(["x"])).proxy()
    assert send(proxy, "hi").content == "x"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": -1}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"max_steps": 2.0}, "max_steps"),
        ({"event_buffer_size": 0}, "event_buffer_size"),
        ({"event_buffer_size": -5}, "event_buffer_size"),
        ({"max_steering_queue": 0}, "max_steering_queue"),
        ({"max_steering_queue": False}, "max_steering_queue"),
    ],
    ids=lambda v: repr(v) if isinstance(v, dict) else v,
)
def test_invalid_constructor_args(kwargs: dict[str, Any], parameter: str) -> None:
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match=f"^{parameter} must be a positive integer") as info:
        AgentSession.start(AgentTemplate(), **kwargs)
    assert repr(next(iter(kwargs.values()))) in str(info.value)
    assert join_new_threads(before) == []
    assert pykka.ActorRegistry.get_by_class(AgentSession) == []


# -- concurrency and thread hygiene ------------------------------------------------


def test_many_sessions_driven_concurrently(start: Starter) -> None:
    n_sessions, turns = 6, 15
    proxies = [
        start(AgentTemplate(model=EchoModel(), tools=[add])).proxy() for _ in range(n_sessions)
    ]
    go = threading.Barrier(n_sessions)

    def drive(index: int) -> list[str]:
        proxy = proxies[index]
        go.wait(WAIT)
        answers = []
        for turn in range(turns):
            if turn % 5 == 0:
                answers.append(send(proxy, f'/add {{"a": {index}, "b": {turn}}}').content or "")
            else:
                answers.append(send(proxy, f"s{index} t{turn}").content or "")
        return answers

    with ThreadPoolExecutor(n_sessions) as pool:
        futures = [pool.submit(drive, i) for i in range(n_sessions)]
        results = [f.result(timeout=WAIT * 4) for f in futures]

    for index, answers in enumerate(results):
        expected = [
            f"add returned: {index + turn}" if turn % 5 == 0 else f"echo: s{index} t{turn}"
            for turn in range(turns)
        ]
        assert answers == expected
        state = proxies[index].state().get(timeout=WAIT)
        assert state["turns"] == turns
        users = [m["content"] for m in state["messages"] if m["role"] == "user"]
        assert len(users) == turns


def test_one_session_serialises_concurrent_callers(start: Starter) -> None:
    ref = start()
    n_threads, turns = 5, 10
    go = threading.Barrier(n_threads)

    def caller(index: int) -> list[str]:
        proxy = ref.proxy()
        go.wait(WAIT)
        return [send(proxy, f"c{index}-{t}").content or "" for t in range(turns)]

    with ThreadPoolExecutor(n_threads) as pool:
        futures = [pool.submit(caller, i) for i in range(n_threads)]
        results = [f.result(timeout=WAIT * 4) for f in futures]

    for index, answers in enumerate(results):
        assert answers == [f"echo: c{index}-{t}" for t in range(turns)]
    messages = history(ref.proxy())
    assert len(messages) == 2 * n_threads * turns
    # Turns never interleave: every user message is directly followed by its echo.
    for user, assistant in zip(messages[::2], messages[1::2], strict=True):
        assert assistant.content == f"echo: {user.content}"


def test_thread_count_back_to_baseline_after_sessions_stop() -> None:
    baseline = set(threading.enumerate())
    log: HookLog = []
    template = AgentTemplate(model=EchoModel(), tools=[add], plugins=[First(log)])
    refs = [AgentSession.start(template) for _ in range(8)]
    assert threading.active_count() >= len(baseline) + 8
    for ref in refs:
        send(ref.proxy(), '/add {"a": 1, "b": 1}')
    for ref in refs:
        assert ref.stop(block=True, timeout=WAIT)

    assert join_new_threads(baseline) == []
    assert set(threading.enumerate()) == baseline
    assert log.count(("first", "session_end")) == 8
    assert pykka.ActorRegistry.get_by_class(AgentSession) == []


def test_stopped_session_refuses_calls(start: Starter) -> None:
    ref = start()
    proxy = ref.proxy()
    assert ref.stop(block=True, timeout=WAIT)
    with pytest.raises(pykka.ActorDeadError):
        send(proxy, "anyone?")


# -- failure details: end reasons, steering kept, unsubscribe -----------------------


def test_plugins_started_before_a_failed_start_end_with_reason_error() -> None:
    reasons: list[str] = []

    class Opens(Plugin):
        def session_end(self, ctx: PluginContext, reason: str) -> None:
            reasons.append(reason)

    class Fails(Plugin):
        def session_start(self, ctx: PluginContext) -> None:
            raise OSError("no disk")

    with pytest.raises(PluginError, match="'fails'"):
        AgentSession.start(AgentTemplate(plugins=[Opens(), Fails()]))
    assert reasons == ["error"]


def test_steering_taken_by_a_failed_turn_is_kept_for_the_next_turn(start: Starter) -> None:
    inner = ScriptedModel([RuntimeError("model is down"), "recovered"])
    model = RecordingModel(inner)
    proxy = start(AgentTemplate(model=model)).proxy()
    proxy.steer("be brief").get(timeout=WAIT)

    with pytest.raises(RuntimeError, match="model is down"):
        send(proxy, "one")
    assert history(proxy) == []

    send(proxy, "two")
    assert model.prompts[-1] == [Message.user("be brief"), Message.user("two")]


def test_unsubscribe_stops_delivery(start: Starter) -> None:
    seen: list[str] = []
    proxy = start().proxy()
    unsubscribe = proxy.subscribe(lambda e: seen.append(e.type)).get(timeout=WAIT)
    send(proxy, "one")
    count = len(seen)
    assert count > 0
    unsubscribe()
    send(proxy, "two")
    assert len(seen) == count


def test_send_message_form_runs_a_turn(start: Starter) -> None:
    ref = start()
    answer = ref.ask(Send("hello"), timeout=WAIT)
    assert answer == Message.assistant("echo: hello")
    with pytest.raises(TypeError, match="does not understand"):
        ref.ask("hello", timeout=WAIT)
    assert history(ref.proxy()) == [Message.user("hello"), answer]


def test_start_of_a_subclass_with_its_own_on_start_waits_through_the_inbox() -> None:
    """``start`` waits on ``on_start``'s own event only for this class's ``on_start``; a
    subclass's (which may never set it) is asked about through the inbox instead."""
    ran = threading.Event()

    class Own(AgentSession):
        def on_start(self) -> None:
            ran.set()  # neither super().on_start() nor the event: plugins not started

    class Counts(Plugin):
        pass

    ref = Own.start(AgentTemplate(plugins=[Counts()]))
    try:
        assert ran.is_set()
        assert ref.is_alive()
    finally:
        ref.stop(timeout=WAIT)


def test_a_failed_start_raises_at_once_not_after_start_timeout() -> None:
    class Fails(Plugin):
        def session_start(self, ctx: PluginContext) -> None:
            raise OSError("no disk")

    started = time.monotonic()
    with pytest.raises(PluginError, match="no disk"):
        AgentSession.start(AgentTemplate(plugins=[Fails()]))
    assert time.monotonic() - started < AgentSession.start_timeout / 2
