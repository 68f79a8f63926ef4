"""``AgentTemplate`` refuses a model no session could call, when it is made.

Before the fix ``AgentTemplate(model=5)`` was accepted, and every session on it then
failed to start with ``AttributeError: 'int' object has no attribute 'generate'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    Tool,
)

MODEL_FORMS = (
    "model must be a model string (a registered name such as 'echo', or "
    "'registry:<profile>:<provider>:<model_id>') or an object with a generate(messages, "
    "tools) or respond(request) method (actors.GenerateModel, actors.RespondModel), got"
)


class Generates:
    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant("generated"))


class Responds:
    def respond(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(Message.assistant("responded"))


class NotCallable:
    generate = "not a method"


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        (5, "int 5"),
        (None, "NoneType None"),
        (b"echo", "bytes b'echo'"),
        (NotCallable(), "NotCallable <"),
    ],
)
def test_a_model_that_is_neither_form_is_refused(model: Any, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        AgentTemplate(model=model)
    assert str(caught.value).startswith(f"{MODEL_FORMS} {shown}")


def test_a_long_repr_is_shortened() -> None:
    with pytest.raises(TypeError) as caught:
        AgentTemplate(model=["x" * 200])  # type: ignore[arg-type]
    shown = repr(["x" * 200])[:77] + "..."
    assert str(caught.value) == f"{MODEL_FORMS} list {shown}"


def test_a_model_class_is_refused_with_what_to_pass() -> None:
    with pytest.raises(TypeError) as caught:
        AgentTemplate(model=EchoModel)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "model must be a model object, not the class EchoModel: pass an instance, "
        "such as EchoModel()"
    )


@pytest.mark.parametrize("model", ["", "  ", "\t\n"])
def test_an_empty_or_blank_model_string_is_refused(model: str) -> None:
    with pytest.raises(ValueError) as caught:
        AgentTemplate(model=model)
    assert str(caught.value) == (
        "model must be a non-empty model string (a registered name such as 'echo', or "
        f"'registry:<profile>:<provider>:<model_id>'), got {model!r}"
    )


@pytest.mark.parametrize(
    "model",
    [
        "echo",
        "registry:prod:openai:gpt-4o",  # resolved when a session starts, not here
        "a-name-registered-later",
        EchoModel(),
        ScriptedModel(["hi"]),
        Generates(),
        Responds(),
    ],
)
def test_both_forms_of_model_are_taken(model: Any) -> None:
    assert AgentTemplate(model=model).model is model


@pytest.mark.parametrize(
    ("model", "answer"), [(Generates(), "generated"), (Responds(), "responded")]
)
def test_a_session_calls_either_form(model: Any, answer: str) -> None:
    ref = AgentSession.start(AgentTemplate(model=model))
    try:
        assert ref.proxy().send("hi").get(timeout=5).content == answer
    finally:
        ref.stop()
