"""The README's Python snippets are documentation too: run each one as a newcomer would.

Each test takes a snippet out of README.md by a line only it holds, runs it in a
fresh interpreter in a temporary directory (what a reader pasting it into a file
does), and checks what the README says it prints or does. A snippet that is a
fragment gets only what the README says the reader supplies (``add``, "the
@tool above"; the ``host`` and ``sid`` of the text around it), and a few lines
after it that check its promise. A README edit that breaks a snippet fails here.
"""

from __future__ import annotations

import base64
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EventBuffer,
    Message,
    ModelResponse,
    SteeringQueue,
    Tool,
    ToolCall,
    tool,
)

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS: list[str] = re.findall(r"^```python\n(.*?)^```$", README, flags=re.MULTILINE | re.DOTALL)

ADD_TOOL = '''
from actors import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
'''


def snippet(marker: str) -> str:
    """The one Python block of the README that contains ``marker``."""
    found = [block for block in BLOCKS if marker in block]
    assert len(found) == 1, f"{len(found)} README python blocks contain {marker!r}"
    return found[0]


def run(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``code`` as a program of its own in ``cwd``; its stdout (it must exit 0)."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def printed_comments(code: str) -> list[str]:
    """What the snippet says each of its ``print(...)  # what`` lines prints."""
    return re.findall(r"^print\(.*\)  # (.+)$", code, flags=re.MULTILINE)


def test_a_session_in_a_few_lines_prints_what_its_comments_say(tmp_path: Path) -> None:
    code = snippet('template = AgentTemplate(model="echo", tools=[add]')
    expected = printed_comments(code)
    assert expected == ["echo: hello", "add returned: 42"]
    assert run(code, tmp_path).splitlines() == expected


def test_a_host_that_survives_crashes_keeps_the_history_across_processes(
    tmp_path: Path,
) -> None:
    code = snippet("host.kill(sid)  # a crash: evicted, then resumed from its checkpoint")
    run(code, tmp_path)
    # "later, in a new process on the same data directory": the history is intact.
    check = textwrap.dedent("""
        from actors import AgentTemplate
        from supervisor import AgentHost

        with AgentHost(data_dir="sessionvisor-data") as host:
            (sid,) = host.resume_all(AgentTemplate(model="echo", instructions="Be brief."))
            (info,) = host.list_sessions()
            print(info.tenant_id, [m.content for m in host.history(sid)])
    """)
    assert run(check, tmp_path).strip() == (
        "acme ['hello', 'echo: hello', 'still there?', 'echo: still there?']"
    )


def test_the_three_forms_of_a_call_answer_alike(tmp_path: Path) -> None:
    code = snippet("answer = await AsyncAgentHost(host).send(sid")
    program = (
        "import asyncio\n"
        "from actors import AgentTemplate\n"
        "from supervisor import AgentHost, AsyncAgentHost\n\n"
        "async def main(host, sid):\n"
        + textwrap.indent(code, "    ")
        + "    print(answer.content, future.result(timeout=5).content)\n\n"
        'with AgentHost(data_dir="d") as host:\n'
        '    sid = host.start_session(AgentTemplate(model="echo"))\n'
        "    asyncio.run(main(host, sid))\n"
    )
    assert run(program, tmp_path).strip() == "echo: hello echo: hello"


def test_the_minimal_asgi_app_answers_through_the_host(tmp_path: Path) -> None:
    code = snippet("async def app(scope, receive, send):")
    driver = textwrap.dedent("""
        import asyncio

        async def call(path, body=b""):
            sent = []

            async def receive():
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message):
                sent.append(message)

            await app({"type": "http", "method": "POST", "path": path}, receive, send)
            assert sent[0]["status"] == 200, sent
            return sent[-1]["body"].decode()

        async def main():
            sid = await call("/sessions")
            print(await call(f"/sessions/{sid}", b"hello"))
            ahost.shutdown()

        asyncio.run(main())
    """)
    assert run(code + driver, tmp_path).strip() == "echo: hello"


def test_tune_interpreter_and_freeze_startup_objects_do_what_the_readme_says(
    tmp_path: Path,
) -> None:
    code = snippet("tune_interpreter()  # sys.setswitchinterval(0.2)")
    code += snippet("freeze_startup_objects()  # returns how many objects are frozen")
    check = textwrap.dedent("""
        import gc, sys
        from supervisor import freeze_startup_objects, tune_interpreter
        print(tune_interpreter(), sys.getswitchinterval(), gc.get_threshold()[2])
        print(freeze_startup_objects() > 0, gc.get_freeze_count() > 0)
    """)
    run(code, tmp_path)
    previous, interval, full = run(check, tmp_path).split()[:3]
    assert (float(previous), round(float(interval), 6), int(full)) == (0.005, 0.2, 100)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
def test_pin_to_one_cpu_does_what_the_readme_says(tmp_path: Path) -> None:
    """In a process of its own: the snippet pins every thread of it."""
    code = snippet("cpu = pin_to_one_cpu()  # the CPU this thread runs on")
    check = textwrap.dedent("""
        import os, threading
        found = []
        later = threading.Thread(target=lambda: found.append(os.sched_getaffinity(0)))
        later.start()
        later.join()
        print(os.sched_getaffinity(0) == {cpu}, found == [{cpu}])
        print(os.sched_getscheduler(0) == os.SCHED_BATCH)
    """)
    allowed = os.sched_getaffinity(0)
    assert run(code + check, tmp_path).split() == ["True", "True", "True"]
    assert os.sched_getaffinity(0) == allowed  # the test's own process is left as it was


def test_encryption_at_rest_snippet_runs_with_keys_from_the_environment(tmp_path: Path) -> None:
    code = snippet("keys = EncryptionKeys.from_env()")
    key = base64.b64encode(os.urandom(32)).decode()
    check = textwrap.dedent("""
        from actors import AgentTemplate
        with AgentHost(data_dir="sessionvisor-data", encryption=keys) as host:
            host.send(host.start_session(AgentTemplate(model="echo")), "top secret words")
        store.close()
        try:
            SQLiteCheckpointStore("sessionvisor-data/checkpoints.db")
        except Exception as exc:
            print(type(exc).__name__)
    """)
    out = run(code + check, tmp_path, env={"SESSIONVISOR_KEYS": f"2025-06:{key}"})
    assert out.strip() == "StoreEncrypted"
    for path in (tmp_path / "sessionvisor-data").iterdir():
        assert b"top secret words" not in path.read_bytes(), path


def test_provider_and_credentials_snippets_build_a_host(tmp_path: Path) -> None:
    code = ADD_TOOL + snippet('providers.register("claude", "anthropic", max_tokens=2048)')
    code += "host.shutdown()\n" + snippet("from actors import Credentials")
    check = textwrap.dedent("""
        from actors import AgentTemplate
        sid = host.start_session(AgentTemplate(model="echo"), tenant_id="acme")
        print(host.send(sid, "hi").content)
        try:
            host.start_session(AgentTemplate(model="echo"), tenant_id="initech")
        except Exception as exc:
            print(type(exc).__name__)
        host.shutdown()
    """)
    assert run(code + check, tmp_path).split() == ["echo:", "hi", "CredentialsUnavailable"]


def test_the_audit_plugin_reopens_its_log_after_a_crash(tmp_path: Path) -> None:
    code = ADD_TOOL + snippet("class AuditLog(Plugin):")
    check = textwrap.dedent("""
        from actors import AgentTemplate
        from supervisor import AgentHost

        with AgentHost(data_dir="d") as host:
            template = AgentTemplate(model="echo", tools=[add], plugins=[AuditLog()])
            sid = host.start_session(template, session_id="s")
            host.send(sid, '/add {"a": 1, "b": 2}')
            host.kill(sid)
            host.send(sid, '/add {"a": 3, "b": 4}')
            state = host.checkpoint(sid).state["plugins"]["audit"]
            print(state["calls"], state["log"])
    """)
    assert run(code + check, tmp_path).strip() == "2 {'__stripped__': '_io.TextIOWrapper'}"
    assert (tmp_path / "audit-s.log").read_text(encoding="utf-8").splitlines() == [
        "add {'a': 1, 'b': 2}",
        "add {'a': 3, 'b': 4}",
    ]


def test_a_plugin_offers_a_tool_that_writes_its_state(tmp_path: Path) -> None:
    code = snippet("class Notes(Plugin):")
    check = textwrap.dedent("""
        from actors import AgentTemplate
        from supervisor import AgentHost

        with AgentHost(data_dir="d") as host:
            sid = host.start_session(AgentTemplate(model="echo", plugins=[Notes()]))
            print(host.send(sid, '/note {"text": "milk"}').content)
            host.kill(sid)
            print(host.send(sid, '/note {"text": "eggs"}').content)
            print(host.checkpoint(sid).state["plugins"]["notes"])
    """)
    assert run(code + check, tmp_path).splitlines() == [
        "note returned: 1",
        "note returned: 2",
        "{'notes': ['milk', 'eggs']}",
    ]


def test_the_mcp_template_snippet_builds(tmp_path: Path) -> None:
    # Building the plugins connects to nothing: each session connects in session_start.
    code = 'my_model, token = "echo", "Bearer abc"\n' + snippet("from actors.mcp import")
    check = "print([(p.name, p.prefix, sorted(p.include or ())) for p in template.plugins])\n"
    expected = "[('files', 'fs_', []), ('search', '', ['web_search'])]"
    assert run(code + check, tmp_path).strip() == expected


def test_metrics_and_logs_snippets_run(tmp_path: Path) -> None:
    # Port 0 instead of 9100: a free port, so the test never clashes with a real exporter.
    metrics = snippet("HostMetrics(host)")
    metrics = metrics.replace("start_http_server(9100)", "start_http_server(0)")
    check = textwrap.dedent("""
        from prometheus_client import REGISTRY, generate_latest
        from actors import AgentTemplate
        host.send(host.start_session(AgentTemplate(model="echo")), "hi")
        host.shutdown()
        print([line for line in generate_latest(REGISTRY).decode().splitlines()
               if line.startswith("sessionvisor_turns_total")])
    """)
    out = run(snippet("JsonLogFormatter()") + metrics + check, tmp_path)
    assert out.strip() == """['sessionvisor_turns_total{tenant="default"} 1.0']"""


def test_the_cluster_node_snippet_and_follow(pg_dsn: str, tmp_path: Path) -> None:
    code = snippet("node=NodeConfig(").replace("postgresql://app@db.internal/agents", pg_dsn)
    prelude = 'from actors import AgentTemplate\nmy_template = AgentTemplate(model="echo")\n'
    follow = snippet('with host.follow("s1", since=cursor) as follower:')
    # The README's "..." is where the program works: a turn, then its last event awaited.
    follow = follow.replace(
        "    ...\n",
        "    done = threading.Event()\n"
        '    follower.subscribe(lambda e: e.type == "turn_finished" and done.set())\n'
        '    host.send("s1", "hi")\n'
        "    assert done.wait(10)\n",
    )
    program = (
        "import threading\n"
        + prelude
        + code
        + 'host.start_session(my_template, session_id="s1")\n'
        + 'cursor = host.events("s1").cursor\n'
        + follow
        + "print([e.type for e in batch.events], batch.missed)\n"
        + "host.shutdown()\nstore.close()\n"
    )
    out = run(program, tmp_path)
    assert out.strip().splitlines()[-1] == "['turn_started', 'model_response', 'turn_finished'] 0"


SERVE_TIMEOUT = 30.0


def test_the_serving_quick_start_runs_as_the_readme_says(tmp_path: Path) -> None:
    # "Serving over HTTP": a template module next to where the command runs, on
    # PYTHONPATH as the README says; a key, a server that prints where it serves, a
    # session created with curl's request, and SIGTERM: exit status 0.
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "agents.py").write_text(
        "from actors import AgentTemplate\n"
        'chat = AgentTemplate(model="echo", instructions="Be brief.")\n'
    )
    command = shutil.which("sessionvisor", path=str(Path(sys.executable).parent))
    assert command is not None, "the sessionvisor command is not installed beside python"
    env = {**os.environ, "PYTHONPATH": "."}
    created = subprocess.run(
        [command, "keys", "create", "--data-dir", "./data", "--tenant", "acme"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    key = created.stdout.split()[0]
    assert key.startswith("sv_")
    server = subprocess.Popen(
        [
            command,
            "serve",
            "--data-dir",
            "./data",
            "--template",
            "chat=myapp.agents:chat",
            "--port",
            "0",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(server.stdout, selectors.EVENT_READ)
            assert selector.select(SERVE_TIMEOUT), "serve printed nothing"
        line = server.stdout.readline().strip()
        assert line.startswith("serving on http://127.0.0.1:"), line
        url = line.removeprefix("serving on ")
        answer = httpx.post(
            f"{url}/v1/sessions",
            json={"template": "chat", "session_id": "s1"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=SERVE_TIMEOUT,
        )
        assert answer.status_code == 201, answer.text
        answer = httpx.post(
            f"{url}/v1/sessions/s1/messages",
            json={"text": "hi"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=SERVE_TIMEOUT,
        )
        assert answer.json() == {"message": {"role": "assistant", "content": "echo: hi"}}
        server.send_signal(signal.SIGTERM)
        assert server.wait(SERVE_TIMEOUT) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(SERVE_TIMEOUT)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


class _OneToolCall:
    """A model that calls ``slow`` once, then answers; it records each prompt's roles and
    texts. Called on one session's thread only."""

    def __init__(self) -> None:
        self.prompts: list[list[tuple[str, str | None]]] = []

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.prompts.append([(m.role, m.content) for m in messages])
        if len(self.prompts) == 1:
            call = ToolCall(id="c1", name="slow", arguments={})
            return ModelResponse(Message(role="assistant", content=None, tool_calls=(call,)))
        return ModelResponse(Message(role="assistant", content="ok"))


def test_a_bare_session_is_steered_mid_turn_through_its_own_queue() -> None:
    # "A session in a few lines": a proxy call waits for the running turn, so steering a
    # running turn goes through a SteeringQueue of the caller's, and its events through
    # an EventBuffer of the caller's, read while the tool runs.
    entered, release = threading.Event(), threading.Event()

    @tool
    def slow() -> str:
        """Wait until the test lets the turn go on."""
        entered.set()
        assert release.wait(10)
        return "done"

    model = _OneToolCall()
    steering, events = SteeringQueue(), EventBuffer()
    template = AgentTemplate(model=model, tools=[slow])
    ref = AgentSession.start(template, session_id="steered", steering=steering, event_buffer=events)
    try:
        answer = ref.proxy().send("start")
        assert entered.wait(10)
        assert [e.type for e in events.since(0).events] == [
            "turn_started",
            "model_response",
            "tool_call",
        ]
        steering.put("also this")
        release.set()
        assert answer.get(timeout=10).content == "ok"
    finally:
        release.set()
        ref.stop()
    assert model.prompts[-1] == [
        ("user", "start"),
        ("assistant", None),
        ("tool", "done"),
        ("user", "also this"),
    ]
