"""Cost of an MCP tool call through ``MCPTools`` (issue 15), against the bare SDK.

Calls per second of ``add`` on the test MCP server (``tests/mcp_server.py``,
over stdio; one server process per connection) by three routes, in the same
run with rounds interleaved:

* **bare SDK**: ``await client.call_tool(...)`` in a loop inside one asyncio
  task: the floor, with no thread hop;
* **MCPConnection.call**: the same call from a plain thread, as a session's
  tool runs it: handed to the shared event loop thread and waited for;
* **session turn**: a whole ``AgentSession`` turn whose model (``EchoModel``)
  calls the MCP tool, then answers: model, tool, events, history.

The ratio of the middle one to the floor is what the sync-to-async bridge
costs; the turn shows the call in its context.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

from actors import AgentSession, AgentTemplate, EchoModel, Send
from actors.mcp import MCPConnection, MCPTools, StdioServer
from benchmarks._common import print_table

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp_server.py"
CALLS = 200
ROUNDS = 7


def _server() -> StdioServer:
    return StdioServer(sys.executable, [str(SERVER), "stdio"])


def _rate(fn: object, calls: int) -> float:
    assert callable(fn)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return calls / (time.perf_counter() - start)


async def _bare_rates(rounds: int) -> list[float]:
    """The floor: calls per second of the SDK's own client, in its own loop."""
    parameters = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    rates = []
    async with Client(parameters) as client:
        await client.call_tool("add", {"a": 1, "b": 2})
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(CALLS):
                await client.call_tool("add", {"a": 1, "b": 2})
            rates.append(CALLS / (time.perf_counter() - start))
    return rates


def main() -> None:
    connection = MCPConnection(_server(), connect_timeout=30, call_timeout=30)
    connection.open()
    template = AgentTemplate(model=EchoModel(), plugins=[MCPTools(_server())])
    session = AgentSession.start(template)
    turn = Send('/add {"a": 1, "b": 2}')
    bare: list[float] = []
    bridged: list[float] = []
    turns: list[float] = []
    try:
        connection.call("add", {"a": 1, "b": 2})
        session.ask(turn, timeout=30)
        for _ in range(ROUNDS):  # interleaved: one round of each, in turn
            bare += asyncio.run(_bare_rates(1))
            bridged.append(_rate(lambda: connection.call("add", {"a": 1, "b": 2}), CALLS))
            turns.append(_rate(lambda: session.ask(turn, timeout=30), CALLS // 4))
    finally:
        session.stop()
        connection.close()
    ratios = [b / f for b, f in zip(bridged, bare, strict=True)]
    print_table(
        f"MCP tool call over stdio ({ROUNDS} interleaved rounds of {CALLS} calls; medians)",
        [
            ("bare SDK client.call_tool", f"{statistics.median(bare):8.0f} calls/s"),
            ("MCPConnection.call (thread)", f"{statistics.median(bridged):8.0f} calls/s"),
            ("  ratio to bare SDK", f"{statistics.median(ratios):8.2f}"),
            ("session turn with an MCP call", f"{statistics.median(turns):8.0f} turns/s"),
        ],
    )


if __name__ == "__main__":
    main()
