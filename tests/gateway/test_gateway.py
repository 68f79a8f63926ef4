"""The gateway end to end: a real uvicorn server, httpx, API keys and tenants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import KeyStore, Limits, create_app, load_templates
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.conftest import TEMPLATES, Served, run_server, stop_server


def sse(text: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """``(event, data, id)`` of each frame of an SSE body."""
    frames = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        frames.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return frames


def problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == f"/problems/{slug}"
    assert body["status"] == status
    return body


def test_full_lifecycle(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        created = c.post(
            "/v1/sessions", json={"template": "echo", "session_id": "s1", "metadata": {"a": "b"}}
        )
        assert created.status_code == 201, created.text
        assert created.json()["session_id"] == "s1"
        assert created.json()["metadata"] == {"a": "b"}
        answer = c.post("/v1/sessions/s1/messages", json={"text": "hello"})
        assert answer.status_code == 200, answer.text
        assert "hello" in answer.json()["message"]["content"]
        assert [s["session_id"] for s in c.get("/v1/sessions").json()["sessions"]] == ["s1"]
        assert c.get("/v1/sessions/s1").json()["template"] == "echo"
        assert c.post("/v1/sessions/s1/steer", json={"text": "be brief"}).status_code == 204
        page = c.get("/v1/sessions/s1/history", params={"limit": 1}).json()
        assert page["messages"][0]["role"] == "user"
        rest = c.get("/v1/sessions/s1/history", params={"cursor": page["next_cursor"]}).json()
        assert rest["messages"][0]["role"] == "assistant"
        taken = c.post("/v1/sessions/s1/checkpoints", json={"label": "mine"})
        assert taken.status_code == 201, taken.text
        unlabelled = c.post("/v1/sessions/s1/checkpoints")  # no body: every field is optional
        assert unlabelled.status_code == 201, unlabelled.text
        assert unlabelled.json()["label"] is None
        listed = c.get("/v1/sessions/s1/checkpoints").json()["checkpoints"]
        assert listed[0] == unlabelled.json()  # newest first, with its size
        assert listed[1] == taken.json()
        assert taken.json()["label"] == "mine"
        assert taken.json()["size"] > 0
        exported = c.get("/v1/sessions/s1/export").json()
        assert exported["session_id"] == "s1"
        assert c.delete("/v1/sessions/s1").status_code == 204
        problem(c.get("/v1/sessions/s1"), 404, "session-not-found")
    assert served.host.store.list("acme/s1") == []


def test_send_streams_deltas_then_the_answer(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        c.post("/v1/sessions", json={"template": "streaming", "session_id": "s"})
        response = c.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = sse(response.text)
    kinds = [f[0] for f in frames]
    assert kinds[-1] == "answer"
    assert frames[-1][1]["message"]["content"] == "echo: hi"
    assert [f[1]["text"] for f in frames if f[0] == "delta"] == ["echo: ", "hi"]
    assert "turn_finished" in kinds


def test_event_stream_resumes_from_last_event_id(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        c.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        c.post("/v1/sessions/s/messages", json={"text": "one"})
        first: list[tuple[str, str]] = []
        with c.stream("GET", "/v1/sessions/s/events") as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("id: "):
                    last_id = line[4:]
                if line.startswith("event: "):
                    first.append((line[7:], last_id))
                    if line == "event: turn_finished":
                        break
        c.post("/v1/sessions/s/messages", json={"text": "two"})
        with c.stream("GET", "/v1/sessions/s/events", headers={"Last-Event-ID": last_id}) as r:
            for line in r.iter_lines():
                if line.startswith("id: "):
                    assert int(line[4:]) > int(last_id)
                if line.startswith("data: ") and '"two"' in line:
                    break
        problem(c.get("/v1/sessions/s/events", headers={"Last-Event-ID": "x"}), 400, "bad-cursor")
    assert first[0][0] == "turn_started"


def test_tenant_isolation_on_every_endpoint(served: Served) -> None:
    mine = served.keys.create("acme").key
    theirs = served.keys.create("other").key
    with served.client(mine) as c:
        c.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
    calls = [
        ("GET", "/v1/sessions/{}", None),
        ("DELETE", "/v1/sessions/{}", None),
        ("POST", "/v1/sessions/{}/messages", {"text": "x"}),
        ("POST", "/v1/sessions/{}/messages", {"text": "x", "stream": True}),
        ("POST", "/v1/sessions/{}/steer", {"text": "x"}),
        ("GET", "/v1/sessions/{}/history", None),
        ("GET", "/v1/sessions/{}/checkpoints", None),
        ("POST", "/v1/sessions/{}/checkpoints", {}),
        ("GET", "/v1/sessions/{}/export", None),
        ("GET", "/v1/sessions/{}/events", None),
    ]
    with served.client(theirs) as c:
        assert c.get("/v1/sessions").json() == {"sessions": []}
        for method, path, body in calls:
            other = c.request(method, path.format("s"), json=body)
            missing = c.request(method, path.format("nope"), json=body)
            assert problem(other, 404, "session-not-found")["detail"] == "no session 's'"
            assert problem(missing, 404, "session-not-found")["detail"] == "no session 'nope'"
        # the same id is free for this tenant: creating it tells nothing
        assert (
            c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).status_code == 201
        )
    with served.client(mine) as c:
        assert c.post("/v1/sessions/s/messages", json={"text": "still mine"}).status_code == 200


def test_authentication(served: Served) -> None:
    with served.client(None) as c:
        problem(c.get("/v1/sessions"), 401, "unauthorized")
    with served.client("sv_not-a-key") as c:
        problem(c.get("/v1/sessions"), 401, "unauthorized")
    new = served.keys.create("acme")
    served.keys.revoke(new.info.key_id)
    with served.client(new.key) as c:
        problem(c.get("/v1/sessions"), 401, "unauthorized")
    with served.client(None) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.get("/readyz").json() == {"ready": True}


def test_bad_input_gets_problem_details(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        c.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        bad = c.post("/v1/sessions", content=b"{nope", headers={"Content-Type": "application/json"})
        problem(bad, 400, "malformed-json")
        for body in (b'{"template": "\xff"}', b"[" * 100_000 + b"]" * 100_000):
            bad = c.post("/v1/sessions", content=body, headers={"Content-Type": "application/json"})
            assert "not valid JSON" in problem(bad, 400, "malformed-json")["detail"]
        problem(c.post("/v1/sessions", json={"template": 5}), 422, "invalid-request")
        problem(c.post("/v1/sessions/s/messages", json={"text": 1}), 422, "invalid-request")
        problem(c.post("/v1/sessions", json={"template": "nope"}), 422, "unknown-template")
        problem(c.get("/v1/sessions/s/history", params={"cursor": "abc"}), 400, "bad-cursor")
        big = c.post("/v1/sessions/s/messages", json={"text": "x" * (2 << 20)})
        problem(big, 413, "body-too-large")
        chunked = c.post(  # no Content-Length: refused as it is read
            "/v1/sessions/s/messages",
            content=iter([b'{"text": "', b"x" * (2 << 20), b'"}']),
            headers={"Content-Type": "application/json"},
        )
        problem(chunked, 413, "body-too-large")
        long = c.post("/v1/sessions/s/messages", json={"text": "x" * 40_000})
        problem(long, 422, "message-too-long")
        exists = problem(
            c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}),
            409,
            "session-exists",
        )
        assert "'s'" in exists["detail"]
        assert "acme" not in exists["detail"]
        missing = c.get("/v1/sessions/s/export", params={"checkpoint_id": "nope"})
        assert "acme" not in problem(missing, 404, "checkpoint-not-found")["detail"]
        # the server and the session are fine
        assert c.post("/v1/sessions/s/messages", json={"text": "ok"}).status_code == 200


def test_what_no_store_or_url_can_hold_is_refused_before_a_session_is_made(
    served: Served,
) -> None:
    key = served.keys.create("acme").key
    surrogate = b'{"template": "echo", "session_id": "m", "metadata": {"k": "\\ud800"}}'
    surrogate_key = b'{"template": "echo", "session_id": "m", "metadata": {"\\udfff": "v"}}'
    json_body = {"Content-Type": "application/json"}
    with served.client(key) as c:
        body = problem(
            c.post("/v1/sessions", content=surrogate, headers=json_body), 422, "invalid-request"
        )
        assert "the value of 'k' holds a lone surrogate at index 0" in body["detail"]
        body = problem(
            c.post("/v1/sessions", content=surrogate_key, headers=json_body), 422, "invalid-request"
        )
        assert "a key holds a lone surrogate" in body["detail"]
        too_many = {str(n): "v" for n in range(65)}
        problem(
            c.post("/v1/sessions", json={"template": "echo", "metadata": too_many}),
            422,
            "invalid-request",
        )
        empty_key = {"template": "echo", "metadata": {"": "v"}}
        assert (
            "a key must be 1 to 200"
            in problem(c.post("/v1/sessions", json=empty_key), 422, "invalid-request")["detail"]
        )
        for dots in (".", ".."):
            body = problem(
                c.post("/v1/sessions", json={"template": "echo", "session_id": dots}),
                422,
                "invalid-request",
            )
            assert "a URL path cannot hold it" in body["detail"]
        # nothing was made, and the tenant's list still answers
        assert c.get("/v1/sessions").json() == {"sessions": []}
        assert c.get("/v1/sessions/m").status_code == 404
        made = c.post(
            "/v1/sessions", json={"template": "echo", "session_id": "m", "metadata": {"k": "é ✓"}}
        )
        assert made.json()["metadata"] == {"k": "é ✓"}
        assert c.get("/v1/sessions").json()["sessions"][0]["metadata"] == {"k": "é ✓"}
        for digits in ("²", "٣"):  # digits to str.isdigit, not to a cursor
            problem(c.get("/v1/sessions/m/history", params={"cursor": digits}), 400, "bad-cursor")
            problem(c.get("/v1/sessions/m/events", params={"since": digits}), 400, "bad-cursor")


@pytest.mark.parametrize("limits", [Limits(max_sessions_per_tenant=1, max_concurrent_per_key=1)])
def test_limits(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        assert c.post("/v1/sessions", json={"template": "echo"}).status_code == 201
        problem(c.post("/v1/sessions", json={"template": "echo"}), 409, "session-limit")
        sid = c.get("/v1/sessions").json()["sessions"][0]["session_id"]
        with c.stream("GET", f"/v1/sessions/{sid}/events") as held:
            assert held.status_code == 200
            with served.client(key) as second:
                busy = second.get("/v1/sessions")
                body = problem(busy, 429, "too-many-requests")
                assert busy.headers["Retry-After"] == "1"
                assert body["retryable"] is True
        assert c.get("/v1/sessions").status_code == 200


def test_event_stream_tells_a_late_client_how_much_it_missed(served: Served) -> None:
    key = served.keys.create("acme").key
    template = load_templates(["t=tests.gateway.agents:echo"])["t"]
    served.host.start_session(template, "acme/m", "acme", event_buffer_size=2)
    with served.client(key) as c:
        for text in ("one", "two"):
            assert c.post("/v1/sessions/m/messages", json={"text": text}).status_code == 200
        with c.stream("GET", "/v1/sessions/m/events", params={"since": "0"}) as r:
            lines = r.iter_lines()
            assert next(lines) == "event: missed"
            missed = json.loads(next(lines)[len("data: ") :])["missed"]
    assert missed > 0


def test_metrics_count_the_tenants_turns(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        c.post("/v1/sessions", json={"template": "echo", "session_id": "s"})
        assert c.post("/v1/sessions/s/messages", json={"text": "hello"}).status_code == 200
    with served.client(None) as anonymous:  # probes and scrapers carry no key
        response = anonymous.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'sessionvisor_turns_total{tenant="acme"} 1.0' in response.text
    assert 'sessionvisor_sessions{status="active",tenant="acme"} 1.0' in response.text


def test_a_metrics_token_guards_metrics_and_nothing_else(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    app = create_app(
        AsyncAgentHost(host), load_templates(TEMPLATES), keys, metrics_token="s3cret-token"
    )
    url, server, thread = run_server(app)
    try:
        with httpx.Client(base_url=url) as c:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                body = problem(c.get("/metrics", headers=headers), 401, "unauthorized")
                assert "metrics token" in body["detail"]
            scraped = c.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
            assert scraped.status_code == 200
            assert "sessionvisor_sessions" in scraped.text
            assert c.get("/healthz").status_code == 200  # probes stay open
            api = c.get("/v1/sessions", headers={"Authorization": "Bearer s3cret-token"})
            problem(api, 401, "unauthorized")  # it is no API key
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
