"""A streamed send whose reader fell behind the session's bounded event buffer says how
many of its turn's events it lost, in a ``missed`` frame as an ``/events`` stream does:
it left them out without a word (all of them when its ``turn_started`` was dropped, the
answer then coming alone)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import AgentTemplate, Event, ModelRequest, ModelResponse, TextDelta, Usage
from gateway import KeyStore, create_app
from gateway._turns import OwnTurn
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import run_server, stop_server
from tests.gateway.serve_process import frames

DELTAS = 50


class Chatty:
    """Streams its answer in ``DELTAS`` pieces at once: many more events than a buffer of
    3 holds before a reader on another thread gets to them."""

    def respond(self, request: ModelRequest) -> ModelResponse:
        for i in range(DELTAS):
            request.emit(TextDelta(f"{i} "))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


@pytest.fixture
def tiny_buffer(tmp_path: Path) -> Iterator[httpx.Client]:
    """A client of the tenant's session ``s``, whose event buffer holds 3 events."""
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    template = AgentTemplate(model=Chatty())
    url, server, thread = run_server(create_app(AsyncAgentHost(host), {"chatty": template}, keys))
    headers = {"Authorization": f"Bearer {keys.create('acme').key}"}
    host.start_session(template, "acme/s", tenant_id="acme", event_buffer_size=3)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
            yield client
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()


def test_a_streamed_send_reports_the_events_it_lost(tiny_buffer: httpx.Client) -> None:
    answer = tiny_buffer.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    assert answer.status_code == 200
    got = list(frames(iter(answer.text.splitlines())))
    kinds = [kind for kind, _ in got]
    assert "missed" in kinds, kinds
    assert kinds[-1] == "answer"
    assert all(data["missed"] > 0 for kind, data in got if kind == "missed")
    pieces = "".join(f"{i} " for i in range(DELTAS))
    assert got[-1][1]["message"]["content"] == pieces


def _event(seq: int, kind: str, **data: Any) -> Event:
    return Event(seq, kind, data, float(seq))


def test_losses_inside_the_turn_are_told_where_they_happened() -> None:
    own = OwnTurn()
    assert own.missed(4) == 0  # before its turn: another turn's, or its own start
    assert own.owns(_event(5, "turn_started", tag=own.tag))
    assert own.unseen() == 0  # its start was seen: those 4 were another turn's
    assert own.missed(2) == 2  # inside its turn
    assert own.owns(_event(8, "turn_finished", turn=1))
    assert own.missed(7) == 0  # after it


def test_losses_that_took_its_start_are_told_before_the_answer() -> None:
    own = OwnTurn()
    assert own.missed(3) == 0
    assert not own.owns(_event(4, "delta", text="x"))
    assert own.missed(2) == 0
    assert own.unseen() == 5
