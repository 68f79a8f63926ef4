"""``sessionvisor serve`` as a real process (the installed console script on an
ephemeral port), driven over HTTP by httpx: a key made by ``sessionvisor keys
create``, a session created, sent to, streamed and read; then SIGTERM or SIGINT
ends it cleanly: exit status 0, a final checkpoint, no process left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.server import bind
from tests.gateway.serve_process import ServeProcess, cli, create_key, frames, wait_gone

TEMPLATES = ["echo=tests.gateway.agents:echo", "streaming=tests.gateway.agents:make_streaming"]


def _checkpoints(data: Path, session_id: str) -> list[dict[str, object]]:
    done = cli("checkpoints", "list", session_id, "--data-dir", str(data), "--json")
    assert done.returncode == 0, done.stderr
    listed: list[dict[str, object]] = json.loads(done.stdout)
    return listed


def _first_answer(c: httpx.Client, template: str, text: str) -> Any:
    """Create session ``s`` of ``template`` and send it ``text``: the answer's JSON."""
    made = c.post("/v1/sessions", json={"template": template, "session_id": "s"})
    assert made.status_code == 201, made.text
    sent = c.post("/v1/sessions/s/messages", json={"text": text})
    assert sent.status_code == 200, sent.text
    return sent.json()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_process_lifecycle_and_clean_stop(tmp_path: Path, sig: signal.Signals) -> None:
    data = tmp_path / "data"
    key = create_key(data, "acme")
    server = ServeProcess(data, TEMPLATES, tmp_path / "serve.log")
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            answer = _first_answer(c, "streaming", "hello")
            assert answer == {"message": {"role": "assistant", "content": "echo: hello"}}
            body = {"text": "there", "stream": True}
            with c.stream("POST", "/v1/sessions/s/messages", json=body) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                got = list(frames(r.iter_lines()))
            assert [d["text"] for k, d in got if k == "delta"] == ["echo: ", "there"]
            assert got[-1] == (
                "answer",
                {"message": {"role": "assistant", "content": "echo: there"}},
            )
            history = c.get("/v1/sessions/s/history").json()
            assert [m["content"] for m in history["messages"]] == [
                "hello",
                "echo: hello",
                "there",
                "echo: there",
            ]
            assert (
                c.get("/v1/sessions", headers={"Authorization": "Bearer sv_nope"}).status_code
                == 401
            )
        before = _checkpoints(data, "acme/s")
        children = server.descendants()
        server.signal(sig)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()
    assert wait_gone(children, 10) == set()
    after = _checkpoints(data, "acme/s")
    assert len(after) == len(before) + 1  # the final checkpoint, taken at shutdown
    shown = cli("checkpoints", "show", "acme/s", "--data-dir", str(data), "--json")
    assert "echo: there" in shown.stdout
    assert f"signal {sig.name}: stopping" in server.log.read_text()


def test_bound_sockets_answer_without_nagle_delays() -> None:
    """``bind``'s socket says TCP, so asyncio sets TCP_NODELAY on each connection it
    accepts (without, every answer waited ~40 ms for a delayed ACK)."""

    async def scenario() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=bind("127.0.0.1", 0))
        async with server:
            port = server.sockets[0].getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
            await writer.wait_closed()
        return nodelay

    assert asyncio.run(scenario()) != 0


@pytest.mark.parametrize(
    ("options", "workers", "expected"),
    [((), None, "0.2"), (("--switch-interval", "0.02"), 1, "0.02")],
    ids=["default-threads", "given-worker"],
)
def test_serve_tunes_the_switch_interval_of_its_session_threads(
    tmp_path: Path, options: tuple[str, ...], workers: int | None, expected: str
) -> None:
    """Python's 5 ms thrashes with thousands of session threads (``supervisor.tuning``): the
    command sets its own interval, and a worker process runs with the server's."""
    data = tmp_path / "data"
    key = create_key(data, "acme")
    templates = ["interval=tests.gateway.agents:switch_interval"]
    server = ServeProcess(data, templates, tmp_path / "serve.log", workers=workers, options=options)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            interval = float(_first_answer(c, "interval", "which?")["message"]["content"])
            assert interval == pytest.approx(float(expected), abs=1e-6)  # kept in microseconds
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs: on one, a pinned thread cannot be told from a free one",
)
@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "worker"])
def test_serve_runs_its_threads_on_the_cpu_given_and_workers_on_every_cpu(
    tmp_path: Path, workers: int | None
) -> None:
    """With thousands of sessions, threads on several CPUs fight over the GIL
    (``supervisor.tuning``): ``--cpu`` confines the server's threads to one, as batch work;
    a worker process, a GIL of its own, runs as the server did before."""
    allowed = sorted(os.sched_getaffinity(0))
    data = tmp_path / "data"
    key = create_key(data, "acme")
    templates = ["cpus=tests.gateway.agents:cpu_set"]
    options = ("--cpu", str(allowed[-1]))
    server = ServeProcess(data, templates, tmp_path / "serve.log", workers=workers, options=options)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            answer = _first_answer(c, "cpus", "where?")["message"]["content"]
        pinned, before = ([allowed[-1]], os.SCHED_BATCH), (allowed, os.sched_getscheduler(0))
        assert answer == repr(pinned if workers is None else before)
        assert os.sched_getaffinity(server.proc.pid) == {allowed[-1]}
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_serve_refuses_a_cpu_it_may_not_run_on(tmp_path: Path) -> None:
    said = {}
    for bad in ("-1", "100000", "first"):
        done = cli("serve", "--data-dir", str(tmp_path), "--template", "e=x:y", "--cpu", bad)
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert "--cpu" in done.stderr, done.stderr
        said[bad] = done.stderr
    allowed = sorted(os.sched_getaffinity(0))
    assert f"may run on, {allowed}; got 100000" in said["100000"], said["100000"]


def test_serve_freezes_its_startup_objects(tmp_path: Path) -> None:
    """A full garbage collection walks every tracked object while every thread waits
    (``supervisor.tuning``): the command freezes what its imports and templates made."""
    data = tmp_path / "data"
    key = create_key(data, "acme")
    templates = ["frozen=tests.gateway.agents:frozen_count"]
    server = ServeProcess(data, templates, tmp_path / "serve.log")
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            frozen = int(_first_answer(c, "frozen", "how many?")["message"]["content"])
            assert frozen > 10_000  # the modules of the server and of the library
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()


def test_serve_refuses_a_switch_interval_out_of_range(tmp_path: Path) -> None:
    for bad in ("0", "-1", "2", "soon"):
        done = cli(
            "serve", "--data-dir", str(tmp_path), "--template", "e=x:y", "--switch-interval", bad
        )
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert "--switch-interval" in done.stderr, done.stderr


def test_serve_asks_for_its_metrics_token_at_metrics(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("scrape-me\n", encoding="utf-8")
    options = ["--metrics-token-file", str(token_file)]
    server = ServeProcess(tmp_path / "data", ["echo=tests.gateway.agents:echo"], tmp_path / "log",
                          options=options)  # fmt: skip
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get("/metrics").status_code == 401
            scraped = c.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
            assert scraped.status_code == 200
            assert "sessionvisor_" in scraped.text
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read the metrics token file"), (" \n", "must hold one token on one line")],
)
def test_serve_refuses_a_metrics_token_file_it_cannot_use(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    token_file = tmp_path / "metrics.token"
    if content is not None:
        token_file.write_text(content, encoding="utf-8")
    done = cli(
        "serve", "--data-dir", str(tmp_path / "data"), "--template", "e=tests.gateway.agents:echo",
        "--port", "0", "--metrics-token-file", str(token_file),
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    last = done.stderr.splitlines()[-1]
    assert last.startswith("error: ")
    assert problem in last
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


APP = """
from actors import AgentTemplate, Message, ModelResponse, Usage


class Shout:
    def generate(self, messages, tools):
        return ModelResponse(Message.assistant(messages[-1].content.upper()), Usage(1, 1))


chat = AgentTemplate(model=Shout())
"""


@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "workers"])
def test_serve_imports_templates_from_the_directory_it_runs_in(
    tmp_path: Path, workers: int | None
) -> None:
    """As uvicorn finds ``myapp.main:app``: a template module beside the command, not
    installed nor on PYTHONPATH, is found (in worker processes too)."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "agents.py").write_text(APP)
    data = tmp_path / "data"
    key = create_key(data, "acme")
    log = tmp_path / "serve.log"
    server = ServeProcess(data, ["chat=myapp.agents:chat"], log, workers=workers, cwd=tmp_path)
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            assert _first_answer(c, "chat", "hello") == {
                "message": {"role": "assistant", "content": "HELLO"}
            }
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, log.read_text()
    finally:
        if server.proc.returncode is None:
            server.kill()
