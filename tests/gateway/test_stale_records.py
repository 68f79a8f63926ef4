"""A create that died between recording its session and starting it leaves a record no
host runs: it counts against the tenant's limit, so deleting it must work once it is
clearly stale, and must not disturb a create still in flight."""

from __future__ import annotations

import pytest

from gateway import Limits, routes_sessions
from tests.gateway.conftest import Served


@pytest.fixture
def limits() -> Limits:
    return Limits(max_sessions_per_tenant=1)


def test_a_stale_record_is_deleted_and_frees_its_place(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = served.keys.create("acme").key
    served.keys.remember_session("acme/ghost", "acme", "echo", "{}")  # a create that died
    with served.client(key) as client:
        full = client.post("/v1/sessions", json={"template": "echo", "session_id": "new"})
        assert full.status_code == 409, full.text  # the ghost takes the tenant's one place
        monkeypatch.setattr(routes_sessions, "STALE_RECORD_SECONDS", 0.0)
        assert client.delete("/v1/sessions/ghost").status_code == 204
        assert served.keys.session_row("acme/ghost") is None
        assert client.delete("/v1/sessions/ghost").status_code == 404  # gone
        made = client.post("/v1/sessions", json={"template": "echo", "session_id": "new"})
        assert made.status_code == 201, made.text


def test_a_young_record_is_left_to_its_create_in_flight(served: Served) -> None:
    key = served.keys.create("acme").key
    served.keys.remember_session("acme/starting", "acme", "echo", "{}")
    with served.client(key) as client:
        answer = client.delete("/v1/sessions/starting")
    assert answer.status_code == 404, answer.text
    row = served.keys.session_row("acme/starting")
    assert row is not None
    assert row.template == "echo"


def test_another_tenants_record_is_not_reached(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes_sessions, "STALE_RECORD_SECONDS", 0.0)
    served.keys.remember_session("globex/ghost", "globex", "echo", "{}")
    key = served.keys.create("acme").key
    with served.client(key) as client:
        assert client.delete("/v1/sessions/ghost").status_code == 404
    row = served.keys.session_row("globex/ghost")
    assert row is not None
    assert row.template == "echo"
