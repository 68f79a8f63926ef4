"""A restarted server resumes every session on the template it was created from."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway import KeyStore, create_app, load_templates
from gateway.server import resume_sessions
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, run_server, stop_server


def _serve_once(data_dir: Path, key: str | None, steps: list[str]) -> tuple[str, list[str]]:
    keys = KeyStore(data_dir)
    host = AgentHost(data_dir=data_dir, call_timeout=10)
    templates = load_templates(TEMPLATES)
    resume_sessions(host, keys, templates)
    key = key or keys.create("acme").key
    url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
    answers = []
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
            if "create" in steps:
                c.post("/v1/sessions", json={"template": "streaming", "session_id": "r"})
            r = c.post("/v1/sessions/r/messages", json={"text": "again"})
            answers.append(r.json()["message"]["content"])
            answers.extend(m["content"] for m in c.get("/v1/sessions/r/history").json()["messages"])
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
    return key, answers


def test_sessions_and_keys_survive_a_restart(tmp_path: Path) -> None:
    key, first = _serve_once(tmp_path, None, ["create"])
    assert first[0] == "echo: again"
    _, second = _serve_once(tmp_path, key, [])
    assert second[0] == "echo: again"  # the streaming template again, not another
    assert second[1:] == ["again", "echo: again", "again", "echo: again"]


def test_a_session_of_a_template_no_longer_served_says_so_and_can_be_deleted(
    tmp_path: Path,
) -> None:
    key = ""
    for served, check in ((TEMPLATES, False), (TEMPLATES[:1], True)):  # then without streaming
        keys = KeyStore(tmp_path)
        host = AgentHost(data_dir=tmp_path, call_timeout=10)
        templates = load_templates(served)
        resume_sessions(host, keys, templates)
        key = key or keys.create("acme").key
        url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
                if not check:
                    made = c.post("/v1/sessions", json={"template": "streaming", "session_id": "r"})
                    assert made.status_code == 201, made.text
                    continue
                got = c.get("/v1/sessions/r")
                assert got.status_code == 503, got.text
                assert got.json()["type"] == "/problems/template-not-served"
                assert "template 'streaming', which this server does not serve" in got.text
                sent = c.post("/v1/sessions/r/messages", json={"text": "hi"})
                assert sent.json()["type"] == "/problems/template-not-served"
                again = c.post("/v1/sessions", json={"template": "echo", "session_id": "r"})
                assert again.status_code == 409, again.text
                assert c.delete("/v1/sessions/r").status_code == 204
                assert c.get("/v1/sessions/r").status_code == 404
                assert host.store.list("acme/r") == []
                made = c.post("/v1/sessions", json={"template": "echo", "session_id": "r"})
                assert made.status_code == 201, made.text
        finally:
            stop_server(server, thread)
            host.shutdown()
            keys.close()
