"""What real servers send besides the textbook answer: refusals, chunks without choices,
tool-call deltas without an index, a stream that stalls; and what an adapter's ``repr``
must not show."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Delta,
    Message,
    ModelRequest,
    ProviderError,
    ProviderRegistry,
    TextDelta,
    ToolCall,
)
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.flavours import AdapterFactory, Flavour
from tests.providers.wire import WAIT, Raw, Text, WireServer

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])

_RESPONSES_USAGE = {
    "input_tokens": 4,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 7,
}


def _ask(model: Any, deltas: list[Delta]) -> Any:
    try:
        return model.respond(ModelRequest([Message.user("hi")], on_delta=deltas.append))
    finally:
        model.close()


def _refusing_response(status: str) -> dict[str, Any]:
    content = [{"type": "refusal", "refusal": "I can't help with that."}]
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "wire-model",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": status,
                "content": content if status == "completed" else [],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _RESPONSES_USAGE if status == "completed" else None,
    }


def _completion(message: dict[str, Any], finish_reason: str) -> Raw:
    """A whole Chat Completions answer of one choice, as the server sends it."""
    return Raw(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "wire-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
    )


@STREAM
def test_a_responses_refusal_is_the_answer_not_an_empty_message(
    responses: WireServer, stream: bool
) -> None:
    if stream:
        piece = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        responses.script(
            Raw(
                events=[
                    {"type": "response.created", "response": _refusing_response("in_progress")},
                    {"type": "response.refusal.delta", "delta": "I can't ", **piece},
                    {"type": "response.refusal.delta", "delta": "help with that.", **piece},
                    {"type": "response.completed", "response": _refusing_response("completed")},
                ]
            )
        )
    else:
        responses.script(Raw(body=_refusing_response("completed")))
    model = OpenAIResponsesModel(
        "wire-model", base_url=responses.base_url, api_key="sk-wire", max_retries=0, stream=stream
    )
    deltas: list[Delta] = []
    answer = _ask(model, deltas)
    assert answer.message == Message.assistant("I can't help with that.")
    assert answer.stop_reason == "content_filter"
    assert deltas == ([TextDelta("I can't "), TextDelta("help with that.")] if stream else [])


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **more: Any) -> str:
    data: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "wire-model",
        **more,
    }
    if delta is not None:
        data["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return f"data: {json.dumps(data)}\n\n"


def _chat_model(server: WireServer, stream: bool) -> OpenAIChatModel:
    return OpenAIChatModel(
        "wire-model", base_url=server.base_url, api_key="sk-wire", max_retries=0, stream=stream
    )


@STREAM
def test_a_chat_refusal_reads_as_content_filter(chat: WireServer, stream: bool) -> None:
    refusal = "I can't help with that."
    if stream:
        chat.script(
            Raw(
                events=[
                    _chunk({"role": "assistant", "content": None, "refusal": "I can't "}),
                    _chunk({"refusal": "help with that."}),
                    _chunk({}, "stop"),
                    "data: [DONE]\n\n",
                ]
            )
        )
    else:
        message = {"role": "assistant", "content": None, "refusal": refusal}
        chat.script(_completion(message, "stop"))
    answer = _ask(_chat_model(chat, stream), [])
    assert answer.message == Message.assistant(refusal)
    assert answer.stop_reason == "content_filter"


def test_a_chat_stream_takes_chunks_without_choices(chat: WireServer) -> None:
    # LiteLLM, Azure and others send chunks of filter results or usage alone, with no
    # "choices" at all; the SDK hands them over with choices=None.
    usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    chat.script(
        Raw(
            events=[
                _chunk(None, prompt_filter_results=[]),
                _chunk({"role": "assistant", "content": "Hel"}),
                _chunk({"content": "lo"}),
                _chunk({}, "stop"),
                _chunk(None, usage=usage),
                "data: [DONE]\n\n",
            ]
        )
    )
    deltas: list[Delta] = []
    answer = _ask(_chat_model(chat, True), deltas)
    assert answer.message == Message.assistant("Hello")
    assert answer.usage.input_tokens == 4
    assert answer.usage.output_tokens == 2
    assert deltas == [TextDelta("Hel"), TextDelta("lo")]


@pytest.mark.parametrize("index", [None, 0], ids=["no-index", "all-index-0"])
def test_parallel_streamed_tool_calls_without_their_own_index_stay_apart(
    chat: WireServer, index: int | None
) -> None:
    # Some OpenAI-compatible servers leave "index" out of streamed tool calls, or give
    # every call index 0.
    def call(**fields: Any) -> dict[str, Any]:
        numbered = {} if index is None else {"index": index}
        return {"tool_calls": [{"type": "function", **numbered, **fields}]}

    chat.script(
        Raw(
            events=[
                _chunk(call(id="c1", function={"name": "add", "arguments": '{"a": '})),
                _chunk(call(function={"arguments": "1}"})),
                _chunk(call(id="c2", function={"name": "mul", "arguments": '{"b": '})),
                _chunk(call(function={"arguments": "2}"})),
                _chunk(call(id="c2", function={"arguments": ""})),
                _chunk({}, "tool_calls"),
                "data: [DONE]\n\n",
            ]
        )
    )
    answer = _ask(_chat_model(chat, True), [])
    assert answer.message.tool_calls == (
        ToolCall("c1", "add", {"a": 1}),
        ToolCall("c2", "mul", {"b": 2}),
    )
    assert answer.stop_reason == "tool_calls"


@pytest.mark.parametrize("cls", [OpenAIChatModel, OpenAIResponsesModel, AnthropicModel])
def test_a_models_repr_shows_no_credential(cls: type[Any]) -> None:
    model = cls(
        "wire-model",
        base_url="https://proxy-user:proxy-pass@llm.example/v1?key=url-secret",
        api_key="sk-settings-secret",
        default_headers={"api-key": "header-secret", "X-App": "demo"},
        options={"extra_headers": {"Authorization": "Bearer option-secret"}, "temperature": 0.2},
    )
    for shown in (repr(model), repr(model.settings), repr(AgentTemplate(model=model))):
        for secret in ("settings-secret", "header-secret", "option-secret", "url-secret"):
            assert secret not in shown
        assert "proxy-pass" not in shown
        assert "llm.example/v1" in shown  # what a reader needs is still there
        assert "'api-key', 'X-App'" in shown or "'X-App', 'api-key'" in shown
        assert "temperature" in shown


def test_a_stream_that_stalls_past_the_timeout_is_the_sdks_timeout_error(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    go_on = threading.Event()

    def stall(index: int, _data: bytes) -> None:
        if index == 3:  # after two deltas
            go_on.wait(WAIT)

    server.chunk_hook = stall
    server.script(Text("Hello there, world", pieces=["Hel", "lo", "!"]))
    deltas: list[Delta] = []
    try:
        with pytest.raises(flavour.sdk.APITimeoutError):
            _ask(make_adapter(stream=True, timeout=0.5), deltas)
    finally:
        go_on.set()
    assert len(deltas) <= 2


def test_an_answer_that_is_not_the_apis_shape_is_a_provider_error(
    flavour: Flavour, server: WireServer, make_adapter: AdapterFactory
) -> None:
    # A proxy or a wrong base_url answering HTTP 200 with a body of another shape.
    server.script(Raw(body={"status": "ok", "detail": "queued"}))
    with pytest.raises(ProviderError, match="answered without"):
        _ask(make_adapter(), [])


@pytest.mark.parametrize(
    ("options", "match"),
    [({"stream": True}, "use the stream setting"), ({"model": "gpt-x"}, "model_id")],
)
def test_options_that_the_adapter_sets_itself_are_refused_when_configured(
    options: dict[str, Any], match: str
) -> None:
    # stream=True in options made the adapter read a stream as a whole answer: an
    # AttributeError at the first send, with the response left open.
    with pytest.raises(ValueError, match=match):
        OpenAIChatModel("wire-model", options=options)
    with pytest.raises(ValueError, match=match):
        ProviderRegistry().register("p", "anthropic", options=options)


def test_a_session_goes_on_after_an_empty_chat_answer(chat: WireServer) -> None:
    # A filtered answer has no text and no calls; sent back as "content": null, the API
    # refuses every later request of the session.
    message = {"role": "assistant", "content": None}
    chat.script(_completion(message, "content_filter"))
    model = _chat_model(chat, False)
    ref = AgentSession.start(AgentTemplate(model=model))
    try:
        assert ref.proxy().send("first").get(timeout=WAIT) == Message.assistant(None)
        assert ref.proxy().send("second").get(timeout=WAIT).content == "echo: second"
    finally:
        ref.stop(timeout=WAIT)
        model.close()
    sent = chat.requests[1].body["messages"]
    assert sent[1] == {"role": "assistant", "content": ""}
