"""A frame named ``error`` is also what a browser's ``EventSource`` fires when its
connection fails, without ``data``: every ``error`` frame the gateway sends carries JSON
data that says which it is. A streamed send's own failure is the problem details a JSON
send answers (``title`` and ``retryable`` were missing: a client could not tell whether
to send again); the session's ``error`` event before it has ``turn``, ``error``, ``seq``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors import AgentTemplate, Message, ModelResponse, Tool
from gateway.problems import Problem, problem_data
from tests.gateway.conftest import one_session


class Failing:
    """A model that raises a plain ``RuntimeError``."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise RuntimeError("the adapter broke")


def _frames(text: str) -> list[tuple[str, str | None, Any]]:
    """(event, id, data as JSON) of each frame of an SSE body (comments left out)."""
    frames = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line[:1] != ":")
        if fields:
            frames.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
    return frames


def test_each_error_frame_of_a_streamed_send_says_what_it_is(tmp_path: Path) -> None:
    with one_session(tmp_path, AgentTemplate(model=Failing())) as client:
        sent = client.post("/v1/sessions/s/messages", json={"text": "hi"})
        streamed = client.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    assert streamed.status_code == 200
    errors = [
        (frame_id, data) for name, frame_id, data in _frames(streamed.text) if name == "error"
    ]
    (event_id, event), (last_id, last) = errors
    assert event_id is not None  # the session's event: resumable, with its seq
    assert event["seq"] == int(event_id)
    assert event["error"] == "RuntimeError('the adapter broke')"
    assert isinstance(event["turn"], int)
    assert last_id is None  # the send's failure: what the JSON send answered
    expected = {k: v for k, v in sent.json().items() if k != "instance"}
    assert last == expected
    assert last["title"] == "Internal error"  # (missing before)
    assert last["retryable"] is False
    assert '"status":500,"type":"/problems/internal"' in streamed.text  # the order kept


def test_the_data_of_a_retryable_problem_says_so() -> None:
    problem = Problem(503, "owner-unavailable", "Session owner unavailable", "gone", 1)
    assert problem_data(problem) == {
        "status": 503,
        "type": "/problems/owner-unavailable",
        "detail": "gone",
        "title": "Session owner unavailable",
        "retryable": True,
    }
