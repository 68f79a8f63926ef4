"""Hunt 11: dropping a session's stale record on a cluster node (a DELETE of a session the
node does not run) first reads the session's owner: while a live other node owns it (the
id was created anew there since the request was routed here), its checkpoints and record
stay, and the delete answers a retryable 503 (the retry is routed to the owner). Before,
the first checkpoint of that session was deleted from under it."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from gateway import routes_sessions
from gateway._context import Gateway, host_id
from supervisor import SessionOwnedElsewhere
from tests.gateway.cluster_nodes import Nodes, created


def test_a_stale_record_of_a_session_another_live_node_owns_is_kept(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    assert created(b, key, "s")["status"] == "active"  # b owns it, its first checkpoint saved
    internal = host_id("acme", "s")
    assert b.host.store.list(internal), "the create saved no checkpoint"
    # every record counts as stale, as one older than STALE_RECORD_SECONDS would
    monkeypatch.setattr(routes_sessions, "STALE_RECORD_SECONDS", -60.0)
    app = a._server.config.app
    assert isinstance(app, FastAPI)
    gateway_a: Gateway = app.state.gateway

    refused: SessionOwnedElsewhere | None = None
    try:
        routes_sessions._forget_stale_record(gateway_a, "acme", internal)
    except SessionOwnedElsewhere as exc:
        refused = exc

    assert b.host.store.list(internal), "the owner's checkpoint was deleted"
    assert refused is not None
    assert refused.node == "b"
    record = a.keys.session_row(internal)
    assert record is not None
    assert record.template == "echo"
    with a.client(key) as client:
        assert client.get("/v1/sessions/s").json()["status"] == "active"  # via b, its owner
