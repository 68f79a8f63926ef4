"""Hunt 10: a problem echoes what the client sent shortened, not whole: an unknown
template's name, an unknown field's name, a quoted metadata key came back in full (a
body of a megabyte answered with a megabyte, twice: in ``detail`` and in ``errors``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem

BIG = "k" * 100_000
SHOWN = "k" * 100 + "... (100000 characters)"


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with served.client(served.keys.create("acme").key) as made:
        yield made


def test_an_unknown_template_is_named_by_its_start(client: httpx.Client) -> None:
    answer = client.post("/v1/sessions", json={"template": BIG})
    body = problem(answer, 422, "unknown-template")
    assert body["detail"] == f"no template {SHOWN!r}; this server has: echo, streaming"
    assert len(answer.content) < 1000


def test_an_unknown_field_is_named_by_its_start(client: httpx.Client) -> None:
    answer = client.post("/v1/sessions", json={"template": "echo", BIG: 1})
    body = problem(answer, 422, "invalid-request")
    assert body["detail"] == f"body.{SHOWN}: Extra inputs are not permitted"
    assert body["errors"] == [
        {"loc": ["body", SHOWN], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
    ]
    assert len(answer.content) < 1000


def test_a_quoting_message_is_shortened(client: httpx.Client) -> None:
    answer = client.post("/v1/sessions", json={"template": "echo", "metadata": {BIG: "v"}})
    body = problem(answer, 422, "invalid-request")
    error: dict[str, Any] = body["errors"][0]
    assert error["loc"] == ["body", "metadata"]
    assert error["msg"].startswith("Value error, a key must be 1 to 200 characters, got 'kkk")
    assert error["msg"].endswith("... (100054 characters)")
    assert len(answer.content) < 2000


def test_short_names_and_list_positions_are_kept(client: httpx.Client) -> None:
    body = problem(client.post("/v1/sessions", json={"template": "nope"}), 422, "unknown-template")
    assert body["detail"] == "no template 'nope'; this server has: echo, streaming"
    answer = client.post("/v1/sessions", json={"template": "echo", "metadata": {"a": ["x"]}})
    error = problem(answer, 422, "invalid-request")["errors"][0]
    assert error["loc"] == ["body", "metadata", "a"]
    assert error["type"] == "string_type"
