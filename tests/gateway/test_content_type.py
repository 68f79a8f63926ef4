"""A request body that is not JSON answers 415 with a problem naming the type expected,
not a 422 about the body's shape; JSON sent under any JSON type (a ``charset``, a
``+json`` type, or no ``Content-Type`` at all) is read as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from gateway import openapi_document
from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem

BODIES = {
    "/v1/sessions": {"template": "echo", "session_id": "other"},
    "/v1/sessions/s1/messages": {"text": "hello"},
    "/v1/sessions/s1/steer": {"text": "be brief"},
    "/v1/sessions/s1/checkpoints": {"label": "mine"},
}
"""Every operation that takes a JSON body, with a body it accepts."""


def send(client: httpx.Client, path: str, content_type: str | None) -> httpx.Response:
    headers = {} if content_type is None else {"Content-Type": content_type}
    return client.post(path, content=json.dumps(BODIES[path]).encode(), headers=headers)


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    """A client of tenant ``acme``, which has a session ``s1``."""
    with served.client(served.keys.create("acme").key) as made:
        assert made.post("/v1/sessions", json={"template": "echo", "session_id": "s1"}).is_success
        yield made


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
    ],
)
def test_a_body_that_is_not_json_is_415_naming_the_type_expected(
    client: httpx.Client, path: str, content_type: str
) -> None:
    body = problem(send(client, path, content_type), 415, "unsupported-media-type")
    sent = content_type.partition(";")[0]
    assert body["detail"] == (
        f"the body is {sent!r}; send JSON, with 'Content-Type: application/json'"
    )
    assert body["retryable"] is False
    assert body["instance"] == path


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/merge-patch+json",
        None,
    ],
)
def test_json_under_any_json_type_or_none_is_read(
    client: httpx.Client, path: str, content_type: str | None
) -> None:
    response = send(client, path, content_type)
    assert response.is_success, response.text


def test_the_key_is_checked_before_the_body_type(served: Served) -> None:
    with served.client(None) as anonymous:
        problem(send(anonymous, "/v1/sessions", "text/plain"), 401, "unauthorized")


def test_no_body_is_left_to_the_operation_whatever_its_type(client: httpx.Client) -> None:
    """An empty body is no body: a checkpoint takes none, a steer needs one (422)."""
    empty = {"Content-Type": "text/plain"}
    taken = client.post("/v1/sessions/s1/checkpoints", content=b"", headers=empty)
    assert taken.status_code == 201, taken.text
    assert taken.json()["label"] is None
    problem(
        client.post("/v1/sessions/s1/steer", content=b"", headers=empty), 422, "invalid-request"
    )


def test_malformed_json_without_a_type_is_malformed_json(client: httpx.Client) -> None:
    problem(client.post("/v1/sessions", content=b'{"template": '), 400, "malformed-json")


def test_the_openapi_document_lists_the_415_of_the_operations_taking_a_body() -> None:
    paths = openapi_document()["paths"]
    with_415 = {
        (path, method)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if "415" in operation.get("responses", {})
    }
    assert with_415 == {
        ("/v1/sessions", "post"),
        ("/v1/sessions/{session_id}/messages", "post"),
        ("/v1/sessions/{session_id}/steer", "post"),
        ("/v1/sessions/{session_id}/checkpoints", "post"),
    }
    answer = paths["/v1/sessions"]["post"]["responses"]["415"]
    assert set(answer["content"]) == {"application/problem+json"}
