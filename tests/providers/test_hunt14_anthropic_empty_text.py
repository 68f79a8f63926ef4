"""An empty user message to the Anthropic adapter is refused before any request, found by a
bug hunt.

The Messages API refuses a text block that is empty or only whitespace, so the mapping
leaves such text out. For the user's own text that changed the request's meaning:
``send("")`` after an answer sent a conversation ending with the assistant's message,
which the API reads as a prefill (the model went on with its own last answer instead of
answering), and as a session's first message it sent no message at all (HTTP 400). Now
the adapter raises ``UnsendableRequest`` (a ``ProviderError`` and a ``ValueError``)
before sending anything when the user's last turn holds no text the API takes; the turn
is rolled back and the session goes on. The OpenAI adapters send the empty text as it is
(their APIs take it), as before.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelRequest,
    ProviderError,
    ToolCall,
    UnsendableRequest,
)
from actors.adapters.anthropic_messages import AnthropicModel
from tests.providers.flavours import FLAVOURS, AdapterFactory, Flavour
from tests.providers.wire import Text, WireServer

WAIT = 10.0
CALL = ToolCall("c1", "add", {"a": 1})


@pytest.fixture
def model(anthropic: WireServer) -> Iterator[AnthropicModel]:
    adapter = AnthropicModel("wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0)
    yield adapter
    adapter.close()


@pytest.mark.parametrize("blank", ["", " ", "\n\t "], ids=repr)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    "before",
    [(), (Message.user("hi"), Message.assistant("hello"))],
    ids=["first", "after-an-answer"],
)
def test_a_blank_last_user_message_is_refused_before_any_request(
    anthropic: WireServer,
    blank: str,
    stream: bool,
    before: tuple[Message, ...],
) -> None:
    model = AnthropicModel(
        "wire-model", base_url=anthropic.base_url, api_key="k", max_retries=0, stream=stream
    )
    try:
        with pytest.raises(UnsendableRequest, match=r"empty.*send some text") as caught:
            model.respond(ModelRequest([*before, Message.user(blank)]))
    finally:
        model.close()
    assert isinstance(caught.value, ProviderError)
    assert isinstance(caught.value, ValueError)
    assert "anthropic:" in str(caught.value)
    assert anthropic.requests == []


def test_blank_text_after_tool_results_still_sends_the_results(
    anthropic: WireServer, model: AnthropicModel
) -> None:
    conversation = [
        Message.user("go"),
        Message.assistant(None, (CALL,)),
        Message.tool(CALL, "2"),
        Message.user(""),
    ]
    anthropic.script(Text("done"))

    assert model.respond(ModelRequest(conversation)).message.content == "done"
    last = anthropic.requests[0].body["messages"][-1]
    assert last == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "2"}],
    }


def test_a_blank_user_message_earlier_in_the_history_is_still_left_out(
    anthropic: WireServer, model: AnthropicModel
) -> None:
    conversation = [
        Message.user("hi"),
        Message.assistant("hello"),
        Message.user(""),
        Message.assistant("anything else?"),
        Message.user("no"),
    ]
    model.respond(ModelRequest(conversation))

    assert anthropic.requests[0].body["messages"] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "text", "text": "anything else?"},
            ],
        },
        {"role": "user", "content": "no"},
    ]


def test_a_session_refuses_the_empty_send_and_goes_on(
    anthropic: WireServer, model: AnthropicModel
) -> None:
    ref = AgentSession.start(AgentTemplate(model=model))
    try:
        proxy = ref.proxy()
        assert proxy.send("hi").get(timeout=WAIT).content == "echo: hi"
        with pytest.raises(UnsendableRequest):
            proxy.send("").get(timeout=WAIT)
        assert len(proxy.history().get(timeout=WAIT)) == 2  # the turn was rolled back
        assert proxy.send("again").get(timeout=WAIT).content == "echo: again"
    finally:
        ref.stop(block=True, timeout=WAIT)
    assert len(anthropic.requests) == 2
    assert anthropic.requests[-1].body["messages"][-1] == {"role": "user", "content": "again"}


@pytest.mark.parametrize(
    "flavour",
    [f for f in FLAVOURS if f.name != "anthropic"],  # which refuses it (above)
    ids=lambda f: f.name,
    indirect=True,
)
def test_the_openai_adapters_send_the_empty_text(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    make_adapter().respond(
        ModelRequest([Message.user("hi"), Message.assistant("hello"), Message.user("")])
    )
    body = server.requests[0].body
    sent = body["messages"] if flavour.name == "chat" else body["input"]
    assert sent[-1] == {"role": "user", "content": ""}
