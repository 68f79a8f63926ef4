"""Hunt 9: a session id in a path is capped at the length a create allows
(``MAX_SESSION_ID``): a longer one answers the 404 of an unknown id on every endpoint
(nothing leaks), whose detail does not echo the id back in full, without a look-up.
It used to be looked up (in a cluster, in the database too) and echoed whole."""

from __future__ import annotations

import httpx
import pytest

from gateway.routing import NODE_HEADER
from gateway.schemas import MAX_SESSION_ID
from tests.gateway.cluster_nodes import Nodes
from tests.gateway.conftest import Served

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

LONG_IDS = ["a" * (MAX_SESSION_ID + 1), "b" * 5_000]


def _assert_missing(answer: httpx.Response, session_id: str) -> None:
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "/problems/session-not-found"
    assert session_id not in problem["detail"]
    assert session_id[:20] in problem["detail"]
    assert len(problem["detail"]) < 300
    assert f"at most {MAX_SESSION_ID}" in problem["detail"]


def test_a_path_id_past_the_cap_is_a_missing_session_on_every_endpoint(served: Served) -> None:
    key = served.keys.create("acme").key
    longest = "c" * MAX_SESSION_ID
    with served.client(key) as c:
        made = c.post("/v1/sessions", json={"template": "echo", "session_id": longest})
        assert made.status_code == 201, made.text
        for method, path, body in CALLS:
            for session_id in LONG_IDS:
                _assert_missing(c.request(method, path.format(session_id), json=body), session_id)
        # the longest id a create allows is served as any other
        answer = c.post(f"/v1/sessions/{longest}/messages", json={"text": "fine"})
        assert answer.json()["message"]["content"] == "echo: fine"
    with served.client(None) as anonymous:  # no key: 401 first, as for any id
        assert anonymous.get(f"/v1/sessions/{LONG_IDS[1]}").status_code == 401


def test_a_cluster_node_answers_a_path_id_past_the_cap_as_missing(nodes: Nodes) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    with b.client(key) as c:
        for session_id in LONG_IDS:
            answer = c.post(f"/v1/sessions/{session_id}/messages", json={"text": "x"})
            _assert_missing(answer, session_id)
            assert answer.headers[NODE_HEADER] == "b"
