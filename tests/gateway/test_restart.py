"""A restarted server resumes every session on the template it was created from; one of
a template it was not given says so, and can be deleted."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from gateway import KeyStore, create_app, load_templates
from gateway.server import resume_sessions
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, run_server, stop_server


@contextmanager
def _served(
    data_dir: Path, key: str | None, specs: list[str] = TEMPLATES
) -> Iterator[tuple[httpx.Client, str, AgentHost]]:
    """A server on ``data_dir`` as ``serve`` starts one (its sessions resumed): a client
    with ``key`` (a new key of tenant acme if ``None``), the key, the host."""
    keys = KeyStore(data_dir)
    host = AgentHost(data_dir=data_dir, call_timeout=10)
    templates = load_templates(specs)
    resume_sessions(host, keys, templates)
    key = key or keys.create("acme").key
    url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
            yield c, key, host
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()


def _send_and_read(c: httpx.Client) -> list[str]:
    answer = c.post("/v1/sessions/r/messages", json={"text": "again"}).json()
    history = c.get("/v1/sessions/r/history").json()["messages"]
    return [answer["message"]["content"], *(m["content"] for m in history)]


def test_sessions_and_keys_survive_a_restart(tmp_path: Path) -> None:
    with _served(tmp_path, None) as (c, key, _):
        c.post("/v1/sessions", json={"template": "streaming", "session_id": "r"})
        assert _send_and_read(c)[0] == "echo: again"
    with _served(tmp_path, key) as (c, _, _):
        second = _send_and_read(c)
    assert second[0] == "echo: again"  # the streaming template again, not another
    assert second[1:] == ["again", "echo: again", "again", "echo: again"]


def test_a_session_of_a_template_no_longer_served_says_so_and_can_be_deleted(
    tmp_path: Path,
) -> None:
    with _served(tmp_path, None) as (c, key, _):
        made = c.post("/v1/sessions", json={"template": "streaming", "session_id": "r"})
        assert made.status_code == 201, made.text
    with _served(tmp_path, key, TEMPLATES[:1]) as (c, _, host):  # without "streaming"
        got = c.get("/v1/sessions/r")
        assert got.status_code == 503, got.text
        assert got.json()["type"] == "/problems/template-not-served"
        assert "template 'streaming', which this server does not serve" in got.text
        (listed,) = c.get("/v1/sessions").json()["sessions"]
        assert (listed["session_id"], listed["status"]) == ("r", "unavailable")
        assert listed["template"] == "streaming"
        assert listed["created_at"] == made.json()["created_at"]
        sent = c.post("/v1/sessions/r/messages", json={"text": "hi"})
        assert sent.json()["type"] == "/problems/template-not-served"
        again = c.post("/v1/sessions", json={"template": "echo", "session_id": "r"})
        assert again.status_code == 409, again.text
        assert c.delete("/v1/sessions/r").status_code == 204
        assert c.get("/v1/sessions/r").status_code == 404
        assert host.store.list("acme/r") == []
        made = c.post("/v1/sessions", json={"template": "echo", "session_id": "r"})
        assert made.status_code == 201, made.text
