"""Templates the gateway tests serve (loaded by import string, as `serve` does)."""

from __future__ import annotations

from actors import AgentTemplate, Message, ModelRequest, ModelResponse, TextDelta, Usage


class StreamingEcho:
    """Answers ``echo: <text>`` in two streamed pieces."""

    def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content or ""
        request.emit(TextDelta("echo: "))
        request.emit(TextDelta(last))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


echo = AgentTemplate(model="echo")
streaming = AgentTemplate(model=StreamingEcho())


def make_streaming() -> AgentTemplate:
    return AgentTemplate(model=StreamingEcho())


__all__ = ["Message", "StreamingEcho", "echo", "make_streaming", "streaming"]
