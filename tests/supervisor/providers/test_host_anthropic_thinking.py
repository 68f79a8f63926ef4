"""Extended thinking with tool use on the Anthropic adapter, in sessions of a host: the
API wants the thinking blocks of an answer that called tools back with the results."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import AgentTemplate, tool
from actors.adapters.anthropic_messages import AnthropicModel
from tests.providers.wire import ANTHROPIC, Raw, Text, WireServer
from tests.supervisor.host_helpers import HostFactory

THINKING = {"type": "thinking", "thinking": "1 plus 2: use the tool.", "signature": "sig-abc"}
REDACTED = {"type": "redacted_thinking", "data": "opaque-data"}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer(ANTHROPIC) as wire:
        yield wire


def _message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "wire-model",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }


def _thinking_then_a_call(stream: bool) -> Raw:
    call = {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1, "b": 2}}
    if not stream:
        return Raw(body=_message([THINKING, REDACTED, call]))
    text = THINKING["thinking"]
    return Raw(
        events=[
            {"type": "message_start", "message": _message([])},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
            *(
                {"type": "content_block_delta", "index": 0, "delta": delta}
                for delta in (
                    {"type": "thinking_delta", "thinking": text[:5]},
                    {"type": "thinking_delta", "thinking": text[5:]},
                    {"type": "signature_delta", "signature": THINKING["signature"]},
                )
            ),
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": REDACTED},
            {"type": "content_block_stop", "index": 1},
            {"type": "content_block_start", "index": 2, "content_block": {**call, "input": {}}},
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": 1, "b": 2}'},
            },
            {"type": "content_block_stop", "index": 2},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 3},
            },
            {"type": "message_stop"},
        ]
    )


@pytest.mark.parametrize("mode", ["thread", "process"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_thinking_blocks_go_back_with_the_tool_results(
    server: WireServer, make_host: HostFactory, mode: str, stream: bool
) -> None:
    host = make_host(**({} if mode == "thread" else {"workers": 1}))
    model = AnthropicModel(
        "wire-model",
        base_url=server.base_url,
        api_key="sk-wire",
        max_retries=0,
        stream=stream,
        options={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )
    try:
        sid = host.start_session(AgentTemplate(model=model, tools=[add]))
        server.script(_thinking_then_a_call(stream), Text("3"))
        assert host.send(sid, "1+2?").content == "3"
        with_results = server.requests[1].body["messages"]
        assert with_results[1] == {
            "role": "assistant",
            "content": [
                THINKING,
                REDACTED,
                {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
            ],
        }
        assert host.send(sid, "thanks").content == "echo: thanks"
        later = server.requests[2].body["messages"]
        assert [block["type"] for block in later[1]["content"]] == ["tool_use"]
    finally:
        model.close()
