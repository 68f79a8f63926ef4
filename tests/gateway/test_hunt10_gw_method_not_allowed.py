"""Hunt 10: a method a path does not take answers 405 with ``Allow`` naming every method
the path takes (RFC 9110 requires the header): the handler dropped the header, and
Starlette's named only the first route's methods (``GET`` for ``/v1/sessions/{id}``,
which takes ``DELETE`` too)."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/sessions/s1", "DELETE, GET"),
        ("PATCH", "/v1/sessions/s1", "DELETE, GET"),
        ("DELETE", "/v1/sessions", "GET, POST"),
        ("GET", "/v1/sessions/s1/messages", "POST"),
        ("PUT", "/v1/sessions/s1/checkpoints", "GET, POST"),
        ("POST", "/v1/sessions/s1/events", "GET"),
        ("POST", "/healthz", "GET, HEAD"),
    ],
)
def test_a_405_names_every_method_of_the_path(
    served: Served, method: str, path: str, allowed: str
) -> None:
    with served.client(served.keys.create("acme").key) as client:
        answer = client.request(method, path)
    body = problem(answer, 405, "method-not-allowed")
    assert answer.headers["allow"] == allowed
    assert body["detail"] == f"{method!r} is not allowed here; this path allows {allowed}"
    assert body["instance"] == path


def test_a_405_needs_no_key_and_reveals_no_session(served: Served) -> None:
    with served.client(None) as client:
        answer = client.request("PUT", "/v1/sessions/nobody")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "DELETE, GET"
    with httpx.Client(base_url=served.url) as bare:  # a HEAD: the headers, no body
        head = bare.head("/v1/sessions")
    assert (head.status_code, head.headers["allow"]) == (405, "GET, POST")
