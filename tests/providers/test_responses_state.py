"""The Responses adapter continues on the server's state with ``previous_response_id``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors import Message, ModelRequest, ModelResponse, ToolCall
from actors.adapters.openai_responses import OpenAIResponsesModel, ends_digest, unsent
from tests.providers.wire import RESPONSES, Calls, Text, WireServer


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with WireServer(RESPONSES) as server:
        yield server


@pytest.fixture
def model(wire: WireServer) -> Iterator[OpenAIResponsesModel]:
    adapter = OpenAIResponsesModel(
        "wire-model", base_url=wire.base_url, api_key="sk-wire", max_retries=0
    )
    yield adapter
    adapter.close()


def _call(
    model: OpenAIResponsesModel, messages: list[Message], state: dict[str, object] | None
) -> ModelResponse:
    return model.respond(
        ModelRequest([Message.system("Be brief."), *messages], provider_state=state)
    )


def test_each_call_sends_what_the_server_lacks_and_the_id_it_continues(
    wire: WireServer, model: OpenAIResponsesModel
) -> None:
    wire.script(Calls([("c1", "add", {"a": 1, "b": 2})]), Text("3"), Text("bye"))
    history = [Message.user("1+2?")]
    first = _call(model, history, None)
    assert first.provider_state == {
        "previous_response_id": "resp_1",
        "covers": 2,
        "ends": ends_digest(history[0], first.message),
    }
    history += [first.message, Message("tool", "3", tool_call_id="c1", name="add")]
    second = _call(model, history, first.provider_state)
    history += [second.message, Message.user("thanks")]
    _call(model, history, second.provider_state)
    bodies = [r.body for r in wire.requests]
    assert "previous_response_id" not in bodies[0]
    assert bodies[1]["previous_response_id"] == "resp_1"
    assert bodies[1]["input"] == [{"type": "function_call_output", "call_id": "c1", "output": "3"}]
    assert bodies[2]["previous_response_id"] == "resp_2"
    assert bodies[2]["input"] == [{"role": "user", "content": "thanks"}]
    assert all(body["instructions"] == "Be brief." for body in bodies)  # never carried over


def test_a_state_that_does_not_match_the_conversation_sends_it_all() -> None:
    conversation = [Message.user("a"), Message.assistant("b"), Message.user("c")]
    state = {"previous_response_id": "resp_9", "covers": 2}
    assert unsent(conversation, state) == ("resp_9", conversation[2:])
    for bad in (
        {"previous_response_id": "resp_9", "covers": 3},  # ends on a user message
        {"previous_response_id": "resp_9", "covers": 7},  # rolled back below it
        {"previous_response_id": 5, "covers": 2},
        {"covers": 2},
        None,
    ):
        assert unsent(conversation, bad) == (None, conversation)


def test_an_assistant_message_with_text_and_calls_maps_to_both(
    wire: WireServer, model: OpenAIResponsesModel
) -> None:
    both = Message.assistant("Let me add.", (ToolCall("c1", "add", {"a": 1}),))
    _call(model, [Message.user("go"), both, Message("tool", "1", tool_call_id="c1")], None)
    assert wire.requests[0].body["input"][1:3] == [
        {"role": "assistant", "content": "Let me add."},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1}'},
    ]


def test_a_prompt_rewritten_at_its_start_is_sent_whole(
    wire: WireServer, model: OpenAIResponsesModel
) -> None:
    # A plugin that puts retrieved context first, or drops the oldest messages: with the
    # old id the server would answer from what it held, without the rewrite.
    wire.script(Text("Paris."), Text("Lyon."), Text("Nice."))
    asked = [Message.user("context: France"), Message.user("capital?")]
    first = _call(model, asked, None)
    assert first.provider_state is not None
    history = [*asked, first.message, Message.user("second city?")]
    second = _call(model, history, first.provider_state)
    rewritten = [Message.user("context: Rhône"), *history[1:], second.message]
    rewritten.append(Message.user("and the third?"))
    _call(model, rewritten, second.provider_state)
    bodies = [r.body for r in wire.requests]
    assert bodies[1]["previous_response_id"] == "resp_1"  # nothing rewritten: continued
    assert bodies[1]["input"] == [{"role": "user", "content": "second city?"}]
    assert "previous_response_id" not in bodies[2]
    assert bodies[2]["input"][0] == {"role": "user", "content": "context: Rhône"}
    assert len(bodies[2]["input"]) == len(rewritten)
    old_state = {"previous_response_id": "resp_2", "covers": 5}  # written before "ends"
    assert unsent(rewritten, old_state) == ("resp_2", rewritten[5:])
