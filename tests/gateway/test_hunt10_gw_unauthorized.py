"""Hunt 10: every 401 carries the ``WWW-Authenticate`` challenge RFC 9110 requires of it,
of the bearer scheme (RFC 6750): ``error="invalid_token"`` when the token sent is not
valid, no error when none was sent. The answers had none, so clients that act on the
challenge (re-authenticate, or tell a missing key from a bad one) could not."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gateway import KeyStore, create_app, load_templates
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, Served, run_server, stop_server
from tests.gateway.test_gateway import problem

MISSING = 'Bearer realm="sessionvisor"'
INVALID = 'Bearer realm="sessionvisor", error="invalid_token"'


@pytest.mark.parametrize(
    ("headers", "challenge", "detail"),
    [
        ({}, MISSING, "send an API key as 'Authorization: Bearer sv_...'"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, MISSING, "send an API key"),
        ({"Authorization": "Bearer sv_unknown"}, INVALID, "the API key is unknown or revoked"),
    ],
)
def test_a_401_says_how_to_authenticate(
    served: Served, headers: dict[str, str], challenge: str, detail: str
) -> None:
    with httpx.Client(base_url=served.url, headers=headers) as client:
        for answer in (
            client.get("/v1/sessions"),
            client.post("/v1/sessions/s/messages", json={"text": "hi"}),
        ):
            body = problem(answer, 401, "unauthorized")
            assert answer.headers["www-authenticate"] == challenge
            assert body["detail"].startswith(detail)


def test_a_revoked_key_is_an_invalid_token(served: Served) -> None:
    made = served.keys.create("acme")
    served.keys.revoke(made.info.key_id)
    with served.client(made.key) as client:
        answer = client.get("/v1/sessions")
    problem(answer, 401, "unauthorized")
    assert answer.headers["www-authenticate"] == INVALID


def test_the_metrics_token_is_asked_for_with_its_own_realm(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    app = create_app(AsyncAgentHost(host), load_templates(TEMPLATES), keys, metrics_token="tok")
    url, server, thread = run_server(app)
    try:
        with httpx.Client(base_url=url) as client:
            none = client.get("/metrics")
            wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
            right = client.get("/metrics", headers={"Authorization": "Bearer tok"})
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
    problem(none, 401, "unauthorized")
    assert none.headers["www-authenticate"] == 'Bearer realm="sessionvisor metrics"'
    problem(wrong, 401, "unauthorized")
    assert wrong.headers["www-authenticate"] == (
        'Bearer realm="sessionvisor metrics", error="invalid_token"'
    )
    assert right.status_code == 200
    assert "www-authenticate" not in right.headers
