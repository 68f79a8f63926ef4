"""The whole API fuzzed from its OpenAPI document (schemathesis, issue 16): whatever a
client sends, the gateway answers without a server error and as its document says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import response_schema_conformance

from gateway import KeyStore, create_app, load_templates
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, run_server, stop_server

EXAMPLES = 20
"""Cases per operation: every endpoint, its parameters and bodies drawn from the document."""


def test_no_server_error_and_every_answer_matches_the_document(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    app = create_app(AsyncAgentHost(host), load_templates(TEMPLATES), keys)
    headers = {"Authorization": f"Bearer {keys.create('fuzz').key}"}
    url, server, thread = run_server(app)  # a real server: what clients reach
    tried: list[str] = []
    try:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), f"the document has an invalid operation: {result}"
            operation = result.ok()
            tried.append(f"{operation.method.upper()} {operation.path}")

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case: schemathesis.Case[Any]) -> None:
                response = case.call(headers=headers)
                assert response.status_code < 500, (
                    f"{case.method} {case.formatted_path}: {response.status_code} "
                    f"{response.text[:500]}"
                )
                case.validate_response(response, checks=[response_schema_conformance])

            fuzz()
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
    assert "POST /v1/sessions/{session_id}/messages" in tried
    assert len(tried) >= 12
