"""The gateway as its operator sees it: every line of ``serve --log-format json`` a JSON
object (uvicorn's own and the worker processes' included), log lines about a session
naming it in a field, a SIGTERM not held up by clients following event streams, and a
readiness answer that says when workers are gone for good."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool, Usage
from gateway import KeyStore, create_app
from gateway.server import resume_sessions
from supervisor import AgentHost, AsyncAgentHost
from supervisor.log_format import JsonLogFormatter
from tests.gateway.conftest import run_server, stop_server
from tests.gateway.serve_process import ServeProcess, create_key, frames
from tests.supervisor.host_helpers import watch_events


class LoggingEcho:
    """Answers ``ok``, logging a warning about the text it answers (agent code's own log
    line, in whatever process runs the session)."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        logging.getLogger("tests.agent").warning("answering %r", messages[-1].content)
        return ModelResponse(Message.assistant("ok"), Usage(1, 1))


def make_logging() -> AgentTemplate:
    return AgentTemplate(model=LoggingEcho())


def test_json_logs_keep_uvicorns_own_lines_json(tmp_path: Path) -> None:
    """A malformed request makes uvicorn log a warning of its own: with ``--log-format
    json`` it is one JSON object too, as every line of the log is."""
    server = ServeProcess(tmp_path / "data", ["echo=tests.gateway.agents:echo"], tmp_path / "log",
                          options=["--log-format", "json"])  # fmt: skip
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(b"NOT HTTP \x00\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()
    lines = [line for line in server.log.read_text().splitlines() if line]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON log line: {line!r}") from None
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in parsed)
    assert {"level": "WARNING", "logger": "uvicorn.error"}.items() <= next(
        entry for entry in parsed if entry["logger"].startswith("uvicorn")
    ).items()


def test_sigterm_ends_event_streams_cleanly_and_at_once(tmp_path: Path) -> None:
    """A client following ``/events`` does not hold a stopping server up: SIGTERM ends
    its stream cleanly (the body completes, nothing is logged as an error) and the
    server exits well before its graceful timeout (5 s) would cut the stream off."""
    data = tmp_path / "data"
    server = ServeProcess(data, ["echo=tests.gateway.agents:echo"], tmp_path / "log",
                          options=["--log-format", "json"])  # fmt: skip
    try:
        key = create_key(data, "acme")
        c = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"},
                         timeout=30)  # fmt: skip
        assert c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        assert c.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
        first = threading.Event()
        seen: list[str] = []
        ended: list[BaseException | None] = []

        def follow() -> None:
            try:
                with c.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as r:
                    for kind, _ in frames(r.iter_lines()):
                        seen.append(kind)
                        first.set()
                ended.append(None)
            except Exception as exc:  # what the client saw, asserted below
                ended.append(exc)

        follower = threading.Thread(target=follow)
        follower.start()
        assert first.wait(10)
        started = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
        took = time.monotonic() - started
        follower.join(10)
        c.close()
    finally:
        if server.proc.returncode is None:
            server.kill()
    assert ended == [None]  # the body ended, not broken off
    assert seen[0] == "turn_started"
    assert took < 3, f"the stop took {took:.1f} s"
    errors = [line for line in server.log.read_text().splitlines() if '"ERROR"' in line]
    assert errors == []


def test_json_logs_of_session_code_in_worker_processes(tmp_path: Path) -> None:
    """``serve --workers 1 --log-format json``: a log line of the sessions' own code,
    which runs in a worker process, is a JSON object with its level and logger too."""
    data = tmp_path / "data"
    template = "logging=tests.gateway.test_hunt_observability:make_logging"
    server = ServeProcess(data, [template], tmp_path / "log", workers=1,
                          options=["--log-format", "json"])  # fmt: skip
    try:
        key = create_key(data, "acme")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as c:  # fmt: skip
            made = c.post("/v1/sessions", json={"template": "logging", "session_id": "s"})
            assert made.status_code == 201, made.text
            sent = c.post("/v1/sessions/s/messages", json={"text": "hi"})
            assert sent.json() == {"message": {"role": "assistant", "content": "ok"}}
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()
    lines = server.log.read_text().splitlines()
    (line,) = [line for line in lines if "answering" in line]
    entry = json.loads(line)
    assert {"level": "WARNING", "logger": "tests.agent", "message": "answering 'hi'"}.items() <= (
        entry.items()
    )


def test_resume_lines_about_a_session_name_it_in_a_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A collector filters the lines about a session by their ``session_id`` field (the
    JSON logs' field): the line saying a session was not resumed has it too."""
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path)
    try:
        host.start_session(make_logging(), "acme/r", tenant_id="acme")
        host.checkpoint("acme/r", tenant_id="acme")
        keys.remember_session("acme/r", "acme", "gone", "{}")
        host.stop_session("acme/r", tenant_id="acme")
        with caplog.at_level(logging.WARNING, logger="gateway"):
            assert resume_sessions(host, keys, {"echo": make_logging()}) == 0
    finally:
        host.shutdown()
        keys.close()
    (line,) = [r for r in caplog.records if "not resumed" in r.getMessage()]
    assert getattr(line, "session_id", None) == "acme/r"
    assert json.loads(JsonLogFormatter().format(line))["session_id"] == "acme/r"


def test_readiness_says_when_workers_were_given_up_for_good(tmp_path: Path) -> None:
    """Workers given up are not "being replaced": ``/readyz`` says what happened and what
    to do, and does not invite a retry (no replacement will come)."""
    keys = KeyStore(tmp_path)
    host = AgentHost(data_dir=tmp_path, workers=1, worker_max_restarts=0)
    url, server, thread = run_server(create_app(AsyncAgentHost(host), {}, keys))
    try:
        with httpx.Client(base_url=url, timeout=30) as c:
            assert c.get("/readyz").json() == {"ready": True}
            sid = host.start_session(make_logging(), "s")
            [worker] = host.workers()
            waiter = watch_events(host, sid)
            os.kill(worker.pid, signal.SIGKILL)
            waiter.wait_for("crashed")  # the pool decided before it crashed the session
            assert host.workers_given_up
            ready = c.get("/readyz")
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()
    assert ready.status_code == 503
    problem = ready.json()
    assert problem["type"] == "/problems/not-ready"
    assert "no longer replaced" in problem["detail"]
    assert "being replaced" not in problem["detail"]
    assert problem["retryable"] is False
    assert "retry-after" not in ready.headers
