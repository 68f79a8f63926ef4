"""A recorded session no host runs (a create that died after recording it, or one not
resumed at start) counts against its tenant's limit, so the listing shows it: it was left
out, and a tenant whose create answer was lost (a random id it never saw) had a place taken
by a session it could neither see nor delete."""

from __future__ import annotations

import pytest

from gateway import Limits, routes_sessions
from tests.gateway.conftest import Served


@pytest.fixture
def limits() -> Limits:
    return Limits(max_sessions_per_tenant=2)


def _listed(served: Served, key: str) -> dict[str, tuple[str, str]]:
    with served.client(key) as client:
        answer = client.get("/v1/sessions")
    assert answer.status_code == 200, answer.text
    return {s["session_id"]: (s["status"], s["model"]) for s in answer.json()["sessions"]}


def test_a_session_no_host_runs_is_listed_until_deleted(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as client:
        assert client.post("/v1/sessions", json={"template": "echo"}).status_code == 201
    served.keys.remember_session("acme/ghost", "acme", "echo", "{}")  # a create that died
    served.keys.remember_session("globex/other", "globex", "echo", "{}")  # not acme's
    listed = _listed(served, key)
    assert len(listed) == 2  # the tenant's limit, as the next create says
    assert listed["ghost"] == ("starting", "echo")  # young: maybe a create in flight
    with served.client(key) as client:
        full = client.post("/v1/sessions", json={"template": "echo"})
        assert full.status_code == 409, full.text
        assert "tenant has 2 sessions" in full.json()["detail"]
        monkeypatch.setattr(routes_sessions, "STALE_RECORD_SECONDS", 0.0)
        assert _listed(served, key)["ghost"] == ("unavailable", "echo")  # stale: delete it
        assert client.delete("/v1/sessions/ghost").status_code == 204
    assert "ghost" not in _listed(served, key)
