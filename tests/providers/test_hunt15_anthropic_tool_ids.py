"""Tool-call ids the Anthropic Messages API refuses, found by a bug hunt.

The API takes a ``tool_use`` id (and a ``tool_result``'s ``tool_use_id``) only if it
matches ``^[a-zA-Z0-9_-]+$``. A session whose history holds ids another provider gave
(``call.1``, ``fc:abc``, ``toolu 1``, non-ASCII ones), resumed from a checkpoint on an
Anthropic model, sent them as they were: HTTP 400 on every later request, the session
stuck. Now the adapter sends such an id cleaned (readable, and made distinct by a digest
of the original), each ``tool_result`` under the id of its ``tool_use``; ids the API takes
go as they are, and the session's history keeps the originals.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ScriptedModel,
    ToolCall,
    tool,
)
from actors.adapters.anthropic_messages import AnthropicModel, anthropic_messages
from tests.providers.wire import Text, WireServer

ACCEPTED = re.compile(r"[a-zA-Z0-9_-]+")
"""What the Messages API takes as a tool_use id (its ``^[a-zA-Z0-9_-]+$``)."""

REFUSED_IDS = ["call.1", "fc:abc", "toolu 1", "appel_é", "a/b", "id\n", "", "\uff11"]


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _conversation(ids: list[str]) -> list[Message]:
    """A user's ask, one assistant answer calling ``add`` once per id, each call's
    result, and the model's answer and a new ask after them."""
    calls = tuple(ToolCall(cid, "add", {"a": n}) for n, cid in enumerate(ids))
    return [
        Message.user("go"),
        Message.assistant(None, calls),
        *(Message.tool(call, str(n + 1)) for n, call in enumerate(calls)),
        Message.assistant("done"),
        Message.user("again"),
    ]


def _blocks(messages: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == kind
    ]


def _sent_ids(messages: list[dict[str, Any]]) -> tuple[list[str], list[tuple[str, str]]]:
    """The tool_use ids, and each tool_result's (tool_use_id, content), in order."""
    uses = [b["id"] for b in _blocks(messages, "tool_use")]
    results = [(b["tool_use_id"], b["content"]) for b in _blocks(messages, "tool_result")]
    return uses, results


def _assert_sendable(messages: list[dict[str, Any]], count: int) -> list[str]:
    """Every id sent is one the API takes, distinct, and each result answers its call."""
    uses, results = _sent_ids(messages)
    assert len(uses) == count
    assert all(ACCEPTED.fullmatch(u) for u in uses), uses
    assert len(set(uses)) == len(uses), uses
    assert results == [(u, str(n + 1)) for n, u in enumerate(uses)]
    return uses


@pytest.mark.parametrize("refused", REFUSED_IDS, ids=repr)
def test_an_id_the_api_refuses_is_sent_as_one_it_takes(refused: str) -> None:
    uses = _assert_sendable(anthropic_messages(_conversation([refused, "toolu_ok"])), 2)

    assert uses[1] == "toolu_ok"


def test_ids_the_api_takes_go_as_they_are() -> None:
    ids = ["toolu_01A", "call_1", "x-y_Z9"]

    assert _assert_sendable(anthropic_messages(_conversation(ids)), 3) == ids


def test_distinct_ids_stay_distinct_once_cleaned() -> None:
    ids = ["call.1", "call:1", "call 1", "call_1", "call_1_"]

    uses = _assert_sendable(anthropic_messages(_conversation(ids)), 5)

    assert "call_1" in uses  # an id the API takes keeps it
    assert uses[3] == "call_1"


def test_an_id_cleaned_never_takes_one_another_call_has() -> None:
    ids = ["call.1"]
    cleaned = _sent_ids(anthropic_messages(_conversation(ids)))[0][0]

    uses = _assert_sendable(anthropic_messages(_conversation([*ids, cleaned])), 2)

    assert uses[1] == cleaned  # the call that had it keeps it
    assert uses[0] != cleaned


def test_a_cleaned_id_is_the_same_in_every_request() -> None:
    """The conversation is sent again on every request: its ids must not move as it
    grows (a result would answer another id, and the prompt cache would miss)."""
    first = _conversation(["call.1", "fc:2"])
    later = [
        *first,
        Message.assistant(None, (ToolCall("toolu 3", "add", {"a": 3}),)),
        Message.tool(ToolCall("toolu 3", "add", {"a": 3}), "4"),
    ]

    before = _sent_ids(anthropic_messages(first))[0]
    after = _sent_ids(anthropic_messages(later))[0]

    assert after[:2] == before
    assert all(ACCEPTED.fullmatch(u) for u in after)


def test_a_resumed_session_with_foreign_ids_goes_on_on_anthropic(anthropic: WireServer) -> None:
    """A history made on another provider, checkpointed and resumed on an Anthropic model:
    its request carries ids the API takes, and the history keeps the ids it had."""
    foreign: list[Message | str] = [
        Message.assistant(
            None, (ToolCall("call.1", "add", {"a": 0}), ToolCall("fc:abc", "add", {"a": 1}))
        ),
        "done",
    ]
    first = AgentSession(AgentTemplate(model=ScriptedModel(foreign), tools=[add]))
    first.send("go")
    state = first.snapshot().state
    anthropic.script(Text("still here"))
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)
    try:
        resumed = AgentSession(AgentTemplate(model=model, tools=[add]), restored_state=state)
        assert resumed.send("more").content == "still here"
    finally:
        model.close()

    _assert_sendable(anthropic.requests[-1].body["messages"], 2)
    stored = [c.id for m in resumed.history() for c in m.tool_calls]
    assert stored == ["call.1", "fc:abc"]


def test_the_adapter_sends_cleaned_ids(anthropic: WireServer) -> None:
    anthropic.script(Text("ok"))
    model = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)
    try:
        model.respond(ModelRequest(_conversation(["toolu 1", "fc:2"]), [add]))
    finally:
        model.close()

    _assert_sendable(anthropic.requests[-1].body["messages"], 2)
