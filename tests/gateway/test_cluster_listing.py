"""A cluster's gateways list a tenant's sessions, and count them against its limit, across
every node (``gateway._listing``, ``PostgresKeyStore.reserve_session``), on a real
PostgreSQL with real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import Limits
from gateway.routing import FORWARDED_HEADER, NODE_HEADER
from tests.gateway.cluster_nodes import (
    WAIT,
    GatewayNode,
    Nodes,
    ServeProcess,
    created,
    listening_socket,
)
from tests.supervisor.cluster_helpers import sql

LIMIT_DETAIL = "tenant has {} sessions, the most allowed; delete one first"


def listed(node: GatewayNode, key: str) -> list[dict[str, Any]]:
    """``GET /v1/sessions`` through ``node``: the sessions, in order."""
    with node.client(key) as client:
        answer = client.get("/v1/sessions")
    assert answer.status_code == 200, answer.text
    assert answer.headers[NODE_HEADER] == node.node_id
    sessions: list[dict[str, Any]] = answer.json()["sessions"]
    return sessions


def by_id(sessions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["session_id"]: s for s in sessions}


def test_every_node_lists_every_session_of_the_tenant_and_no_other_tenants(
    nodes: Nodes,
) -> None:
    a, b, c = nodes.start("a"), nodes.start("b"), nodes.start("c")
    acme, other = a.keys.create("acme").key, a.keys.create("other").key
    for node in (a, b, c):
        with node.client(acme) as client:
            body = {"template": "echo", "session_id": f"on-{node.node_id}", "metadata": {"k": "v"}}
            assert client.post("/v1/sessions", json=body).status_code == 201
    created(c, other, "theirs")
    with a.client(acme) as client:  # through a, forwarded to b: b's entry counts it
        assert client.post("/v1/sessions/on-b/messages", json={"text": "hi"}).status_code == 200
    seen = [listed(node, acme) for node in (a, b, c)]
    assert seen[0] == seen[1] == seen[2]  # the same list, in the same order, on every node
    assert [s["session_id"] for s in seen[0]] == ["on-a", "on-b", "on-c"]
    for entry in seen[0]:
        assert (entry["tenant_id"], entry["template"], entry["status"]) == (
            "acme",
            "echo",
            "active",
        )
        assert (entry["model"], entry["metadata"]) == ("echo", {"k": "v"})
    usage = {s["session_id"]: s["usage"]["total"] for s in seen[0]}
    assert usage["on-b"] > 0
    assert usage["on-a"] == usage["on-c"] == 0
    for node in (a, b, c):
        assert [s["session_id"] for s in listed(node, other)] == ["theirs"]
    with httpx.Client(base_url=b.url, timeout=WAIT) as raw:  # forwarded: b's own only
        own = raw.get(
            "/v1/sessions", headers={"Authorization": f"Bearer {acme}", FORWARDED_HEADER: "a"}
        )
    assert [s["session_id"] for s in own.json()["sessions"]] == ["on-b"]


def test_a_session_whose_owner_does_not_answer_is_listed_from_the_store_as_unavailable(
    nodes: Nodes,
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    with a.client(key) as client:
        body = {"template": "echo", "session_id": "cut-off", "metadata": {"team": "x"}}
        assert client.post("/v1/sessions", json=body).status_code == 201
        assert client.post("/v1/sessions/cut-off/messages", json={"text": "one"}).status_code == 200
    created(b, key, "fine")
    before = by_id(listed(b, key))["cut-off"]
    a.stop_serving()  # a holds its lease (heartbeats on) but answers nothing
    after = listed(b, key)
    assert [s["session_id"] for s in after] == ["cut-off", "fine"]
    entry, fine = by_id(after)["cut-off"], by_id(after)["fine"]
    assert entry["status"] == "unavailable"
    assert fine["status"] == "active"
    same = ("session_id", "tenant_id", "template", "model", "metadata", "usage")
    assert {k: entry[k] for k in same} == {k: before[k] for k in same}
    assert entry["metadata"] == {"team": "x"}


def test_owners_that_hang_are_asked_in_parallel_and_bounded_by_the_timeout(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout = 1.0
    monkeypatch.setattr("gateway._listing.LIST_TIMEOUT", timeout)
    a, b, c = nodes.start("a"), nodes.start("b"), nodes.start("c")
    key = a.keys.create("acme").key
    created(a, key, "on-a")
    created(c, key, "on-c")
    created(b, key, "on-b")
    frozen = [listening_socket(), listening_socket()]  # connections open, nothing answers
    try:
        for node_id, sock in zip(("a", "c"), frozen, strict=True):
            address = f"http://127.0.0.1:{sock.getsockname()[1]}"
            update = "UPDATE {s}.nodes SET address = %s WHERE node_id = %s"
            sql(b.host.store, update, (address, node_id))  # type: ignore[arg-type]
        started = time.monotonic()
        seen = by_id(listed(b, key))
        elapsed = time.monotonic() - started
    finally:
        for sock in frozen:
            sock.close()
    assert {sid: s["status"] for sid, s in seen.items()} == {
        "on-a": "unavailable",
        "on-b": "active",
        "on-c": "unavailable",
    }
    assert timeout <= elapsed < 2 * timeout  # both waited for at once, not one after another


def test_a_killed_nodes_sessions_are_listed_as_unavailable(
    pg_dsn: str, pg_schema: str, tmp_path: Path, nodes: Nodes
) -> None:
    owner = ServeProcess(pg_dsn, pg_schema, tmp_path, "a", ttl=60.0)
    try:
        b = nodes.start("b")
        key = b.keys.create("acme").key
        with httpx.Client(base_url=owner.url, headers={"Authorization": f"Bearer {key}"}) as a:
            body = {"template": "echo", "session_id": "s", "metadata": {"k": "v"}}
            assert a.post("/v1/sessions", json=body).status_code == 201
            assert a.post("/v1/sessions/s/messages", json={"text": "one"}).status_code == 200
        owner.kill()  # its lease lasts 60 s more: nobody may take the session yet
        (entry,) = listed(b, key)
    finally:
        owner.close()
    assert (entry["session_id"], entry["status"], entry["template"]) == ("s", "unavailable", "echo")
    assert entry["metadata"] == {"k": "v"}


def test_a_drained_nodes_sessions_stay_listed(nodes: Nodes) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "moving")
    a.stop()  # drained: released, and b's sweeper takes it over
    (entry,) = listed(b, key)
    assert entry["session_id"] == "moving"
    assert entry["status"] in {"active", "hibernated"}  # taken over, or not yet


def test_a_session_deleted_through_any_node_leaves_every_listing(nodes: Nodes) -> None:
    a, b, c = nodes.start("a"), nodes.start("b"), nodes.start("c")
    key = a.keys.create("acme").key
    created(a, key, "gone")
    created(b, key, "kept")
    with c.client(key) as client:  # owned by a: forwarded there
        assert client.delete("/v1/sessions/gone").status_code == 204
    for node in (a, b, c):
        assert [s["session_id"] for s in listed(node, key)] == ["kept"]


def test_the_session_limit_counts_the_tenants_sessions_on_every_node(nodes: Nodes) -> None:
    limits = Limits(max_sessions_per_tenant=2)
    a, b, c = (nodes.start(n, limits=limits) for n in ("a", "b", "c"))
    acme, other = a.keys.create("acme").key, a.keys.create("other").key
    created(a, acme, "one")
    created(b, acme, "two")
    with c.client(acme) as client:
        refused = client.post("/v1/sessions", json={"template": "echo", "session_id": "three"})
    assert refused.status_code == 409
    assert refused.json()["type"] == "/problems/session-limit"
    assert refused.json()["detail"] == LIMIT_DETAIL.format(2)
    created(c, other, "theirs")  # another tenant's count is its own
    with c.client(acme) as client:
        assert client.delete("/v1/sessions/one").status_code == 204  # a's, forwarded
    created(c, acme, "three")
    assert [s["session_id"] for s in listed(a, acme)] == ["two", "three"]


def test_two_nodes_creating_at_the_limit_at_once_admit_exactly_one(nodes: Nodes) -> None:
    limits = Limits(max_sessions_per_tenant=3)
    a, b = nodes.start("a", limits=limits), nodes.start("b", limits=limits)
    key = a.keys.create("acme").key
    created(a, key, "x")
    created(b, key, "y")
    for round_ in range(5):
        barrier = threading.Barrier(2)
        answers: dict[str, httpx.Response] = {}

        def create(node: GatewayNode, sid: str, barrier: threading.Barrier) -> None:
            with node.client(key) as client:
                barrier.wait(WAIT)
                answers[node.node_id] = client.post(  # noqa: B023 (joined in this round)
                    "/v1/sessions", json={"template": "echo", "session_id": sid}
                )

        threads = [
            threading.Thread(target=create, args=(node, f"{node.node_id}{round_}", barrier))
            for node in (a, b)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        statuses = sorted(answer.status_code for answer in answers.values())
        assert statuses == [201, 409], [answer.text for answer in answers.values()]
        (loser,) = (answer for answer in answers.values() if answer.status_code == 409)
        assert loser.json()["detail"] == LIMIT_DETAIL.format(3)
        (winner,) = (answer for answer in answers.values() if answer.status_code == 201)
        assert len(listed(a, key)) == 3
        with b.client(key) as client:  # make room for the next round
            gone = client.delete(f"/v1/sessions/{winner.json()['session_id']}")
        assert gone.status_code == 204
