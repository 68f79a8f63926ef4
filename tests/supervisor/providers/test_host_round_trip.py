"""A session on a model string of a built-in provider survives a host restart: three tool
turns, a checkpoint, a new host, a resume, and the next request the server gets carries
the whole conversation, mapped as the provider expects (for the Responses API: the id to
continue from, and only what the server lacks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors import AgentTemplate, Message, ProviderRegistry, ToolCall, tool
from tests.providers.expected import expected_conversation
from tests.providers.flavours import Flavour
from tests.providers.wire import Calls, Text, WireServer
from tests.supervisor.host_helpers import HostFactory


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _registry(flavour: Flavour, server: WireServer) -> ProviderRegistry:
    registry = ProviderRegistry()
    registry.register(
        "wire",
        flavour.provider,
        api=flavour.api,
        base_url=server.base_url,
        api_key="sk-wire",
        max_retries=0,
    )
    return registry


def _turns() -> list[Message]:
    """The conversation three tool turns leave (without the system prompt)."""
    history: list[Message] = []
    for i in (1, 2, 3):
        call = ToolCall(f"c{i}", "add", {"a": i, "b": i})
        history += [
            Message.user(f"add {i} and {i}"),
            Message.assistant(None, (call,)),
            Message("tool", str(2 * i), tool_call_id=call.id, name="add"),
            Message.assistant(f"it is {2 * i}"),
        ]
    return history


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_the_conversation_survives_a_host_restart(
    flavour: Flavour, server: WireServer, make_provider_host: HostFactory, tmp_path: Path
) -> None:
    model = f"registry:wire:{flavour.provider}:wire-model"
    template = AgentTemplate(model=model, tools=[add], instructions="Be brief.")
    data_dir = tmp_path / "data"
    first = make_provider_host(store=None, data_dir=data_dir, providers=_registry(flavour, server))
    sid = first.start_session(template, session_id="trip", tenant_id="acme")
    for i in (1, 2, 3):
        server.script(Calls([(f"c{i}", "add", {"a": i, "b": i})]), Text(f"it is {2 * i}"))
        assert first.send(sid, f"add {i} and {i}").content == f"it is {2 * i}"
    first.checkpoint(sid, "before restart")
    first.shutdown()

    second = make_provider_host(store=None, data_dir=data_dir, providers=_registry(flavour, server))
    assert second.resume("trip", template, tenant_id="acme") == "trip"
    server.script(Text("still here"))
    assert second.send(sid, "and now?").content == "still here"

    conversation = [Message.system("Be brief."), *_turns(), Message.user("and now?")]
    assert second.history(sid) == [*conversation[1:], Message.assistant("still here")]
    last = server.requests[-1].body
    assert len(server.requests) == 7
    if flavour.name == "responses":
        # The server holds the first six answers: the resumed session continues from the
        # last one, its id restored from the checkpoint, and sends only the new text.
        assert last["previous_response_id"] == "resp_6"
        assert last["input"] == [{"role": "user", "content": "and now?"}]
        assert last["instructions"] == "Be brief."
        assert server.requests[1].body["previous_response_id"] == "resp_1"
    else:
        for name, value in expected_conversation(flavour.name, conversation).items():
            assert last[name] == value, name
