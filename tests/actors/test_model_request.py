"""The one-argument model form: ``respond(request)``, streaming deltas, credentials."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pykka
import pytest

from actors import (
    INVALID_ARGUMENTS,
    AgentSession,
    AgentTemplate,
    Credentials,
    Delta,
    Event,
    GenerateModel,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    RespondModel,
    StreamAssembler,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    Usage,
    parse_tool_arguments,
    tool,
)

WAIT = 5.0

Starter = Callable[..., "pykka.ActorRef[AgentSession]"]


@pytest.fixture
def start() -> Iterator[Starter]:
    refs: list[pykka.ActorRef[AgentSession]] = []

    def _start(model: Model, **kwargs: Any) -> pykka.ActorRef[AgentSession]:
        tools = kwargs.pop("tools", [add])
        ref = AgentSession.start(
            AgentTemplate(model=model, tools=tools, instructions="Be brief."), **kwargs
        )
        refs.append(ref)
        return ref

    yield _start
    for ref in refs:
        ref.stop(block=True, timeout=WAIT)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Respond:
    """A ``respond`` model that plays a script of functions of the request, and keeps
    what each request carried (copied: the request belongs to its call)."""

    def __init__(self, *steps: Callable[[ModelRequest], ModelResponse]) -> None:
        self.steps = list(steps)
        self.seen: list[dict[str, Any]] = []

    def respond(self, request: ModelRequest) -> ModelResponse:
        self.seen.append(
            {
                "messages": list(request.messages),
                "tools": [t.name for t in request.tools],
                "session_id": request.session_id,
                "tenant_id": request.tenant_id,
                "provider_state": request.provider_state,
                "credentials": request.credentials,
            }
        )
        return self.steps.pop(0)(request)


def answer(text: str, state: dict[str, Any] | None = None) -> Callable[..., ModelResponse]:
    return lambda _request: ModelResponse(Message.assistant(text), Usage(3, 1), state, "stop")


def stream(*deltas: Delta, fail: BaseException | None = None) -> Callable[..., ModelResponse]:
    def run(request: ModelRequest) -> ModelResponse:
        for delta in deltas:
            request.emit(delta)
        if fail is not None:
            raise fail
        return ModelResponse(request.streamed_message(), Usage(5, 2, 1, 1), stop_reason="stop")

    return run


def send(ref: pykka.ActorRef[AgentSession], text: str) -> Message:
    answer: Message = ref.proxy().send(text).get(timeout=WAIT)
    return answer


def events(ref: pykka.ActorRef[AgentSession]) -> list[Event]:
    return list(ref.proxy().events().get(timeout=WAIT).events)


def test_both_forms_are_models_and_respond_wins_when_a_model_has_both(start: Starter) -> None:
    class Both(Respond):
        def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
            raise AssertionError("generate is not called when respond exists")

    model = Both(answer("from respond"))
    assert isinstance(model, RespondModel)
    assert isinstance(model, GenerateModel)
    assert isinstance(model, Model)  # the union works at runtime
    assert send(start(model), "hi").content == "from respond"


def test_a_request_carries_identity_tools_provider_state_and_credentials(start: Starter) -> None:
    model = Respond(answer("one", {"response_id": "r1"}), answer("two"), answer("three"))
    keys = Credentials(api_key="sk-test-1234567890abcdef", headers={"X-Org": "acme"})
    ref = start(model, session_id="s1", metadata={"tenant_id": "acme"}, credentials=keys)
    for text in ("a", "b", "c"):
        send(ref, text)
    first, second, third = model.seen
    assert first["session_id"] == "s1"
    assert first["tenant_id"] == "acme"
    assert first["tools"] == ["add"]
    assert first["credentials"] is keys
    assert first["provider_state"] is None
    assert second["provider_state"] == {"response_id": "r1"}
    # ``None`` in a response keeps the state the session has
    assert third["provider_state"] == {"response_id": "r1"}
    assert [m.role for m in second["messages"]] == ["system", "user", "assistant", "user"]


def test_credentials_are_never_in_the_state_or_a_snapshot(start: Starter) -> None:
    secret = "sk-never-persist-0123456789"
    keys = Credentials(api_key=secret, headers={"X-Gateway-Key": "gw-secret-77"})
    ref = start(Respond(answer("ok")), credentials=keys)
    send(ref, "hi")
    data = ref.proxy().snapshot().get(timeout=WAIT).serialize()
    assert secret.encode() not in data
    assert b"gw-secret-77" not in data
    assert secret not in repr(keys)
    assert "gw-secret-77" not in repr(keys)


def test_provider_state_comes_back_after_a_resume(start: Starter) -> None:
    first = start(Respond(answer("one", {"response_id": "r9"})))
    send(first, "a")
    snap = first.proxy().snapshot().get(timeout=WAIT)
    model = Respond(answer("two"))
    second = start(model, restored_state=snap.state)
    send(second, "b")
    assert model.seen[0]["provider_state"] == {"response_id": "r9"}


def test_streamed_deltas_are_published_in_order_before_the_response(start: Starter) -> None:
    model = Respond(stream(TextDelta("Hel"), TextDelta("lo"), TextDelta(" there")))
    ref = start(model)
    seen: list[Event] = []
    ref.proxy().subscribe(seen.append).get(timeout=WAIT)
    assert send(ref, "hi").content == "Hello there"
    kinds = [e.type for e in seen]
    assert kinds == ["turn_started", "delta", "delta", "delta", "model_response", "turn_finished"]
    assert [e.data for e in seen[1:4]] == [
        {"kind": "text", "text": "Hel"},
        {"kind": "text", "text": "lo"},
        {"kind": "text", "text": " there"},
    ]
    assert seen[4].data["usage"] == Usage(5, 2, 1, 1).to_dict()
    assert seen[4].data["stop_reason"] == "stop"
    assert [e.seq for e in events(ref)] == [e.seq for e in seen]
    assert ref.proxy().usage().get(timeout=WAIT) == Usage(5, 2, 1, 1)


def test_deltas_reach_subscribers_while_the_model_still_runs(start: Starter) -> None:
    got_first = threading.Event()
    release = threading.Event()

    def slow(request: ModelRequest) -> ModelResponse:
        request.emit(TextDelta("first"))
        assert release.wait(WAIT), "the subscriber never saw the first delta"
        request.emit(TextDelta(" second"))
        return ModelResponse(request.streamed_message())

    ref = start(Respond(slow))

    def watch(event: Event) -> None:
        if event.type == "delta" and event.data["text"] == "first":
            got_first.set()
            release.set()

    ref.proxy().subscribe(watch).get(timeout=WAIT)
    assert send(ref, "go").content == "first second"
    assert got_first.is_set()


def test_parallel_tool_call_deltas_are_assembled_and_run(start: Starter) -> None:
    model = Respond(
        stream(
            ToolCallDelta(0, "call_a", "add", '{"a": 1'),
            ToolCallDelta(1, "call_b", "add", '{"a": 10,'),
            ToolCallDelta(0, arguments=', "b": 2}'),
            ToolCallDelta(1, arguments=' "b": 20}'),
        ),
        answer("3 and 30"),
    )
    ref = start(model)
    assert send(ref, "add twice").content == "3 and 30"
    history = ref.proxy().history().get(timeout=WAIT)
    assert history[1].tool_calls == (
        ToolCall("call_a", "add", {"a": 1, "b": 2}),
        ToolCall("call_b", "add", {"a": 10, "b": 20}),
    )
    assert [(m.tool_call_id, m.content) for m in history[2:4]] == [
        ("call_a", "3"),
        ("call_b", "30"),
    ]
    deltas = [e.data for e in events(ref) if e.type == "delta"]
    assert deltas[0] == {
        "kind": "tool_call",
        "index": 0,
        "id": "call_a",
        "name": "add",
        "arguments": '{"a": 1',
    }


def test_a_stream_that_breaks_off_halfway_rolls_the_turn_back(start: Starter) -> None:
    model = Respond(
        answer("first"), stream(TextDelta("par"), TextDelta("tial"), fail=OSError("cut"))
    )
    ref = start(model)
    send(ref, "one")
    before = ref.proxy().history().get(timeout=WAIT)
    with pytest.raises(OSError, match="cut"):
        send(ref, "two")
    assert ref.proxy().history().get(timeout=WAIT) == before
    kinds = [e.type for e in events(ref)][-4:]
    assert kinds == ["turn_started", "delta", "delta", "error"]


def test_a_tool_call_with_unreadable_arguments_is_not_run(start: Starter) -> None:
    ran: list[int] = []

    @tool
    def record(n: int) -> int:
        """Record a number."""
        ran.append(n)
        return n

    model = Respond(stream(ToolCallDelta(0, "c1", "record", '{"n": 1')), answer("sorry"))
    ref = start(model, tools=[record])
    assert send(ref, "go").content == "sorry"
    assert ran == []
    result = ref.proxy().history().get(timeout=WAIT)[2]
    assert result.role == "tool"
    assert "not a JSON object" in (result.content or "")
    assert model.seen[1]["messages"][-1] == result


def test_parse_tool_arguments() -> None:
    assert parse_tool_arguments('{"a": 1}') == {"a": 1}
    assert parse_tool_arguments("") == {}
    assert parse_tool_arguments(None) == {}
    assert parse_tool_arguments("[1]") == {INVALID_ARGUMENTS: "[1]"}
    assert parse_tool_arguments("{oops") == {INVALID_ARGUMENTS: "{oops"}


def test_the_assembler_refuses_a_tool_call_without_a_name() -> None:
    assembler = StreamAssembler()
    assembler.add(ToolCallDelta(0, "c1", None, "{}"))
    with pytest.raises(ValueError, match="never got a name"):
        assembler.message()
    empty = StreamAssembler()
    assert empty.message() == Message.assistant(None)


def test_streamed_message_without_deltas_says_so() -> None:
    request = ModelRequest([Message.user("hi")])
    assert not request.streamed
    with pytest.raises(ValueError, match="emitted no delta"):
        request.streamed_message()
    request.emit(TextDelta("x"))
    assert request.streamed
    assert request.streamed_message() == Message.assistant("x")


def test_credentials_validate_their_fields() -> None:
    with pytest.raises(TypeError, match="api_key"):
        Credentials(api_key=b"sk-bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be empty"):
        Credentials(api_key="")
    with pytest.raises(TypeError, match="headers"):
        Credentials(headers={"X-Count": 1})  # type: ignore[dict-item]
