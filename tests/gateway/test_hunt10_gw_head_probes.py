"""Hunt 10: ``/healthz`` and ``/readyz`` answer HEAD as they answer GET (status and
headers, no body): uptime monitors and some load balancers probe with HEAD, and got 405
from a healthy server, which they then reported down. The OpenAPI document is unchanged."""

from __future__ import annotations

import httpx

from gateway import openapi_document
from tests.gateway.conftest import Served


def test_the_probes_answer_head(served: Served) -> None:
    with httpx.Client(base_url=served.url) as client:
        for path in ("/healthz", "/readyz"):
            got, head = client.get(path), client.head(path)
            assert (got.status_code, head.status_code) == (200, 200), (path, head.text)
            assert head.content == b""
            assert head.headers["content-type"] == got.headers["content-type"]
            assert head.headers["content-length"] == str(len(got.content))


def test_the_document_lists_the_probes_get_only() -> None:
    paths = openapi_document()["paths"]
    assert set(paths["/healthz"]) == {"get"}
    assert set(paths["/readyz"]) == {"get"}
