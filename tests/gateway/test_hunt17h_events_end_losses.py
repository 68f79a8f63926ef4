"""Hunt 17h: an event stream tells the events its read counted lost but handed out none
after, before it ends.

``GET .../events`` told the stream's loss count (``EventStream.missed``) in a ``missed``
frame only before the next event it sent. A read that counted losses but had no event to
hand out, followed by the stream's end (the session stopped), left them untold: the
answer ended without a word of them. That read happens when the session was stopped and
resumed after the client's cursor: its resumed buffer goes on after its checkpoint's
events, which it counts as missed and does not hold. A client that reconnected with
``Last-Event-ID`` then, and whose session stopped, got an empty answer, as if it had
missed nothing.

The OpenAPI document's 503 of the route said nothing of the cluster node that cannot
serve the session's events (fenced, or lost the session), which it answers since 17f.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import KeyStore, openapi_document
from supervisor import AgentHost
from supervisor._futures import EventWatch
from tests.gateway.agents import echo
from tests.gateway.conftest import tenant_client
from tests.gateway.serve_process import frames

SESSION = "acme/s"
PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}


@pytest.fixture
def client(tmp_path: Path, host: AgentHost) -> Iterator[httpx.Client]:
    """A client of the tenant's session ``s``, which ran one turn (events 1 to 3) and was
    then stopped and resumed, served by a gateway whose event streams see the session stop
    once they subscribed, before their first read (the stop runs as the stream subscribes,
    on the server's event loop, so its first read finds the session stopped: no race)."""
    keys = KeyStore(tmp_path)
    host.start_session(echo, SESSION, tenant_id="acme")
    host.send(SESSION, "hi", tenant_id="acme")
    host.stop_session(SESSION, tenant_id="acme")
    host.resume(SESSION, echo, tenant_id="acme")
    subscribe: Callable[..., EventWatch] = host.futures.watch

    def watch_then_stop(*args: Any, **kwargs: Any) -> EventWatch:
        watch = subscribe(*args, **kwargs)
        host.stop_session(SESSION, tenant_id="acme")
        return watch

    host.futures.watch = watch_then_stop  # type: ignore[method-assign]
    with tenant_client(host, {"echo": echo}, keys) as http:
        yield http


def test_losses_counted_without_an_event_after_them_are_told_before_the_end(
    client: httpx.Client, host: AgentHost
) -> None:
    resumed = host.events(SESSION, 1, tenant_id="acme")
    assert resumed.events == ()  # the resumed buffer holds none of the turn's events...
    assert resumed.missed == 2  # ...after the client's cursor: model_response, turn_finished
    answer = client.get("/v1/sessions/s/events", headers={"Last-Event-ID": "1"})
    assert answer.status_code == 200
    assert list(frames(iter(answer.text.splitlines()))) == [("missed", {"missed": 2})]  # was: []


def test_a_stream_from_the_start_tells_all_of_the_earlier_life_s_events(
    client: httpx.Client,
) -> None:
    answer = client.get("/v1/sessions/s/events", params={"since": "0"})
    assert answer.status_code == 200
    assert list(frames(iter(answer.text.splitlines()))) == [("missed", {"missed": 3})]  # was: []


def test_the_document_describes_the_503_of_a_node_that_cannot_serve_the_events() -> None:
    responses = openapi_document()["paths"]["/v1/sessions/{session_id}/events"]["get"]["responses"]
    assert responses["503"]["content"] == PROBLEM
    assert "fenced itself or lost the session" in responses["503"]["description"]


def test_the_losses_told_at_the_end_carry_the_cursor_a_reconnect_goes_on_from(
    client: httpx.Client, host: AgentHost
) -> None:
    # Without an ``id``, a client's ``Last-Event-ID`` stayed at 1: every reconnect was told
    # the same two losses again.
    answer = client.get("/v1/sessions/s/events", headers={"Last-Event-ID": "1"})
    assert answer.text.startswith("id: 3\nevent: missed\n")  # was: "event: missed\n"
    host.resume(SESSION, echo, tenant_id="acme")
    again = client.get("/v1/sessions/s/events", headers={"Last-Event-ID": "3"})
    assert again.status_code == 200
    assert list(frames(iter(again.text.splitlines()))) == []  # nothing lost after event 3
