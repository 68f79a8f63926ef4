"""``actors.mcp``: MCPTools against the test MCP server (``tests/mcp_server.py``), in
sessions on threads of this process; the worker-process and host cases are in
``tests/supervisor/test_host_mcp.py``.

Every wait is bounded; servers are real processes, and every test checks that
they are gone afterwards (the autouse fixture checks threads).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp.types as mcp_types
import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Event,
    PluginError,
    is_stripped_marker,
    tool,
)
from actors.mcp import (
    HttpServer,
    MCPConnection,
    MCPServerUnavailable,
    MCPTools,
    StdioServer,
)
from actors.mcp._loop import SHARED_LOOP, SharedLoop
from actors.mcp._plugin import model_tool_name
from actors.mcp._results import result_text
from tests.mcp_helpers import (
    SERVER_SCRIPT,
    WAIT,
    HttpServerProcess,
    descendants,
    ended_within,
    mcp_tools,
    stdio_server,
)

Ref = pykka.ActorRef[AgentSession]


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a process of its own running (a stdio server, say)."""
    before = descendants()
    yield
    left = descendants() - before
    assert all(ended_within(pid) for pid in left), f"processes left: {sorted(left)}"
    assert not SHARED_LOOP.running


@pytest.fixture
def refs() -> Iterator[list[Ref]]:
    started: list[Ref] = []
    yield started
    for ref in started:
        if ref.is_alive():
            ref.stop(timeout=WAIT)


@pytest.fixture
def http_server() -> Iterator[HttpServerProcess]:
    with HttpServerProcess() as server:
        yield server


def _send(ref: Ref, text: str) -> str:
    content: str | None = ref.proxy().send(text).get(timeout=WAIT).content
    assert content is not None
    return content


def _events(ref: Ref, *types: str) -> list[Event]:
    return [e for e in ref.proxy().events().get(timeout=WAIT).events if e.type in types]


def _start(refs: list[Ref], plugin: MCPTools, **kwargs: Any) -> Ref:
    template = AgentTemplate(model=EchoModel(), plugins=[plugin], **kwargs)
    ref = AgentSession.start(template)
    refs.append(ref)
    return ref


# -- tools, calls, results -----------------------------------------------------------------


def test_the_servers_tools_are_offered_and_called(refs: list[Ref]) -> None:
    ref = _start(refs, mcp_tools(stdio_server()))
    tools = ref.proxy().tools.get(timeout=WAIT)
    assert {"add", "echo", "fail", "pid", "crash", "block", "picture"} <= set(tools)
    assert tools["add"].description == "Add two integers."
    assert tools["add"].parameters["required"] == ["a", "b"]
    assert _send(ref, '/add {"a": 2, "b": 40}') == "add returned: 42"
    assert _send(ref, '/echo {"text": "héllo"}') == "echo returned: héllo"
    (result,) = [e.data for e in _events(ref, "tool_result") if e.data["name"] == "add"]
    assert result["ok"] is True


def test_a_tool_error_is_a_tool_message_and_the_connection_stays(refs: list[Ref]) -> None:
    ref = _start(refs, mcp_tools(stdio_server()))
    server = _send(ref, "/pid")
    answer = _send(ref, '/fail {"message": "no such file"}')
    assert answer.startswith("fail returned: error: MCPToolError: MCP tool 'fail'")
    assert _send(ref, '/add {"a": "x"}').startswith("add returned: error: MCPToolError")
    assert _send(ref, "/pid") == server  # same process: the connection stayed
    failed = [e.data for e in _events(ref, "tool_result") if not e.data["ok"]]
    assert [f["name"] for f in failed] == ["fail", "add"]


def test_content_that_is_not_text_reaches_the_model_as_json(refs: list[Ref]) -> None:
    ref = _start(refs, mcp_tools(stdio_server()))
    block = json.loads(_send(ref, "/picture").removeprefix("picture returned: "))
    assert block == {"type": "image", "data": "R0lGODlhAQABAAAAACw=", "mimeType": "image/gif"}


def test_result_text_joins_blocks_and_falls_back_to_structured_content() -> None:
    text = mcp_types.TextContent(type="text", text="one")
    link = mcp_types.ResourceLink(type="resource_link", uri="file:///a", name="a")
    mixed = mcp_types.CallToolResult(content=[text, link])
    first, second = result_text(mixed).split("\n")
    assert first == "one"
    assert json.loads(second) == {"type": "resource_link", "uri": "file:///a", "name": "a"}
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert result_text(structured) == '{"n": 1}'
    assert result_text(mcp_types.CallToolResult(content=[])) == ""


def test_a_call_that_times_out_is_a_tool_error_and_the_connection_stays(
    refs: list[Ref],
) -> None:
    ref = _start(refs, mcp_tools(stdio_server(), call_timeout=0.5))
    server = _send(ref, "/pid")
    answer = _send(ref, "/block")
    assert answer == (
        f"block returned: error: TimeoutError: MCP tool 'block' of server "
        f"{stdio_server().describe()} did not answer within call_timeout=0.5s"
    )
    assert _send(ref, "/pid") == server


def test_prefix_and_include_choose_what_the_model_sees(refs: list[Ref]) -> None:
    ref = _start(refs, mcp_tools(stdio_server(), prefix="srv_", include=["add", "echo"]))
    assert sorted(ref.proxy().tools.get(timeout=WAIT)) == ["srv_add", "srv_echo"]
    assert _send(ref, '/srv_add {"a": 1, "b": 1}') == "srv_add returned: 2"


def test_tool_names_providers_refuse_are_offered_in_a_form_they_accept(
    refs: list[Ref],
) -> None:
    # MCP allows "notes.read"; OpenAI and Anthropic refuse any tool name outside
    # ^[A-Za-z0-9_-]{1,64}$, which would fail every model call of the session.
    ref = _start(refs, mcp_tools(stdio_server(), prefix="kb.", include=["notes.read", "add"]))
    tools = ref.proxy().tools.get(timeout=WAIT)
    assert sorted(tools) == ["kb_add", "kb_notes_read"]
    assert _send(ref, '/kb_notes_read {"topic": "mcp"}') == "kb_notes_read returned: note on mcp"
    valid = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
    long_a, long_b = model_tool_name("", "x" * 70 + "a"), model_tool_name("", "x" * 70 + "b")
    assert valid.match(long_a)
    assert valid.match(long_b)
    assert long_a != long_b
    assert model_tool_name("srv_", "add") == "srv_add"


def test_include_naming_a_tool_the_server_lacks_fails_the_start() -> None:
    with pytest.raises(PluginError, match=r"include names tools \['nope'\]") as info:
        AgentSession.start(
            AgentTemplate(model=EchoModel(), plugins=[mcp_tools(stdio_server(), include=["nope"])])
        )
    assert info.value.hook == "session_tools"


def test_a_clash_with_a_template_tool_fails_the_start_and_a_prefix_resolves_it(
    refs: list[Ref],
) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """The template's own add."""
        return a - b

    with pytest.raises(PluginError, match="'add' is already taken by the template"):
        _start(refs, mcp_tools(stdio_server()), tools=[add])
    ref = _start(refs, mcp_tools(stdio_server(), prefix="mcp_"), tools=[add])
    assert _send(ref, '/add {"a": 5, "b": 3}') == "add returned: 2"
    assert _send(ref, '/mcp_add {"a": 5, "b": 3}') == "mcp_add returned: 8"


def test_two_servers_in_one_template(refs: list[Ref], http_server: HttpServerProcess) -> None:
    template = AgentTemplate(
        model=EchoModel(),
        plugins=[
            mcp_tools(stdio_server(), name="local", prefix="local_"),
            mcp_tools(http_server.address, name="remote", prefix="remote_"),
        ],
    )
    refs.append(ref := AgentSession.start(template))
    assert _send(ref, "/remote_pid") == f"remote_pid returned: {http_server.pid}"
    assert _send(ref, '/local_add {"a": 1, "b": 2}') == "local_add returned: 3"
    assert sorted(ref.proxy().state().get(timeout=WAIT)["plugins"]) == ["local", "remote"]


# -- the live connection: snapshots, resume, the end ---------------------------------------


def test_the_connection_is_stripped_from_snapshots_and_reopened_on_resume(
    refs: list[Ref],
) -> None:
    plugin = mcp_tools(stdio_server())
    ref = _start(refs, plugin)
    first = int(_send(ref, "/pid").removeprefix("pid returned: "))
    snapshot = ref.proxy().snapshot().get(timeout=WAIT)
    assert snapshot.stripped_fields == ("plugins.mcp.connection",)
    assert is_stripped_marker(snapshot.state["plugins"]["mcp"]["connection"])
    ref.stop(timeout=WAIT)
    assert ended_within(first)  # session_end stopped the server
    state = snapshot.state
    again = AgentSession.start(
        AgentTemplate(model=EchoModel(), plugins=[plugin]),
        restored_state=state,
        stripped_fields=snapshot.stripped_fields,
    )
    refs.append(again)
    second = int(_send(again, "/pid").removeprefix("pid returned: "))
    assert second != first


def test_sessions_share_one_event_loop_thread_that_ends_with_the_last(refs: list[Ref]) -> None:
    plugin = mcp_tools(stdio_server())
    first, second = _start(refs, plugin), _start(refs, plugin)
    assert _send(first, "/pid") != _send(second, "/pid")  # a server process each
    loops = [t for t in threading.enumerate() if t.name == "mcp-event-loop"]
    assert len(loops) == 1
    first.stop(timeout=WAIT)
    assert loops[0].is_alive()
    second.stop(timeout=WAIT)
    assert not loops[0].is_alive()  # release joined it
    assert not SHARED_LOOP.running


# -- servers that fail -----------------------------------------------------------------------


def test_a_server_that_cannot_start_fails_the_session_start() -> None:
    plugin = mcp_tools(StdioServer("/nonexistent/mcp-server"))
    with pytest.raises(PluginError) as info:
        AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[plugin]))
    assert info.value.hook == "session_start"
    assert isinstance(info.value.error, MCPServerUnavailable)
    assert "cannot connect (FileNotFoundError" in str(info.value)
    assert "/nonexistent/mcp-server" in str(info.value)


def test_an_http_server_that_is_down_fails_the_session_start(
    http_server: HttpServerProcess,
) -> None:
    address = http_server.address
    http_server.stop()
    with pytest.raises(PluginError) as info:
        AgentSession.start(AgentTemplate(model=EchoModel(), plugins=[mcp_tools(address)]))
    error = info.value.error
    assert isinstance(error, MCPServerUnavailable)
    assert error.server == address.describe()
    assert "check that the server runs and is reachable at that URL" in str(error)


def test_a_stdio_server_that_dies_mid_call_is_a_tool_error_then_reconnected(
    refs: list[Ref],
) -> None:
    ref = _start(refs, mcp_tools(stdio_server()))
    first = int(_send(ref, "/pid").removeprefix("pid returned: "))
    answer = _send(ref, "/crash")
    assert answer.startswith("crash returned: error: MCPServerUnavailable: ")
    assert "lost the connection during the call to 'crash'" in answer
    assert "the next call reconnects" in answer
    assert ended_within(first)
    second = int(_send(ref, "/pid").removeprefix("pid returned: "))
    assert second != first
    lost, reconnected = _events(ref, "mcp_connection_lost", "mcp_reconnected")
    assert (lost.type, reconnected.type) == ("mcp_connection_lost", "mcp_reconnected")
    assert lost.data["plugin"] == "mcp"
    assert lost.data["server"] == stdio_server().describe()
    assert reconnected.data["tools"] >= 7


def test_an_http_server_that_dies_is_a_tool_error_until_it_is_back(
    refs: list[Ref], http_server: HttpServerProcess
) -> None:
    ref = _start(refs, mcp_tools(http_server.address))
    assert _send(ref, '/add {"a": 1, "b": 1}') == "add returned: 2"
    http_server.stop()
    down = _send(ref, '/add {"a": 1, "b": 1}')
    assert down.startswith("add returned: error: MCPServerUnavailable: ")
    still_down = _send(ref, '/add {"a": 1, "b": 1}')
    assert "cannot connect" in still_down  # the next call tried to reconnect
    http_server.start()
    assert _send(ref, '/add {"a": 1, "b": 1}') == "add returned: 2"
    types = [e.type for e in _events(ref, "mcp_connection_lost", "mcp_reconnected")]
    assert types[0] == "mcp_connection_lost"
    assert types[-1] == "mcp_reconnected"


def test_an_http_server_restarted_between_calls_goes_unnoticed(
    refs: list[Ref], http_server: HttpServerProcess
) -> None:
    ref = _start(refs, mcp_tools(http_server.address))
    before = _send(ref, "/pid")
    http_server.stop()
    http_server.start()  # same port; a 2026-era server keeps no MCP session to lose
    assert _send(ref, "/pid") == f"pid returned: {http_server.pid}" != before


def test_a_legacy_http_server_restarted_between_calls_gets_a_new_session_and_the_call(
    refs: list[Ref],
) -> None:
    with HttpServerProcess(legacy=True) as server:
        ref = _start(refs, mcp_tools(server.address))
        before = _send(ref, "/pid")
        server.stop()
        server.start()  # it knows nothing of the old MCP session: 404 "Session not found"
        assert _send(ref, "/pid") == f"pid returned: {server.pid}" != before
        lost, reconnected = _events(ref, "mcp_connection_lost", "mcp_reconnected")
        assert lost.type == "mcp_connection_lost"
        assert "the server refused the request (Session not found)" in lost.data["error"]
        assert reconnected.type == "mcp_reconnected"


def test_a_closed_connection_refuses_calls() -> None:
    connection = MCPConnection(stdio_server(), connect_timeout=WAIT, call_timeout=WAIT)
    connection.open()
    assert connection.connected
    assert connection.call("add", {"a": 1, "b": 2}) == "3"
    connection.close()
    connection.close()  # idempotent
    with pytest.raises(MCPServerUnavailable, match="the connection is closed"):
        connection.call("add", {"a": 1, "b": 2})
    with pytest.raises(RuntimeError, match="opens once"):
        connection.open()


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: MCPTools("npx"), TypeError, "StdioServer or an HttpServer"),  # type: ignore[arg-type]
        (lambda: MCPTools(stdio_server(), call_timeout=0), ValueError, "call_timeout"),
        (lambda: MCPTools(stdio_server(), name=""), ValueError, "name"),
        (lambda: MCPTools(stdio_server(), include="add"), TypeError, "include"),
        (lambda: StdioServer(""), ValueError, "command"),
        (lambda: StdioServer("npx", "server"), TypeError, "split it"),
        (lambda: HttpServer("127.0.0.1:80/mcp"), ValueError, "http"),
        # Each of these failed every session's start instead, with a TypeError or a
        # pydantic error from deep in the SDK.
        (lambda: StdioServer("npx", ["server", 8080]), TypeError, "got 8080 at position 1"),  # type: ignore[list-item]
        (
            lambda: StdioServer("npx", env={"PORT": 8080}),  # type: ignore[dict-item]
            TypeError,
            "'PORT' maps to a value of type int",
        ),
        (lambda: HttpServer("http://h/mcp", headers={"X-N": 1}), TypeError, "'X-N' maps"),  # type: ignore[dict-item]
    ],
)
def test_bad_configuration_is_refused_where_it_is_written(
    make: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        make()


def test_paths_are_taken_as_the_command_and_arguments(refs: list[Ref]) -> None:
    # Typed as str (what the fields hold); a path, the usual value, is taken as its str.
    server = StdioServer(Path(sys.executable), [SERVER_SCRIPT, "stdio"])  # type: ignore[arg-type, list-item]
    assert server.args == (str(SERVER_SCRIPT), "stdio")
    assert server.describe() == stdio_server().describe()
    ref = _start(refs, mcp_tools(server))
    assert _send(ref, '/add {"a": 1, "b": 2}') == "add returned: 3"


def test_credentials_stay_out_of_reprs_and_descriptions() -> None:
    server = HttpServer("https://user:pw@example.com/mcp?key=k", headers={"Authorization": "x"})
    assert server.describe() == "https://example.com/mcp"
    assert "Authorization" not in repr(MCPTools(server))
    assert "pw" not in repr(server)


def test_the_shared_loop_runs_while_held() -> None:
    loop = SharedLoop(name="test-loop")
    first = loop.hold()
    assert loop.hold() is first
    loop.release()
    assert loop.running
    loop.release()
    assert not loop.running
    assert first.is_closed()
    with pytest.raises(RuntimeError, match="released more often than held"):
        loop.release()
    second = loop.hold()
    assert second is not first
    loop.release()
