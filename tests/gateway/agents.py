"""Templates the gateway tests serve (loaded by import string, as `serve` does)."""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Sequence

from actors import (
    AgentTemplate,
    Message,
    ModelRequest,
    ModelResponse,
    TextDelta,
    Tool,
    Usage,
)


class StreamingEcho:
    """Answers ``echo: <text>`` in two streamed pieces."""

    def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content or ""
        request.emit(TextDelta("echo: "))
        request.emit(TextDelta(last))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


class SwitchInterval:
    """Answers with the switch interval of the interpreter it runs in (``sys.getswitchinterval``):
    what ``serve --switch-interval`` set, in the server's process or a worker's."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant(repr(sys.getswitchinterval())), Usage(1, 1))


class CpuSet:
    """Answers with the CPUs its thread may run on and its scheduling policy: what ``serve
    --cpu`` left a session's thread, in the server's process or a worker's."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        found = (sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))
        return ModelResponse(Message.assistant(repr(found)), Usage(1, 1))


class FrozenCount:
    """Answers with how many objects the garbage collector of its process has frozen
    (``gc.get_freeze_count``): what ``serve`` froze at start."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant(repr(gc.get_freeze_count())), Usage(1, 1))


cpu_set = AgentTemplate(model=CpuSet())
echo = AgentTemplate(model="echo")
frozen_count = AgentTemplate(model=FrozenCount())
switch_interval = AgentTemplate(model=SwitchInterval())
streaming = AgentTemplate(model=StreamingEcho())


def make_streaming() -> AgentTemplate:
    return AgentTemplate(model=StreamingEcho())


__all__ = [
    "CpuSet",
    "FrozenCount",
    "Message",
    "SlowStreamingEcho",
    "StreamingEcho",
    "SwitchInterval",
    "cpu_set",
    "echo",
    "frozen_count",
    "make_slow",
    "make_slower",
    "make_streaming",
    "streaming",
    "switch_interval",
]


class SlowStreamingEcho:
    """Answers ``echo: <text>`` in five streamed pieces, ``delay`` seconds apart, so that
    turns are in flight for a while (the SIGKILL test kills the server mid-stream)."""

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay

    def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1].content or ""
        for piece in ("ec", "ho", ": ", last[: len(last) // 2], last[len(last) // 2 :]):
            time.sleep(self.delay)  # the model's latency, not a synchronisation
            request.emit(TextDelta(piece))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


def make_slow() -> AgentTemplate:
    return AgentTemplate(model=SlowStreamingEcho())


def make_slower() -> AgentTemplate:
    """Turns of about a second: long enough for a test to queue sends behind one."""
    return AgentTemplate(model=SlowStreamingEcho(0.2))
