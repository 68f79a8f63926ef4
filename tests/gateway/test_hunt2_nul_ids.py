"""A cluster node (a ``PostgresKeyStore``) answers a session id holding a NUL (``%00`` in
the path), which PostgreSQL text cannot hold, as the missing session it is: a 404
problem on every endpoint, never a 500; and the node serves on."""

from __future__ import annotations

import pytest

from tests.gateway.cluster_nodes import Nodes

pytestmark = pytest.mark.timeout(120)

CALLS = [
    ("GET", "/v1/sessions/{}", None),
    ("DELETE", "/v1/sessions/{}", None),
    ("POST", "/v1/sessions/{}/messages", {"text": "x"}),
    ("POST", "/v1/sessions/{}/messages", {"text": "x", "stream": True}),
    ("POST", "/v1/sessions/{}/steer", {"text": "x"}),
    ("GET", "/v1/sessions/{}/history", None),
    ("GET", "/v1/sessions/{}/checkpoints", None),
    ("POST", "/v1/sessions/{}/checkpoints", {}),
    ("GET", "/v1/sessions/{}/export", None),
    ("GET", "/v1/sessions/{}/events", None),
]


def test_an_id_with_a_nul_is_a_missing_session_on_every_endpoint(nodes: Nodes) -> None:
    node = nodes.start("a")
    key = node.keys.create("acme").key
    with node.client(key) as c:
        assert (
            c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).status_code == 201
        )
        for method, path, body in CALLS:
            for odd in ("%00", "s%00", "a%00b"):
                answer = c.request(method, path.format(odd), json=body)
                assert answer.status_code == 404, (method, path, odd, answer.text)
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["type"] == "/problems/session-not-found"
        missing = c.get("/v1/sessions/s/export", params={"checkpoint_id": "\x00"})
        assert missing.status_code == 404, missing.text
        assert c.post("/v1/sessions/s/messages", json={"text": "fine"}).json()["message"] == {
            "role": "assistant",
            "content": "echo: fine",
        }
