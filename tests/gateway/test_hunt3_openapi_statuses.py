"""The OpenAPI document lists every problem answer of the operations that can give one
beyond those all operations list (README: "The OpenAPI document lists every operation's
problem answers"): a send answered 502 (provider), 507 (state too large) and 500
(template, unreadable checkpoint) undocumented, as did history, checkpoint and export."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from actors import AgentTemplate, Message, ModelResponse, ProviderError, Tool
from gateway import KeyStore, create_app, openapi_document
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import run_server, stop_server
from tests.gateway.test_gateway import problem

PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("post", "/v1/sessions/{session_id}/messages", {"500", "502", "507"}),
        ("get", "/v1/sessions/{session_id}/history", {"500"}),
        ("post", "/v1/sessions/{session_id}/checkpoints", {"500", "507"}),
        ("get", "/v1/sessions/{session_id}/export", {"500"}),
    ],
)
def test_the_document_lists_the_operations_server_side_problems(
    method: str, path: str, statuses: set[str]
) -> None:
    responses = openapi_document()["paths"][path][method]["responses"]
    for status in statuses:
        assert responses[status]["content"] == PROBLEM, (method, path, status)


class Unreachable:
    """A model whose provider cannot be reached."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        raise ProviderError("the provider answered 503")


def test_a_provider_error_answers_a_documented_502(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    templates = {"down": AgentTemplate(model=Unreachable())}
    url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
    try:
        headers = {"Authorization": f"Bearer {keys.create('acme').key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
            assert c.post("/v1/sessions", json={"template": "down", "session_id": "s"}).is_success
            answer = c.post("/v1/sessions/s/messages", json={"text": "hi"})
            assert problem(answer, 502, "provider-error")["retryable"] is True
            documented = c.get("/openapi.json").json()
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
    operation = documented["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    assert operation["responses"]["502"]["content"] == PROBLEM
