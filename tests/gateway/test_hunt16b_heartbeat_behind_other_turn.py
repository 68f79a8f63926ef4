"""Hunt 16b: a streamed send queued behind another turn that streams (a JSON send, a
library call) stayed silent until its own turn began: the other turn's events arrived
(and were left out, as they are not the send's), and each one restarted the wait for a
heartbeat, so no ``: keep-alive`` went out for as long as that turn ran. A proxy's idle
timeout cut the answer off, and a client that went away was not noticed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import AgentTemplate, ModelRequest, ModelResponse, TextDelta, Usage
from gateway import Limits
from supervisor import AgentHost
from tests.gateway.conftest import Served, serving

WAIT = 10.0
HEARTBEAT_S = 0.3
LONG_S = 4.0  # the longest the first turn runs: the failing case ends, with no read timeout


class Chatty:
    """Streams a delta every 20 ms for a ``long`` message until ``release`` is set (at
    most ``LONG_S`` seconds); any other message is answered at once with its text."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def respond(self, request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content or ""
        if text == "long":
            self.started.set()
            deadline = time.monotonic() + LONG_S
            while not self.release.wait(0.02) and time.monotonic() < deadline:
                request.emit(TextDelta("."))  # the model's pace, not a synchronisation
        request.emit(TextDelta(text))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


@pytest.fixture
def chatty() -> Chatty:
    return Chatty()


@pytest.fixture
def served(tmp_path: Path, chatty: Chatty) -> Iterator[Served]:
    host = AgentHost(data_dir=tmp_path, call_timeout=WAIT * 2)
    templates = {"chatty": AgentTemplate(model=chatty)}
    with serving(host, templates, tmp_path, Limits(heartbeat_s=HEARTBEAT_S)) as made:
        yield made


def test_a_streamed_send_behind_a_streaming_turn_sends_heartbeats(
    served: Served, chatty: Chatty
) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as client, served.client(key) as other:
        other.timeout = WAIT * 3
        created = client.post("/v1/sessions", json={"template": "chatty", "session_id": "s"})
        assert created.status_code == 201, created.text
        before: list[int] = []
        first = threading.Thread(
            target=lambda: before.append(
                other.post("/v1/sessions/s/messages", json={"text": "long"}).status_code
            )
        )
        first.start()
        try:
            assert chatty.started.wait(WAIT), "the first turn did not start"
            body = {"text": "mine", "stream": True}
            with client.stream("POST", "/v1/sessions/s/messages", json=body) as stream:
                lines = (line for line in stream.iter_lines() if line)
                first_line = next(lines)
                still_running = not chatty.release.is_set() and first.is_alive()
                chatty.release.set()
                rest = list(lines)
        finally:
            chatty.release.set()
            first.join(WAIT * 3)
    assert (first_line, still_running) == (": keep-alive", True)
    assert before == [200]
    answer = rest[rest.index("event: answer") + 1]
    assert json.loads(answer.removeprefix("data: ")) == {
        "message": {"role": "assistant", "content": "mine"}
    }
