"""A streamed send whose own ``turn_started`` was dropped from the session's full buffer
gets none of its turn's events, and its ``missed`` frame must count all of them. It
counted only the events dropped: those that reached the stream after the loss, which it
left out because it could not tell they were its turn's, were left out without a word
(a turn of 13 events answered ``missed: 10``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import AgentTemplate, Event, ModelRequest, ModelResponse, TextDelta, Usage
from gateway import KeyStore
from gateway._turns import OwnTurn
from supervisor import AgentHost
from tests.gateway.conftest import sends_then
from tests.gateway.serve_process import frames

DELTAS = 10
BUFFER = 3


class Chatty:
    """Streams its answer in ``DELTAS`` pieces: with ``turn_started``, ``model_response``
    and ``turn_finished``, a turn of ``DELTAS + 3`` events, far more than ``BUFFER``."""

    def respond(self, request: ModelRequest) -> ModelResponse:
        for i in range(DELTAS):
            request.emit(TextDelta(f"{i} "))
        return ModelResponse(request.streamed_message(), Usage(1, 1), stop_reason="stop")


@pytest.fixture
def client(tmp_path: Path, host: AgentHost) -> Iterator[httpx.Client]:
    """A client of the tenant's session ``s``, whose event buffer holds ``BUFFER`` events,
    served by a gateway whose streamed sends read the session's events only once their
    whole turn ran: the send's submission waits for its answer (on the server's event
    loop, which the stream's reader needs), so the turn's ``turn_started`` is always
    among the dropped events, never a race the reader may win."""
    template = AgentTemplate(model=Chatty())
    host.start_session(template, "acme/s", tenant_id="acme", event_buffer_size=BUFFER)
    with sends_then(host, {"chatty": template}, KeyStore(tmp_path), lambda: None) as http:
        yield http


def test_a_send_that_lost_its_start_counts_every_event_of_its_turn(
    client: httpx.Client, host: AgentHost
) -> None:
    start = host.events("acme/s", tenant_id="acme").cursor
    answer = client.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
    assert answer.status_code == 200
    after = host.events("acme/s", tenant_id="acme")
    assert after.events[-1].type == "turn_finished"  # the session published nothing since
    turn_events = after.cursor - (start or 0)
    assert turn_events == DELTAS + 3
    got = list(frames(iter(answer.text.splitlines())))
    content = "".join(f"{i} " for i in range(DELTAS))
    assert [kind for kind, _ in got] == ["missed", "answer"]
    assert got[0][1] == {"missed": turn_events}
    assert got[1][1]["message"]["content"] == content


def _event(seq: int, kind: str, **data: Any) -> Event:
    return Event(seq, kind, data, float(seq))


def test_events_it_left_out_after_losing_its_start_are_counted() -> None:
    own = OwnTurn()
    assert own.missed(10) == 0  # its turn_started (seq 1) among them
    for event in (
        _event(11, "delta", text="9 "),
        _event(12, "model_response", content="x"),
        _event(13, "turn_finished", turn=1),
    ):
        assert not own.owns(event)  # it cannot tell they are its own
    assert own.unseen() == 10
    assert own.untold() == 13


def test_events_after_a_turn_ended_are_not_counted_until_the_next_loss() -> None:
    own = OwnTurn()
    assert own.missed(4) == 0
    assert not own.owns(_event(5, "turn_finished", turn=1))  # maybe its own: counted
    assert not own.owns(_event(6, "resumed", checkpoint_id="c"))  # between turns
    assert not own.owns(_event(7, "turn_started", turn=2, tag="other"))
    assert not own.owns(_event(8, "delta", text="x"))  # the other turn's
    assert own.untold() == 5
    assert own.missed(2) == 0  # its turn_started may be among these
    assert not own.owns(_event(11, "delta", text="y"))
    assert own.untold() == 8


def test_another_turn_started_after_a_loss_is_not_counted() -> None:
    own = OwnTurn()
    assert own.missed(3) == 0
    assert not own.owns(_event(4, "turn_started", turn=2, tag="other"))
    assert not own.owns(_event(5, "delta", text="x"))
    assert own.untold() == 3


def test_nothing_is_untold_once_its_start_was_seen() -> None:
    own = OwnTurn()
    assert own.missed(3) == 0
    assert not own.owns(_event(4, "delta", text="x"))  # another turn's, as it turns out
    assert own.owns(_event(5, "turn_started", turn=2, tag=own.tag))
    assert own.owns(_event(6, "turn_finished", turn=2))
    assert own.untold() == 0


def test_nothing_is_untold_without_a_loss() -> None:
    own = OwnTurn()
    assert own.missed(0) == 0
    assert not own.owns(_event(1, "turn_started", turn=1, tag="other"))
    assert not own.owns(_event(2, "turn_finished", turn=1))
    assert own.untold() == 0
