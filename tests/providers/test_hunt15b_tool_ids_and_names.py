"""Tool-call ids and tool names in a history that a provider refuses, found by a bug hunt.

Chat Completions refuses a ``tool_calls[].id`` (and a tool message's ``tool_call_id``)
longer than 40 characters, the Responses API a ``call_id`` longer than 64; ids the
Responses API gives (``fc_...``), other providers' or those the session lengthens
(``<id>_2``, see ``actors._call_ids``) went as they were, and every later request of the
session failed with HTTP 400. So did a call whose NAME the providers refuse (they take
``^[a-zA-Z0-9_-]{1,64}$``): a model may call ``functions.add`` or ``add numbers``, the
session answers "unknown tool", and the call stays in the history. Now each adapter sends
such ids shortened and such names cleaned, in the request only; the history keeps the
originals, and the template's own tool names go as they are.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ScriptedModel,
    ToolCall,
    tool,
)
from actors.adapters.anthropic_messages import anthropic_messages
from actors.adapters.openai_chat import chat_messages
from actors.adapters.openai_responses import OpenAIResponsesModel, responses_input
from tests.providers.flavours import AdapterFactory, Flavour
from tests.providers.wire import Calls, Text, WireServer

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""The tool names OpenAI and Anthropic take (``^[a-zA-Z0-9_-]{1,64}$``)."""

ID_RULES = {
    "chat": re.compile(r".{1,40}", re.DOTALL),
    "responses": re.compile(r".{1,64}", re.DOTALL),
    "anthropic": re.compile(r"[a-zA-Z0-9_-]+"),
}
"""The tool-call ids each API takes."""

FC_ID = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"
"""A Responses API item id (53 characters), as some libraries pass on as a call id."""

REFUSED_NAMES = ["functions.add", "add numbers", "tool:x", "n" * 70, "outil_é", ""]


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _conversation(calls: list[tuple[str, str]]) -> list[Message]:
    """A user's ask, one answer calling tools (``(id, name)`` each), each call's result,
    then the model's answer and a new ask."""
    made = tuple(ToolCall(cid, name, {"a": n}) for n, (cid, name) in enumerate(calls))
    return [
        Message.user("go"),
        Message.assistant(None, made),
        *(Message.tool(call, str(n + 1)) for n, call in enumerate(made)),
        Message.assistant("done"),
        Message.user("again"),
    ]


def _sent(kind: str, body: dict[str, Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """The ``(id, name)`` of each tool call a request of API ``kind`` sent, and the id
    each tool result answers, in order."""
    if kind == "chat":
        messages = body["messages"]
        calls = [
            (c["id"], c["function"]["name"]) for m in messages for c in m.get("tool_calls") or ()
        ]
        return calls, [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    if kind == "responses":
        items = body["input"]
        calls = [(i["call_id"], i["name"]) for i in items if i.get("type") == "function_call"]
        outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
        return calls, outputs
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    calls = [(b["id"], b["name"]) for b in blocks if b["type"] == "tool_use"]
    return calls, [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]


def _assert_sendable(kind: str, body: dict[str, Any], count: int) -> list[tuple[str, str]]:
    """Every call of the request has an id and a name API ``kind`` takes, the ids are
    distinct, and the results answer the calls in order."""
    calls, results = _sent(kind, body)
    ids = [cid for cid, _ in calls]
    assert len(calls) == count
    assert all(ID_RULES[kind].fullmatch(cid) for cid in ids), ids
    assert all(NAME.fullmatch(name) for _, name in calls), calls
    assert len(set(ids)) == len(ids), ids
    assert results == ids
    return calls


def _chat_ids(messages: list[Message]) -> list[str]:
    return [cid for cid, _ in _sent("chat", {"messages": chat_messages(messages)})[0]]


# -- Chat Completions: ids longer than 40 characters ------------------------------------


@pytest.mark.parametrize(
    "long_id",
    [FC_ID, "call_" + "x" * 36, "call_" + "y" * 35 + "_2", "é" * 41],
    ids=["fc-item", "41-chars", "renamed", "non-ascii"],
)
def test_chat_sends_an_id_longer_than_40_characters_shortened(long_id: str) -> None:
    body = {"messages": chat_messages(_conversation([(long_id, "add"), ("call_ok", "add")]))}

    calls = _assert_sendable("chat", body, 2)

    assert calls[1] == ("call_ok", "add")


def test_chat_sends_ids_of_40_characters_as_they_are() -> None:
    ids = ["x" * 40, "call_1", "toolu 1.é"]

    assert _chat_ids(_conversation([(cid, "add") for cid in ids])) == ids


def test_chat_keeps_long_ids_with_one_start_apart() -> None:
    ids = ["call_" + "z" * 40 + suffix for suffix in ("", "_2", "_3", "a")]

    calls = _assert_sendable(
        "chat", {"messages": chat_messages(_conversation([(i, "add") for i in ids]))}, 4
    )

    assert len({cid for cid, _ in calls}) == 4


def test_chat_shortened_id_never_takes_one_another_call_has() -> None:
    shortened = _chat_ids(_conversation([(FC_ID, "add")]))[0]

    ids = _chat_ids(_conversation([(FC_ID, "add"), (shortened, "add")]))

    assert ids[1] == shortened  # the call that has it keeps it
    assert ids[0] != shortened
    assert all(len(cid) <= 40 for cid in ids)


def test_chat_shortened_id_is_the_same_in_every_request() -> None:
    """The conversation goes again with every request: a shortened id must not move as it
    grows (a result would answer another call, the prompt cache would miss)."""
    first = _conversation([(FC_ID, "add"), ("call_" + "w" * 50, "add")])
    later_call = ToolCall("fc_" + "9" * 60, "add", {"a": 3})
    later = [*first, Message.assistant(None, (later_call,)), Message.tool(later_call, "4")]

    before, after = _chat_ids(first), _chat_ids(later)

    assert after[:2] == before
    assert all(len(cid) <= 40 for cid in after)


# -- Tool names the providers refuse --------------------------------------------------------

MAPPINGS = {
    "chat": lambda messages: {"messages": chat_messages(messages)},
    "responses": lambda messages: {"input": responses_input(messages)},
    "anthropic": lambda messages: {"messages": anthropic_messages(messages)},
}


@pytest.mark.parametrize("kind", sorted(MAPPINGS))
@pytest.mark.parametrize("refused", REFUSED_NAMES, ids=repr)
def test_a_name_the_providers_refuse_is_sent_cleaned(kind: str, refused: str) -> None:
    body = MAPPINGS[kind](_conversation([("call_1", refused), ("call_2", "add")]))

    calls = _assert_sendable(kind, body, 2)

    assert calls[1] == ("call_2", "add")  # a template's tool goes as it is


@pytest.mark.parametrize("kind", sorted(MAPPINGS))
def test_a_cleaned_name_is_the_same_in_every_request(kind: str) -> None:
    first = _sent(kind, MAPPINGS[kind](_conversation([("call_1", "functions.add")])))[0]
    again = _sent(kind, MAPPINGS[kind](_conversation([("call_1", "functions.add")])))[0]

    assert first == again
    assert first[0][1] != "functions.add"


@pytest.mark.parametrize("kind", sorted(MAPPINGS))
def test_names_the_providers_take_go_as_they_are(kind: str) -> None:
    names = ["add", "a-b_C9", "n" * 64]

    calls = _sent(kind, MAPPINGS[kind](_conversation([(f"c{n}", x) for n, x in enumerate(names)])))[
        0
    ]

    assert [name for _, name in calls] == names


# -- Through a session, on every adapter ----------------------------------------------------


def test_a_resumed_history_goes_on_with_ids_and_names_the_provider_takes(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    """A history made elsewhere (long ids, calls to tools that do not exist), checkpointed
    and resumed on each adapter: its request carries ids and names the API takes, and the
    history keeps what it had."""
    calls = (
        ToolCall(FC_ID, "functions.add", {"a": 0}),
        ToolCall("call_" + "q" * 70, "add numbers", {"a": 1}),
        ToolCall("call_ok", "add", {"a": 2}),
    )
    first = AgentSession(
        AgentTemplate(model=ScriptedModel([Message.assistant(None, calls), "done"]), tools=[add])
    )
    first.send("go")
    state = first.snapshot().state
    server.script(Text("still here"))

    resumed = AgentSession(AgentTemplate(model=make_adapter(), tools=[add]), restored_state=state)
    assert resumed.send("more").content == "still here"

    sent = _assert_sendable(flavour.name, server.requests[-1].body, 3)
    assert sent[2] == ("call_ok", "add")
    stored = [(c.id, c.name) for m in resumed.history() for c in m.tool_calls]
    assert stored == [(c.id, c.name) for c in calls]
    unknown = next(m.content for m in resumed.history() if m.role == "tool")
    assert "unknown tool 'functions.add'" in (unknown or "")


def test_a_call_to_an_unknown_tool_does_not_fail_the_next_request(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    """The model calls a tool by a name the providers refuse (and with a Responses item id
    as the call id): the session answers "unknown tool", and the request that carries that
    answer is one the API takes."""
    server.script(
        Calls([(FC_ID, "functions.add", {"a": 1}), ("call_2", "add", {"a": 2})]),
        Text("sorry"),
    )
    session = AgentSession(AgentTemplate(model=make_adapter(), tools=[add]))

    assert session.send("go").content == "sorry"

    calls, results = _sent(flavour.name, server.requests[-1].body)
    assert all(NAME.fullmatch(name) for _, name in calls), calls
    assert all(ID_RULES[flavour.name].fullmatch(cid) for cid in results), results
    assert [(c.id, c.name) for m in session.history() for c in m.tool_calls] == [
        (FC_ID, "functions.add"),
        ("call_2", "add"),
    ]


def test_responses_continuing_sends_the_server_the_ids_it_gave(responses: WireServer) -> None:
    """Continuing from ``previous_response_id``, the results answer calls the server holds
    under the ids it gave: they go as they are (a shortened one would answer no call)."""
    own = "call_" + "r" * 70
    responses.script(Calls([(own, "add", {"a": 1})]), Text("done"))
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="k", max_retries=0
    )
    try:
        session = AgentSession(AgentTemplate(model=model, tools=[add]))
        assert session.send("go").content == "done"
    finally:
        model.close()

    body = responses.requests[-1].body
    assert body.get("previous_response_id")
    assert _sent("responses", body)[1] == [own]
