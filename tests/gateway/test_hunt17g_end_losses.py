"""Hunt 17g: a streamed send tells the events its stream counted lost but handed out none
after.

A streamed send passed the stream's loss count (``EventStream.missed``) on to its
``OwnTurn`` only when the stream handed out an event. A read that counted losses but had
no event to hand out, followed by the answer, left them untold: ``_turn_end`` reads the
session's events after the stream's cursor, past those losses. That read happens when the
session was stopped and resumed between the send's submission and the stream's first
read: its resumed stream goes on after its checkpoint's events, which the new buffer
counts as missed and does not hold. The send's own turn ran before, so the client got
its answer and none of its turn's events, without a ``missed`` frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway import KeyStore
from supervisor import AgentHost
from tests.gateway.agents import echo
from tests.gateway.conftest import sends_then
from tests.gateway.serve_process import frames

SESSION = "acme/s"


@pytest.fixture
def client(tmp_path: Path, host: AgentHost) -> Iterator[httpx.Client]:
    """A client of the tenant's session ``s``, served by a gateway whose streamed sends
    are followed, before their stream's first read, by the session's stop and resume:
    the send's submission waits for its answer, then stops and resumes the session (on
    the server's event loop, which the stream's reader needs, so never a race it may
    win)."""
    host.start_session(echo, SESSION, tenant_id="acme")

    def restart() -> None:
        host.stop_session(SESSION, tenant_id="acme")
        host.resume(SESSION, echo, tenant_id="acme")

    with sends_then(host, {"echo": echo}, KeyStore(tmp_path), restart) as http:
        yield http


def test_losses_counted_without_an_event_after_them_are_told(
    client: httpx.Client, host: AgentHost
) -> None:
    answer = client.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    assert answer.status_code == 200
    resumed = host.events(SESSION, 0, tenant_id="acme")
    assert resumed.events == ()  # the resumed stream holds none of the turn's events...
    assert resumed.missed == 3  # ...its turn_started, model_response and turn_finished
    got = list(frames(iter(answer.text.splitlines())))
    assert [kind for kind, _ in got] == ["missed", "answer"]  # was: ["answer"]
    assert got[0][1] == {"missed": 3}
    assert got[1][1]["message"]["content"] == "echo: hi"
