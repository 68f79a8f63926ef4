"""SSE answers that stay silent (a session with nothing to say, a model call that takes
long) send a comment line every ``Limits.heartbeat_s``: clients ignore it, proxies keep
the connection, and a client that went away is noticed at that write."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool, Usage
from gateway import Limits, load_templates
from supervisor import AgentHost
from tests.gateway.conftest import TEMPLATES, Served, serving

WAIT = 10.0


class GatedModel:
    """Answers ``gated: <text>`` once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        assert self.gate.wait(WAIT)
        return ModelResponse(Message.assistant(f"gated: {messages[-1].content}"), Usage(1, 1))


@pytest.fixture
def gated() -> GatedModel:
    return GatedModel()


@pytest.fixture
def served(tmp_path: Path, gated: GatedModel) -> Iterator[Served]:
    host = AgentHost(data_dir=tmp_path, call_timeout=WAIT)
    templates = {**load_templates(TEMPLATES), "gated": AgentTemplate(model=gated)}
    with serving(host, templates, tmp_path, Limits(heartbeat_s=0.05)) as made:
        yield made


def _until(lines: Iterator[str], wanted: str) -> list[str]:
    """The lines read up to and including the first that starts with ``wanted``."""
    read = []
    for line in lines:
        read.append(line)
        if line.startswith(wanted):
            return read
    raise AssertionError(f"the stream ended before {wanted!r}: {read}")


def test_an_idle_event_stream_sends_heartbeats_and_then_its_events(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as client, served.client(key) as sender:
        created = client.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        assert created.status_code == 201, created.text
        with client.stream("GET", "/v1/sessions/s/events") as stream:
            lines = stream.iter_lines()
            assert _until(lines, ":")[-1] == ": keep-alive"
            assert sender.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
            data = _until(lines, "event: turn_finished")
            assert next(lines).startswith("data: ")
            assert "event: turn_started" in data


def test_a_streamed_send_waiting_on_its_model_sends_heartbeats(
    served: Served, gated: GatedModel
) -> None:
    with served.client(served.keys.create("acme").key) as client:
        created = client.post("/v1/sessions", json={"template": "gated", "session_id": "s"})
        assert created.status_code == 201, created.text
        body = {"text": "hi", "stream": True}
        with client.stream("POST", "/v1/sessions/s/messages", json=body) as stream:
            lines = stream.iter_lines()
            assert ": keep-alive" in _until(lines, ": keep-alive")
            gated.gate.set()
            _until(lines, "event: answer")
            answer = json.loads(next(lines).removeprefix("data: "))
    assert answer["message"]["content"] == "gated: hi"


@pytest.mark.parametrize("seconds", [0, -1, math.nan, math.inf, True, "15"])
def test_a_heartbeat_that_is_no_positive_number_of_seconds_is_refused(seconds: object) -> None:
    with pytest.raises(ValueError, match=r"Limits\.heartbeat_s must be"):
        Limits(heartbeat_s=seconds)  # type: ignore[arg-type]
