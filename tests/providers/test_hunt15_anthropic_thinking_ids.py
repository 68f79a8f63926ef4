"""An answer's thinking blocks go back with that answer when its call got a new id, found by
a bug hunt.

With extended thinking the Messages API wants the thinking blocks of an answer that called
tools back, first in that assistant message. The adapter keeps them in the provider state
with the answer's first call id and put them before the message whose first call has that
id. But the session gives a call a new id where the answer enters its history when the id
is already there (``actors._call_ids``): a compatible server without ids gets ``call_0``
on every answer, so the second answer's call is ``call_0_2`` in the history. Its thinking
went to the first answer instead (whose call is ``call_0``), and the answer it belongs to
went without it. Now the blocks go with the conversation's last assistant message that
called tools, when its first call has the id kept or one the session made of it.
"""

from __future__ import annotations

from typing import Any

from actors import AgentSession, AgentTemplate, Message, ToolCall, tool
from actors.adapters.anthropic_messages import AnthropicModel, anthropic_messages
from tests.providers.wire import Raw, Text, WireServer

WAIT = 10.0
THINKING = {"thinking": {"type": "enabled", "budget_tokens": 1024}}


@tool
def add(a: int) -> int:
    """Add one."""
    return a + 1


def _thought(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": f"sig-{text}"}


def _thinking_then_call(text: str, a: int) -> Raw:
    """An answer that thinks ``text`` and calls ``add(a)`` without an id (a compatible
    server's): the adapter names the call ``call_0``."""
    call = {"type": "tool_use", "name": "add", "input": {"a": a}}
    return Raw(
        body={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "wire-model",
            "content": [_thought(text), call],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )


def _thinking_in(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return []
    return [b["thinking"] for b in content if b["type"] == "thinking"]


def test_thinking_goes_with_the_answer_whose_call_got_a_new_id(anthropic: WireServer) -> None:
    anthropic.script(
        _thinking_then_call("first", 1),
        Text("two"),
        _thinking_then_call("second", 5),
        Text("six"),
    )
    model = AnthropicModel(
        "wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0, options=THINKING
    )
    ref = AgentSession.start(AgentTemplate(model=model, tools=[add]))
    try:
        proxy = ref.proxy()
        proxy.send("one").get(timeout=WAIT)
        assert proxy.send("two").get(timeout=WAIT).content == "six"
    finally:
        ref.stop(block=True, timeout=WAIT)
        model.close()

    sent = anthropic.requests[-1].body["messages"]
    assistants = [m for m in sent if m["role"] == "assistant"]
    assert [_thinking_in(m) for m in assistants] == [[], [], ["second"]]
    last = assistants[-1]["content"]
    assert [b["type"] for b in last] == ["thinking", "tool_use"]
    assert last[1]["id"] == "call_0_2"


def _called(call_id: str) -> list[Message]:
    call = ToolCall(call_id, "add", {"a": 1})
    return [Message.assistant(None, (call,)), Message.tool(call, "2")]


def test_thinking_goes_only_with_the_last_answer_that_called_tools() -> None:
    conversation = [Message.user("go"), *_called("c1"), Message.assistant("one")]
    conversation += [Message.user("again"), *_called("c1_2")]
    state = {"thinking": [_thought("kept")], "before": "c1"}

    sent = anthropic_messages(conversation, state)

    assistants = [m for m in sent if m["role"] == "assistant"]
    assert [_thinking_in(m) for m in assistants] == [[], [], ["kept"]]


def test_thinking_is_left_out_when_the_last_call_is_another_answers() -> None:
    """A last call whose id is neither the one kept nor made of it (a plugin rewrote the
    answer, say): the blocks belong to no message sent, and go nowhere, as before."""
    conversation = [Message.user("go"), *_called("c1"), Message.user("again"), *_called("c10")]
    state = {"thinking": [_thought("kept")], "before": "c1"}

    sent = anthropic_messages(conversation, state)

    assert [_thinking_in(m) for m in sent if m["role"] == "assistant"] == [[], []]
