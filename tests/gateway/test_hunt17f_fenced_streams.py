"""Hunt 17f: an event stream the node refuses once the answer is on its way ends cleanly.

On a fenced cluster node (or one stopping a copy of a session it lost), a new
``AsyncAgentHost.events`` stream refuses its first read with ``NodeFenced`` /
``OwnershipLost``. ``GET .../events`` and a streamed send read it first inside their
``StreamingResponse``: a node that fenced itself between the route's checks and that read
let the error escape the answer's body, which broke off (no ``error`` frame, the chunked
body cut) after a 200. Now ``GET .../events`` answers a 503 problem when the node
refuses before the answer starts, and an ``error`` frame (then a clean end) once it has
started; a streamed send answers what its send answers (its ``answer``, or the
``error`` frame of its failure), the events it could not read left out.

A node of this process on the test's schema (``cluster_helpers``) fences itself on a
``FakeClock``: the test moves it past the lease's end at the moment under test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors import Event, Message
from gateway import KeyStore, create_app, load_templates
from supervisor import AgentHost, AsyncAgentHost, EventStream, NodeFenced
from tests.gateway.conftest import TEMPLATES, run_server, stop_server
from tests.gateway.serve_process import frames
from tests.supervisor.cluster_helpers import Cluster, FakeClock
from tests.supervisor.host_helpers import template

TTL = 60.0  # the node's own renewals (every ttl / 3) stay out of the test's way
FENCED = TTL + 2.0  # past ttl - margin (margin = ttl / 4) without a renewal
WAIT = 10.0
SESSION = "acme/s"


class FencedAtFirstRead(EventStream):
    """A stream whose node fences itself (``fence``) right before its first read."""

    fence: Callable[[], None] | None = None

    async def __anext__(self) -> Event:
        fence, self.fence = self.fence, None
        if fence is not None:
            fence()
        return await super().__anext__()


class FencingHost(AsyncAgentHost):
    """``AsyncAgentHost`` whose ``events`` streams meet a fence: ``fence_now`` (called
    once the stream is made, before the route answers) and/or ``fence_at_read`` (called
    at the stream's first read, once the answer started)."""

    fence_now: Callable[[], None] | None = None
    fence_at_read: Callable[[], None] | None = None

    def events(
        self, session_id: str, since: int | None = None, *, tenant_id: str | None = None
    ) -> EventStream:
        stream = super().events(session_id, since, tenant_id=tenant_id)
        if self.fence_now is not None:
            self.fence_now()
        if self.fence_at_read is None:
            return stream
        fenced = FencedAtFirstRead(self.host, session_id, since, tenant_id)
        fenced.fence = self.fence_at_read
        return fenced


class Served:
    """A node (``host``, on ``clock``) serving session ``s`` of tenant ``acme``."""

    def __init__(self, host: AgentHost, ahost: FencingHost, clock: FakeClock, key: str, url: str):
        self.host = host
        self.ahost = ahost
        self.clock = clock
        self.key = key
        self.url = url

    def fence(self) -> None:
        self.clock.advance(FENCED)
        assert self.host.node is not None
        assert self.host.node.fenced is not None

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=WAIT)


@pytest.fixture
def served(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[Served]:
    cluster = Cluster(pg_dsn, pg_schema)
    keys = KeyStore(tmp_path)
    try:
        clock = FakeClock()
        host = cluster.node("a", ttl=TTL, clock=clock, call_timeout=WAIT)
        host.start_session(template(), SESSION, tenant_id="acme")
        ahost = FencingHost(host)
        url, server, thread = run_server(create_app(ahost, load_templates(TEMPLATES), keys))
        try:
            yield Served(host, ahost, clock, keys.create("acme").key, url)
        finally:
            stop_server(server, thread)
    finally:
        keys.close()
        cluster.close()


def _node_fenced(data: dict[str, Any]) -> None:
    assert (data["status"], data["type"]) == (503, "/problems/node-fenced")
    assert data["retryable"] is True


def _body_frames(answer: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """The frames of a streamed answer read to its end (a body cut off raises)."""
    return list(frames(iter(answer.read().decode().splitlines())))


def test_events_refused_before_the_answer_starts_is_a_503(served: Served) -> None:
    served.ahost.fence_now = served.fence  # fenced after the stream was made
    with served.client() as client:
        answer = client.get("/v1/sessions/s/events")  # was: 200, then the body cut off
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    _node_fenced(answer.json())


def test_events_refused_at_the_first_read_end_with_an_error_frame(served: Served) -> None:
    served.ahost.fence_at_read = served.fence  # once the answer started
    with served.client() as client, client.stream("GET", "/v1/sessions/s/events") as answer:
        assert answer.status_code == 200
        got = _body_frames(answer)  # was: httpx.RemoteProtocolError (the body cut off)
    assert [kind for kind, _ in got] == ["error"]
    _node_fenced(got[0][1])


def _send_then(served: Served, before: bool) -> None:
    """The node fences itself right ``before`` the send is submitted (the route's checks
    passed), or right after its turn ran (its answer is in)."""
    submit = served.host.futures.send

    def send(*args: Any, **kwargs: Any) -> Future[Message]:
        if before:
            served.fence()
        future = submit(*args, **kwargs)
        if not before:
            future.result(timeout=WAIT)
            served.fence()
        return future

    served.host.futures.send = send  # type: ignore[method-assign]


def _streamed_send(served: Served) -> list[tuple[str, dict[str, Any]]]:
    with (
        served.client() as client,
        client.stream(
            "POST", "/v1/sessions/s/messages", json={"text": "hi", "stream": True}
        ) as answer,
    ):
        assert answer.status_code == 200
        return _body_frames(answer)  # was: httpx.RemoteProtocolError


def test_a_streamed_send_refused_once_streaming_sends_its_error_frame(served: Served) -> None:
    _send_then(served, before=True)
    got = _streamed_send(served)
    assert [kind for kind, _ in got] == ["error"]
    _node_fenced(got[0][1])
    with pytest.raises(NodeFenced):
        served.host.events(SESSION, tenant_id="acme")


def test_a_streamed_send_whose_turn_ran_before_the_fence_sends_its_answer(
    served: Served,
) -> None:
    """The turn ran (and was saved): an ``error`` frame would tell the client to send it
    again. The send's events, which the fenced node does not hand out, are left out."""
    _send_then(served, before=False)
    got = _streamed_send(served)
    assert [kind for kind, _ in got] == ["answer"]
    assert got[0][1]["message"]["content"] == "echo: hi"


def test_events_served_again_once_the_node_renewed(served: Served) -> None:
    """(The check before the answer refuses only while the node is fenced.)"""
    served.fence()
    with served.client() as client:
        assert client.get("/v1/sessions/s/events").status_code == 503
        assert served.host.node is not None
        assert served.host.node.renew()
        sent = client.post("/v1/sessions/s/messages", json={"text": "hi"})
        assert sent.status_code == 200, sent.text
        with client.stream("GET", "/v1/sessions/s/events?since=0") as answer:
            assert answer.status_code == 200
            kinds = []
            for kind, _ in frames(answer.iter_lines()):
                kinds.append(kind)
                if kind == "turn_finished":
                    break
    assert kinds == ["turn_started", "model_response", "turn_finished"]
