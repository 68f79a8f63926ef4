"""Hunt 10: a problem's ``instance`` is the request's path only, percent-encoded and
bounded: a ``?`` or a line break sent escaped in the path does not come back as a query
or a raw control character, and a path of kilobytes is not echoed back whole."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway import Limits
from gateway.problems import MAX_INSTANCE, instance_of
from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with served.client(served.keys.create("acme").key) as made:
        yield made


def test_an_escaped_question_mark_in_the_path_is_no_query_in_instance(
    client: httpx.Client,
) -> None:
    body = problem(client.get("/v1/sessions/a%3Ftoken%3Dsecret?x=1"), 404, "session-not-found")
    assert body["instance"] == "/v1/sessions/a%3Ftoken=secret"


def test_control_characters_and_non_ascii_are_escaped(client: httpx.Client) -> None:
    body = problem(client.get("/v1/sessions/a%0Ab%C3%A9/history"), 404, "session-not-found")
    assert body["instance"] == "/v1/sessions/a%0Ab%C3%A9/history"


def test_a_huge_path_is_not_echoed(client: httpx.Client) -> None:
    long_path = "/v1/sessions/" + "x" * 5000
    body = problem(client.get(long_path), 404, "session-not-found")
    assert "instance" not in body
    unknown = problem(client.get("/v1/nothing/" + "y" * 5000), 404, "not-found")
    assert "instance" not in unknown
    assert len(unknown["detail"]) < 100


@pytest.mark.parametrize("limits", [Limits(max_body_bytes=10)])
def test_the_limits_answers_bound_instance_too(client: httpx.Client) -> None:
    path = "/v1/sessions/" + "z" * 3000 + "/messages"
    body = problem(client.post(path, json={"text": "a long enough body"}), 413, "body-too-large")
    assert "instance" not in body
    sent = client.post("/v1/sessions/s%3F/steer", json={"text": "abcdefghijk"})
    short = problem(sent, 413, "body-too-large")
    assert short["instance"] == "/v1/sessions/s%3F/steer"


def test_a_path_at_the_bound_is_kept() -> None:
    at = "/" + "a" * (MAX_INSTANCE - 1)
    assert instance_of(at) == at
    assert instance_of(at + "a") is None
    assert instance_of("/\udcff") == "/%3F"  # a lone surrogate cannot come back raw
    assert instance_of(None) is None
