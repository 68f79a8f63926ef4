"""Hunt 10: a forwarded request's watch on its owner survives a failed read of the database.

While a node waits for a forwarded answer (or relays a stream), it reads the owner's
row every ``ttl / 3`` to notice an owner that died. A read the database failed
(``StoreBusy``, ``StoreUnreachable``) escaped the relay: a stream relayed from a live
owner broke off mid-body (no ``error`` frame, the chunked body cut), and a request
still waiting for its answer got the server's bare 500. A failed read now tells
nothing about the owner: the wait goes on, and only reads failing for longer than the
TTL end it (a retryable 503, or an ``error`` frame in a stream).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gateway.routing import NODE_HEADER
from supervisor import StoreBusy
from tests.gateway.cluster_nodes import WAIT, Nodes, created

TTL = 3.0  # the relay reads the owner's row every second


def test_a_relayed_stream_goes_on_through_failed_owner_reads(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a", ttl=TTL), nodes.start("b", ttl=TTL)
    key = a.keys.create("acme").key
    created(a, key, "s")
    node_b = b.host.node
    assert node_b is not None
    failed = threading.Event()

    def busy(*_args: Any) -> Any:
        failed.set()
        raise StoreBusy("127.0.0.1:5432/test", "looking up an owner", TimeoutError("lock"))

    with (
        b.client(key) as client,
        client.stream("GET", "/v1/sessions/s/events") as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers[NODE_HEADER] == "a"
        monkeypatch.setattr(node_b, "owner", busy)  # the database fails b's watch reads
        assert failed.wait(WAIT), "the relay never read the owner's row"
        with a.client(key) as direct:
            answer = direct.post("/v1/sessions/s/messages", json={"text": "one"})
        assert answer.status_code == 200, answer.text
        seen = []
        for line in stream.iter_lines():
            seen.append(line)
            if line == "event: turn_finished":
                break
    assert "event: turn_started" in seen
    assert "event: error" not in seen


def test_owner_reads_failing_longer_than_the_ttl_end_a_relayed_stream_with_an_error_frame(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a", ttl=TTL), nodes.start("b", ttl=TTL)
    key = a.keys.create("acme").key
    created(a, key, "s")
    node_b = b.host.node
    assert node_b is not None

    def busy(*_args: Any) -> Any:
        raise StoreBusy("127.0.0.1:5432/test", "looking up an owner", TimeoutError("lock"))

    with (
        b.client(key) as client,
        client.stream("GET", "/v1/sessions/s/events") as stream,
    ):
        assert stream.headers[NODE_HEADER] == "a"
        monkeypatch.setattr(node_b, "owner", busy)
        rest = list(stream.iter_lines())  # ends: no wait as long as the outage
    assert "event: error" in rest
    error = json.loads(rest[rest.index("event: error") + 1].removeprefix("data: "))
    assert (error["status"], error["type"]) == (503, "/problems/owner-unavailable")
