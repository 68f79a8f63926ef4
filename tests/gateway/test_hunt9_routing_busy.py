"""Hunt 9: a cluster's database that is busy (``StoreBusy``: a look-up cancelled after
waiting for a lock) while a node routes a request is answered by the routing as an
unreachable database is: a retryable 503 naming the node (``X-Sessionvisor-Node``). It
used to reach the app's last-resort handler, which answered without that header."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.routing import NODE_HEADER
from supervisor import StoreBusy
from tests.gateway.cluster_nodes import Nodes, created


def _busy(*_args: Any) -> Any:
    """What the store raises once the server cancelled a read that waited for a lock."""
    raise StoreBusy("127.0.0.1:5432/test", "looking up an owner", TimeoutError("lock timeout"))


def test_a_busy_database_during_routing_is_a_named_retryable_503(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "s")
    monkeypatch.setattr(b.host.node, "owner", _busy)  # b must look the owner up

    with b.client(key) as client:
        answer = client.post("/v1/sessions/s/messages", json={"text": "one"})

    assert answer.status_code == 503, answer.text
    assert answer.headers[NODE_HEADER] == "b"
    assert answer.headers["retry-after"] == "1"
    problem = answer.json()
    assert problem["type"] == "/problems/owner-unavailable"
    assert "busy" in problem["detail"]
    monkeypatch.undo()  # the database answers again: so does the session, through b
    with b.client(key) as client:
        again = client.post("/v1/sessions/s/messages", json={"text": "two"})
    assert (again.status_code, again.headers[NODE_HEADER]) == (200, "a"), again.text


def test_a_busy_key_store_during_routing_is_a_named_retryable_503(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "s")
    monkeypatch.setattr(b.keys, "authenticate", _busy)

    with b.client(key) as client:
        answer = client.get("/v1/sessions/s/history")

    assert answer.status_code == 503, answer.text
    assert answer.headers[NODE_HEADER] == "b"
    assert answer.json()["type"] == "/problems/owner-unavailable"
