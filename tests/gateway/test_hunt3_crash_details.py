"""A crashed or given-up session's answer names the session, never what the crash said:
the detail carried the dead actor's class and URN and the exception's text (whatever the
session held: here a key), against "details never name internals", and told an HTTP
client to "call resume()", which no endpoint offers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from actors import AgentTemplate, Message, ModelResponse, Tool
from gateway.problems import problem_for
from supervisor import SessionCrashed, SessionFailed
from tests.gateway.conftest import one_session
from tests.gateway.test_gateway import problem

LEAK = "api_key=sk-live-123"


class Dying:
    """A model whose session dies (``SystemExit``) on every call."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise SystemExit(f"died holding {LEAK}")


def test_a_crash_answers_without_its_reason(tmp_path: Path) -> None:
    with one_session(tmp_path, AgentTemplate(model=Dying())) as c:
        answer = c.post("/v1/sessions/s/messages", json={"text": "hi"})
        streamed = c.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    body = problem(answer, 503, "session-crashed")
    assert body["detail"] == (
        "session 's' crashed (the server logged why); send again once it is back, from its "
        "last checkpoint"
    )
    assert body["retryable"] is True
    error_frame = streamed.text.strip().split("\n\n")[-1]  # (its ``crashed`` event says why)
    assert error_frame.startswith("event: error\n")
    for text in (answer.text, error_frame):
        assert LEAK not in text
        assert "urn:" not in text
        assert "acme/" not in text


def test_a_given_up_session_answers_without_its_reason() -> None:
    error = SessionFailed("acme/s", f"SystemExit: died holding {LEAK}; past its restart intensity")
    found = problem_for(error, "s")
    assert (found.status, found.slug, found.retry_after) == (409, "session-failed", None)
    assert found.detail == (
        "session 's' was given up after repeated crashes (the server logged why); its "
        "checkpoints are kept: the server's operator can resume it once the cause is fixed, "
        "or DELETE it"
    )


def test_a_crash_named_by_the_host_is_named_by_the_clients_id() -> None:
    error = SessionCrashed("acme/s", f"it died during the call (SystemExit('{LEAK}'))")
    assert problem_for(error).detail.startswith("session 's' crashed (the server logged why)")
