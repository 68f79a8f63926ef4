"""Hunt 11: a path with a trailing slash answers the API's 404 problem, never a 307 to an
absolute ``http://`` URL (behind a TLS proxy that sent the client, its key and its body,
to plain HTTP)."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import Served


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/sessions/"), ("POST", "/v1/sessions/"), ("GET", "/v1/sessions/s/events/")],
)
def test_trailing_slash_is_a_404_problem_without_redirect(
    served: Served, method: str, path: str
) -> None:
    with served.client(served.keys.create("acme").key) as client:
        answer = client.request(method, path, json={"template": "echo"})
    assert answer.status_code == 404, answer.text
    assert "location" not in answer.headers
    assert answer.headers["content-type"].startswith("application/problem+json")
    body = answer.json()
    assert body["status"] == 404
    assert body["detail"] == f"no such path; the API's paths end without '/': {path[:-1]}"
    with served.client(served.keys.create("acme").key) as client:
        assert client.get("/v1/sessions").status_code == 200  # the path without '/' works
