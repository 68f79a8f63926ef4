"""Tool-call ids stay unique within a session's history, found by a bug hunt.

A model (or a provider: a Chat Completions server without ids gets ``call_<index>`` on
every answer) may return tool calls whose ids repeat, within one answer or reusing an id
of an earlier turn. They were stored as they came, and Anthropic's API refuses a
conversation holding two ``tool_use`` blocks of one id: HTTP 400 on every later request
of the session. Now the session gives a repeated id (or an empty one) a new id where the
answer enters the history, deterministically, and the tool's result answers the new id;
checkpoints and resumes keep them, and a resumed session still knows the ids in use.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ScriptedModel,
    Snapshot,
    ToolCall,
    TurnLimitExceeded,
    tool,
)
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.wire import ANTHROPIC, RESPONSES, Calls, Text, WireServer

WAIT = 10.0


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _calls(*pairs: tuple[str, int]) -> Message:
    return Message.assistant(None, tuple(ToolCall(cid, "add", {"a": a}) for cid, a in pairs))


def _run(script: list[Any], *texts: str, **options: Any) -> tuple[AgentSession, list[Message]]:
    """A session (not started: driven on this thread) on ``script``, after sending ``texts``."""
    session = AgentSession(AgentTemplate(model=ScriptedModel(script), tools=[add]), **options)
    for text in texts:
        session.send(text)
    return session, session.history()


def _call_ids(history: list[Message]) -> list[str]:
    return [call.id for m in history for call in m.tool_calls]


def _answers(history: list[Message]) -> list[tuple[str | None, str | None]]:
    return [(m.tool_call_id, m.content) for m in history if m.role == "tool"]


def _assert_paired(history: list[Message]) -> None:
    """Every call id appears once, and each tool message answers a call made before it."""
    ids = _call_ids(history)
    assert len(set(ids)) == len(ids), ids
    made: set[str] = set()
    for message in history:
        made.update(call.id for call in message.tool_calls)
        if message.role == "tool":
            assert message.tool_call_id in made


def test_a_repeated_id_within_one_answer_gets_a_new_one() -> None:
    _, history = _run([_calls(("c1", 1), ("c1", 2), ("c1", 3)), "done"], "go")

    assert _call_ids(history) == ["c1", "c1_2", "c1_3"]
    assert _answers(history) == [("c1", "2"), ("c1_2", "3"), ("c1_3", "4")]
    _assert_paired(history)


def test_an_id_of_an_earlier_turn_gets_a_new_one() -> None:
    script = [_calls(("call_0", 1)), "one", _calls(("call_0", 5), ("call_0_2", 6)), "two"]
    _, history = _run(script, "first", "second")

    assert _call_ids(history) == ["call_0", "call_0_2", "call_0_2_2"]
    assert _answers(history)[1:] == [("call_0_2", "6"), ("call_0_2_2", "7")]
    _assert_paired(history)


def test_an_empty_id_gets_one() -> None:
    _, history = _run([_calls(("", 1), ("", 2)), "done"], "go")

    assert _call_ids(history) == ["call_1", "call_2"]
    _assert_paired(history)


def test_the_published_events_carry_the_ids_in_the_history() -> None:
    session, _ = _run([_calls(("c1", 1), ("c1", 2)), "done"], "go")

    events = session.events().events
    response = next(e for e in events if e.type == "model_response")
    assert [c["id"] for c in response.data["tool_calls"]] == ["c1", "c1_2"]
    assert [e.data["id"] for e in events if e.type == "tool_call"] == ["c1", "c1_2"]
    assert [e.data["id"] for e in events if e.type == "tool_result"] == ["c1", "c1_2"]


def test_a_resumed_session_keeps_the_ids_and_knows_those_in_use() -> None:
    session, history = _run([_calls(("c1", 1), ("c1", 2)), "done"], "go")
    saved = Snapshot.deserialize(session.snapshot().serialize())
    assert _call_ids(saved.messages()) == ["c1", "c1_2"]

    resumed = AgentSession(
        AgentTemplate(model=ScriptedModel([_calls(("c1", 7)), "again"]), tools=[add]),
        restored_state=saved.state,
    )
    resumed.send("more")

    assert resumed.history()[: len(history)] == history
    assert _call_ids(resumed.history()) == ["c1", "c1_2", "c1_3"]
    _assert_paired(resumed.history())


def test_ids_of_a_rolled_back_turn_are_free_again() -> None:
    session = AgentSession(
        AgentTemplate(
            model=ScriptedModel([_calls(("c1", 1)), _calls(("c1", 2)), "done"]), tools=[add]
        ),
        max_steps=1,
    )
    with pytest.raises(TurnLimitExceeded):
        session.send("fails")  # its call (c1) is rolled back with the turn
    assert session.history() == []
    session.max_steps = 8

    session.send("works")

    assert _call_ids(session.history()) == ["c1"]


@pytest.fixture
def anthropic() -> Iterator[WireServer]:
    with WireServer(ANTHROPIC) as server:
        yield server


def test_an_anthropic_request_never_holds_a_tool_use_id_twice(anthropic: WireServer) -> None:
    anthropic.script(
        Calls([("toolu_1", "add", {"a": 1})]),
        Text("two"),
        Calls([("toolu_1", "add", {"a": 5}), ("toolu_1", "add", {"a": 6})]),
        Text("six and seven"),
    )
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add]))
    try:
        proxy = ref.proxy()
        proxy.send("one").get(timeout=WAIT)
        assert proxy.send("two").get(timeout=WAIT).content == "six and seven"
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()

    blocks = [
        block
        for message in anthropic.requests[-1].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
    ]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    results = [(b["tool_use_id"], b["content"]) for b in blocks if b["type"] == "tool_result"]
    assert uses == ["toolu_1", "toolu_1_2", "toolu_1_3"]
    assert results == [("toolu_1", "2"), ("toolu_1_2", "6"), ("toolu_1_3", "7")]


@pytest.fixture
def responses() -> Iterator[WireServer]:
    with WireServer(RESPONSES) as server:
        yield server


def test_a_responses_request_after_a_new_id_sends_what_it_answers(responses: WireServer) -> None:
    """The server holds the answer under its own ids: the results of renamed calls go with
    the whole conversation (no ``previous_response_id``), so each refers to a call sent."""
    responses.script(
        Calls([("c1", "add", {"a": 1})]),
        Text("two"),
        Calls([("c1", "add", {"a": 5})]),
        Text("six"),
    )
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="k", max_retries=0
    )
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add]))
    try:
        proxy = ref.proxy()
        proxy.send("one").get(timeout=WAIT)
        assert proxy.send("two").get(timeout=WAIT).content == "six"
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()

    last = responses.requests[-1].body
    assert "previous_response_id" not in last
    calls = [i["call_id"] for i in last["input"] if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in last["input"] if i.get("type") == "function_call_output"]
    assert calls == outputs == ["c1", "c1_2"]
