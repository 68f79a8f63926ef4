"""The examples are documentation: run each one and check what it tells a newcomer."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.wire import CHAT, Calls, Text, WireServer

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_quickstart_shows_a_tool_call_and_a_plugin(tmp_path: Path) -> None:
    out = _run("quickstart.py", tmp_path)
    assert "[tool call]   convert_temperature({'celsius': 21.5})" in out
    assert "convert_temperature returned: 70.7 F" in out
    assert "[plugin]      tool call #1: convert_temperature" in out


def test_crash_recovery_demo_survives_both_crashes(tmp_path: Path) -> None:
    out = _run("crash_recovery.py", tmp_path)
    assert "registry: alice evicted the moment her actor died" in out
    assert "alice: resumed; rebuilding stripped fields ('file',)" in out
    assert "host process ended by signal 9" in out
    assert "new process resumed ['alice', 'bob']" in out
    assert "alice: 10 messages, first: 'Hello, I am Alice.'" in out
    assert "bob: 6 messages, first: 'Hi, Bob here.'" in out
    journal = tmp_path / "sessionvisor-data" / "demo" / "journal-alice.txt"
    assert journal.read_text(encoding="utf-8").count("word_count(") == 1


@pytest.mark.parametrize("script", ["plugin_session_start.py"])
def test_plugin_guide_rebuilds_its_live_state(script: str, tmp_path: Path) -> None:
    out = _run(script, tmp_path)
    assert out.count("session_start(resumed=True, stripped=['conn'])") == 2
    assert "'still there?': the rebuilt table now holds 4 rows" in out


def test_asgi_app_serves_a_session_without_a_framework(tmp_path: Path) -> None:
    out = _run("asgi_app.py", tmp_path)
    assert "POST /sessions -> 201" in out
    for n in range(3):
        assert f"POST /messages -> 200 echo: hello {n}" in out
    assert "DELETE -> 204" in out
    assert "GET /events -> 200, 9 events, ending with 'turn_finished'" in out
    assert "POST to a stopped session -> 404" in out
    assert "host shut down" in out
    assert (tmp_path / "sessionvisor-data").is_dir()


@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "worker"])
def test_openai_compatible_example_runs_a_tool_against_a_local_server(
    tmp_path: Path, workers: int | None
) -> None:
    with WireServer(CHAT) as server:
        server.script(
            Calls([("call_1", "add", {"a": 1234, "b": 4321})]),
            Text("The sum is 5555.", pieces=["The sum", " is 5555."]),
        )
        command = [
            sys.executable,
            str(ROOT / "examples" / "openai_compatible.py"),
            "--base-url",
            server.base_url,
            "--model",
            "local-model",
            "--api-key",
            "sk-example-key",
        ]
        if workers is not None:
            command += ["--workers", str(workers)]
        result = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert [r.headers["authorization"] for r in server.requests] == [
            "Bearer sk-example-key"
        ] * 2
    out = result.stdout
    assert "[tool call] add({'a': 1234, 'b': 4321})" in out
    assert "[tool result] 5555" in out
    assert "The sum is 5555.\nanswer: The sum is 5555." in out
    assert "usage: 40 input (16 cached), 10 output (4 reasoning)" in out


def test_mcp_guide_reconnects_after_a_crash(tmp_path: Path) -> None:
    out = _run("mcp_tools.py", tmp_path)
    assert "words_word_count returned: 4" in out
    assert "a new connection, to a new server process: True" in out
    assert "what its checkpoint stripped: ['plugins.mcp.connection']" in out


ASGI_BAD_REQUESTS = """
import asyncio, importlib.util, json, sys

spec = importlib.util.spec_from_file_location("asgi_app", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


async def request(method, path, body=b"", query=b""):
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": query}
    await example.app(scope, receive, send)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


async def main():
    queue = asyncio.Queue()
    queue.put_nowait({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def lifespan_send(message):
        if message["type"] == "lifespan.startup.complete":
            started.set()

    server = asyncio.create_task(example.app({"type": "lifespan"}, queue.get, lifespan_send))
    await started.wait()
    _, created = await request("POST", "/sessions")
    sid = created["session_id"]
    print(await request("GET", f"/sessions/{sid}/events", query=b"since=abc"))
    print(await request("POST", f"/sessions/{sid}/messages", b"\\xff\\xfe"))
    print(await request("POST", f"/sessions/{sid}/messages", b"still fine"))
    queue.put_nowait({"type": "lifespan.shutdown"})
    await server


asyncio.run(main())
"""


def test_asgi_app_answers_400_to_a_bad_cursor_or_body_and_goes_on(tmp_path: Path) -> None:
    # A client's typo (?since=abc) or a body that is not UTF-8 is the client's error: a
    # 400 saying so, never an exception out of the app (a 500 with a traceback).
    result = subprocess.run(
        [sys.executable, "-c", ASGI_BAD_REQUESTS, str(ROOT / "examples" / "asgi_app.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "(400, {'error': \"since must be an event number, got 'abc'\"})",
        "(400, {'error': 'the message must be UTF-8 text'})",
        "(200, {'answer': 'echo: still fine'})",
    ]


def test_openai_compatible_example_says_in_one_line_when_the_server_is_down(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "openai_compatible.py"),
            "--base-url",
            base_url,
            "--model",
            "llama3.2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        f"the model at {base_url} failed: APIConnectionError: Connection error."
    )
