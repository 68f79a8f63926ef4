"""The examples are documentation: run each one and check what it tells a newcomer."""

from __future__ import annotations

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
