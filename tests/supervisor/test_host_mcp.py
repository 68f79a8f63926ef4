"""MCP tools in sessions of an ``AgentHost``, in every mode (threads, worker processes).

The stdio servers are processes of the session's process: this one in thread
mode, a worker in process mode, where ``MCPTools`` travels with the template
and opens its connection. Every test checks that no server process outlives
its host. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actors import AgentTemplate, PluginError
from actors.mcp import MCPServerUnavailable
from supervisor import AgentHost
from tests.mcp_helpers import HttpServerProcess, descendants, ended_within, mcp_tools, stdio_server
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import WAIT, HostFactory, template, watch_events

MCP_WAIT = 40.0
"""A call that starts a stdio server (a Python process importing the SDK) on a loaded machine."""


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Whatever a test started (hosts, workers, servers) is gone once its hosts shut down."""
    before = descendants()
    yield
    left = descendants() - before
    assert all(ended_within(pid) for pid in left), f"processes left: {sorted(left)}"


def _mcp_template() -> AgentTemplate:
    """The host tests' template (its own ``add`` included) with the test server's tools
    as ``mcp_*``."""
    return template(plugins=[mcp_tools(stdio_server(), prefix="mcp_")])


def _pid(host: AgentHost, session_id: str) -> int:
    answer = host.send(session_id, "/mcp_pid", timeout=MCP_WAIT).content or ""
    return int(answer.removeprefix("mcp_pid returned: "))


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_mcp_tools_are_called_where_the_session_runs(make_host: HostFactory, mode: str) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    answer = host.send(sid, '/mcp_add {"a": 2, "b": 40}', timeout=MCP_WAIT)
    assert answer.content == "mcp_add returned: 42"
    assert host.send(sid, '/add {"a": 2, "b": 40}').content == "add returned: 42"
    server = _pid(host, sid)
    runs_in = _parent(server)
    if mode == "thread":
        assert runs_in == os.getpid()
    else:
        assert runs_in in {w.pid for w in host.workers()}
    results = [e.data for e in host.events(sid).events if e.type == "tool_result"]
    assert [(r["name"], r["ok"]) for r in results] == [
        ("mcp_add", True),
        ("add", True),
        ("mcp_pid", True),
    ]
    host.shutdown()
    assert ended_within(server)


def test_a_resume_after_a_crash_opens_a_new_connection(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    first = _pid(host, sid)
    waiter = watch_events(host, sid)
    host.kill(sid, reason="test")
    waiter.wait_for("resumed", timeout=MCP_WAIT)
    assert ended_within(first)  # the crashed incarnation's session_end closed it
    second = _pid(host, sid)
    assert second != first
    assert len([m for m in host.history(sid) if m.role == "user"]) == 2


def test_a_server_that_dies_mid_session_is_a_tool_error_then_reconnected(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    first = _pid(host, sid)
    answer = host.send(sid, "/mcp_crash", timeout=MCP_WAIT).content or ""
    assert answer.startswith("mcp_crash returned: error: MCPServerUnavailable: ")
    assert "the next call reconnects" in answer
    assert ended_within(first)
    assert _pid(host, sid) != first
    types = [e.type for e in host.events(sid).events]
    assert types.count("mcp_connection_lost") == types.count("mcp_reconnected") == 1
    assert types.index("mcp_connection_lost") < types.index("mcp_reconnected")


def test_a_server_down_at_resume_fails_that_start_not_the_host(make_host: HostFactory) -> None:
    host = make_host()
    with HttpServerProcess() as server:
        mcp = template(plugins=[mcp_tools(server.address, prefix="mcp_")])
        sid = host.start_session(mcp)
        other = host.start_session(template())
        assert host.send(sid, '/mcp_add {"a": 1, "b": 2}').content == "mcp_add returned: 3"
        host.stop_session(sid)
        server.stop()
        with pytest.raises(PluginError) as info:
            host.resume(sid, mcp)
        assert info.value.hook == "session_start"
        assert isinstance(info.value.error, MCPServerUnavailable)
        assert info.value.error.server == server.address.describe()
        assert "cannot connect" in str(info.value)
        assert host.send(other, "still here").content == "echo: still here"
        server.start()  # the same port
        assert host.resume(sid, mcp) == sid
        assert host.send(sid, '/mcp_add {"a": 3, "b": 4}').content == "mcp_add returned: 7"


@pytest.mark.parametrize("mode", ["process"])
def test_a_stdio_server_ends_with_its_killed_worker_and_the_session_reconnects(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    server = _pid(host, sid)
    worker = _parent(server)
    waiter = watch_events(host, sid)
    os.kill(worker, signal.SIGKILL)  # no session_end: the server sees its stdin end
    assert ended_within(server)
    waiter.wait_for("resumed", timeout=MCP_WAIT)
    assert _pid(host, sid) not in {server, 0}


def test_a_crash_while_the_server_is_down_gives_the_session_up_not_the_host(
    make_host: HostFactory,
) -> None:
    host = make_host(clock=FakeClock(), max_restarts=2, max_seconds=5.0)
    with HttpServerProcess() as server:
        mcp = template(plugins=[mcp_tools(server.address, prefix="mcp_")])
        sid = host.start_session(mcp)
        other = host.start_session(template())
        assert host.send(sid, '/mcp_add {"a": 1, "b": 2}').content == "mcp_add returned: 3"
        server.stop()
        waiter = watch_events(host, sid)
        host.kill(sid)
        given_up = waiter.wait_for("given_up", timeout=MCP_WAIT)
        assert "MCPServerUnavailable" in given_up.data["reason"]
        assert {s.session_id: s.status for s in host.list_sessions()} == {
            sid: "failed",
            other: "active",
        }
        assert host.send(other, "fine").content == "echo: fine"
        server.start()
        assert host.resume(sid, mcp) == sid  # its checkpoints were kept
        assert host.send(sid, '/mcp_add {"a": 2, "b": 2}').content == "mcp_add returned: 4"


def test_events_before_an_mcp_call_reach_subscribers_while_it_runs(
    make_host: HostFactory, tmp_path: Path
) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    _pid(host, sid)  # connected and warm
    waiter = watch_events(host, sid)
    release = tmp_path / "release"
    with ThreadPoolExecutor(1) as pool:
        sending = pool.submit(host.send, sid, f'/mcp_wait_for {{"path": "{release}"}}', MCP_WAIT)
        call = waiter.wait_for("tool_call", timeout=WAIT)  # published before the call runs
        assert call.data["name"] == "mcp_wait_for"
        assert not sending.done()
        release.touch()
        assert sending.result(MCP_WAIT).content == "mcp_wait_for returned: there"


def test_hosts_without_mcp_sessions_run_no_mcp_thread(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(_mcp_template())
    _pid(host, sid)
    host.stop_session(sid)
    assert "mcp-event-loop" not in {t.name for t in threading.enumerate()}
