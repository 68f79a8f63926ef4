"""``GET /v1/sessions/{id}/export`` redacts secrets whatever the host's ``redact`` saved."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import AgentTemplate, EchoModel, Plugin, PluginContext
from gateway import Limits
from supervisor import AgentHost
from tests.gateway.conftest import Served, serving

BEARER = "Bearer abcdefgh12345678"
KEY = "sk-abcdefghijklmnop1234"


class TokenBudget(Plugin):
    """A plugin named like a secret whose state holds a credential under harmless keys."""

    name = "token_budget"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.update(used=7, upstream={"auth": BEARER, "note": KEY, "host": "h"})


@pytest.fixture
def unredacted(tmp_path: Path) -> Iterator[Served]:
    """A gateway whose host saves checkpoints as they are (``redact=None``)."""
    host = AgentHost(data_dir=tmp_path, call_timeout=10, redact=None)
    template = AgentTemplate(model=EchoModel(), plugins=(TokenBudget(),))
    with serving(host, {"budget": template}, tmp_path, Limits()) as made:
        yield made


def test_export_removes_credentials_a_host_saved_unredacted(unredacted: Served) -> None:
    key = unredacted.keys.create("acme").key
    with unredacted.client(key) as c:
        assert c.post("/v1/sessions", json={"template": "budget", "session_id": "s"}).is_success
        assert c.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
        stored = unredacted.host.store.load("acme/s").state["plugins"]["token_budget"]
        assert stored["upstream"]["auth"] == BEARER  # the host saved it as it was
        exported = c.get("/v1/sessions/s/export")
    assert exported.status_code == 200, exported.text
    body = exported.text
    assert BEARER not in body
    assert KEY not in body
    plugin = exported.json()["state"]["plugins"]["token_budget"]
    assert plugin["used"] == 7  # a plugin named like a secret keeps its state
    assert plugin["upstream"]["host"] == "h"
    assert [m["content"] for m in exported.json()["state"]["messages"]] == ["hi", "echo: hi"]
