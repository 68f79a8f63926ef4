"""A JSON send whose model raises what no library error is (``AgentHost.send`` passes on
whatever the model, or the store saving the turn, raised) answers problem details, as a
streamed send's ``error`` frame does, and keeps the client's connection: it answered a
bare ``text/plain`` 500 and closed the connection."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool
from tests.gateway.conftest import one_session
from tests.gateway.test_gateway import problem


class Failing:
    """A model that raises a plain ``RuntimeError`` (a bug, an adapter's own error)."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise RuntimeError("the adapter broke: token=sk-not-for-clients")


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of session ``s`` of a served host whose template's model fails."""
    with one_session(tmp_path, AgentTemplate(model=Failing())) as client:
        yield client


def test_a_model_error_answers_problem_details(failing: httpx.Client) -> None:
    answer = failing.post("/v1/sessions/s/messages", json={"text": "hi"})
    body = problem(answer, 500, "internal")
    assert "sk-not-for-clients" not in answer.text
    assert body["retryable"] is False


def test_the_connection_outlives_a_model_error(failing: httpx.Client) -> None:
    assert failing.post("/v1/sessions/s/messages", json={"text": "hi"}).status_code == 500
    after = failing.get("/v1/sessions/s")  # on the same keep-alive connection
    assert after.status_code == 200, after.text
    assert after.json()["status"] == "active"


def test_the_streamed_send_says_the_same(failing: httpx.Client) -> None:
    answer = failing.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    assert answer.status_code == 200
    last = answer.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\n")
    assert '"status":500,"type":"/problems/internal"' in last
