"""Answers a client could not rely on: steering a session given up after repeated crashes
answered 204 (the text was queued for a model call that never comes, while a send answers
409), and a streamed send to it 200 before its ``error`` frame; an export named the
session by the host's ``tenant/id`` in its state, beside the client's own id at the top."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool
from gateway import Limits
from supervisor import AgentHost
from tests.gateway.conftest import Served, serving
from tests.gateway.test_gateway import problem


class Dying:
    """A model whose session dies (``SystemExit``) on every call."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise SystemExit("died")


@pytest.fixture
def given_up(tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of session ``s`` (tenant ``acme``), given up after its second crash."""
    host = AgentHost(data_dir=tmp_path, call_timeout=10, max_restarts=1, max_seconds=3600)
    with serving(host, {"dying": AgentTemplate(model=Dying())}, tmp_path, Limits()) as served:
        with served.client(served.keys.create("acme").key) as client:
            made = client.post("/v1/sessions", json={"template": "dying", "session_id": "s"})
            assert made.status_code == 201, made.text
            statuses = []
            for _ in range(5):  # crash, crash (given up), then the answer of a given-up one
                statuses.append(client.post("/v1/sessions/s/messages", json={"text": "hi"}))
                if statuses[-1].status_code == 409:
                    break
            assert [r.status_code for r in statuses] == [503, 503, 409], statuses
            assert client.get("/v1/sessions/s").json()["status"] == "failed"
            yield client


def test_steering_a_given_up_session_answers_as_a_send_does(given_up: httpx.Client) -> None:
    answer = given_up.post("/v1/sessions/s/steer", json={"text": "any news?"})
    body = problem(answer, 409, "session-failed")
    assert body["detail"].startswith("session 's' was given up after repeated crashes")
    assert "acme/" not in answer.text


def test_a_streamed_send_to_a_given_up_session_answers_409_before_streaming(
    given_up: httpx.Client,
) -> None:
    answer = given_up.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    body = problem(answer, 409, "session-failed")  # as the JSON send: no 200, then an error
    assert body["detail"].startswith("session 's' was given up after repeated crashes")


def test_an_export_names_the_session_by_the_clients_id_only(served: Served) -> None:
    with served.client(served.keys.create("acme").key) as c:
        assert c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        assert c.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
        exported = c.get("/v1/sessions/s/export")
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert (body["session_id"], body["state"]["session_id"]) == ("s", "s")
    assert "acme/s" not in exported.text
