"""A streaming model that emits something other than a delta is told what ``emit`` takes,
found by a bug hunt: ``request.emit("text")`` failed the turn with ``'str' object has no
attribute 'id'``, an error that named neither ``emit`` nor what it wants."""

from __future__ import annotations

from typing import Any, cast

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    ModelRequest,
    ModelResponse,
    TextDelta,
    Usage,
)

WAIT = 5.0


def test_emit_refuses_what_is_not_a_delta_naming_what_it_takes() -> None:
    request = ModelRequest([])
    with pytest.raises(TypeError, match=r"emit\(\) takes a TextDelta or a ToolCallDelta"):
        request.emit(cast(Any, "hello"))
    assert not request.streamed
    request.emit(TextDelta("hello"))
    assert request.streamed_message().content == "hello"


def test_a_model_emitting_text_fails_its_turn_with_that_error_and_nothing_published() -> None:
    class Model:
        model_string = "bare-text"

        def respond(self, request: ModelRequest) -> ModelResponse:
            request.emit(cast(Any, "hello"))
            return ModelResponse(request.streamed_message(), Usage())

    ref = AgentSession.start(AgentTemplate(model=Model()))
    try:
        session = ref.proxy()
        with pytest.raises(TypeError, match="got str: wrap answer text as TextDelta"):
            session.send("hi").get(timeout=WAIT)
        types = [e.type for e in session.events().get(timeout=WAIT).events]
        assert types == ["turn_started", "error"]
        assert session.history().get(timeout=WAIT) == []
    finally:
        ref.stop(block=True, timeout=WAIT)
