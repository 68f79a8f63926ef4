"""``AsyncAgentHost`` on a cluster node: a call that takes a session over holds no loop.

A call naming a session the node does not hold asks the cluster who owns it (a
PostgreSQL read) and may take it over (a resume: its checkpoint loaded, its
``session_start`` run). That must happen off the event loop, as every other
wait of the asyncio facade does: a loop held for it stalls every other request
of the server for as long as the take-over lasts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from actors import Plugin, PluginContext
from supervisor import AsyncAgentHost
from tests.supervisor.cluster_helpers import Cluster
from tests.supervisor.host_helpers import WAIT, template


class HeldStart(Plugin):
    """A ``session_start`` that waits (bounded) until the test lets it go, and remembers
    whether it was let go or gave up waiting."""

    name = "held-start"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.released: list[bool] = []

    def session_start(self, ctx: PluginContext) -> None:
        self.entered.set()
        self.released.append(self.release.wait(WAIT / 2))


def orphan_on_a_second_node(cluster: Cluster, held: HeldStart) -> AsyncAgentHost:
    """Session "s", saved and hibernated by node a, which then drained: nobody's, taken
    over on request by node b (the ``AsyncAgentHost`` returned), whose start is ``held``."""
    a = cluster.node("a")
    a.start_session(template(), "s")
    a.send("s", "before")
    a.hibernate("s")
    a.shutdown()
    return AsyncAgentHost(cluster.node("b", chosen=template(plugins=[held])))


async def first_event(ahost: AsyncAgentHost) -> Any:
    """The first event of "s" a stream opened before a send sees (the stream's opening
    takes the session over)."""
    async with ahost.events("s") as stream:
        reader = asyncio.create_task(anext(stream))
        await asyncio.sleep(0)  # one loop iteration: the reader's first step subscribes
        await ahost.send("s", "after")
        return await reader


CALLS: dict[str, Callable[[AsyncAgentHost], Awaitable[Any]]] = {
    "send": lambda ahost: ahost.send("s", "after"),
    "history": lambda ahost: ahost.history("s"),
    "events": first_event,
    "kill": lambda ahost: ahost.kill("s"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_take_over_on_request_runs_off_the_event_loop(cluster: Cluster, call: str) -> None:
    held = HeldStart()
    ahost = orphan_on_a_second_node(cluster, held)

    async def main() -> Any:
        task: asyncio.Task[Any] = asyncio.create_task(CALLS[call](ahost))  # type: ignore[arg-type]
        # The loop is free while the take-over waits in ``session_start``: this coroutine
        # runs on, sees the start begin and lets it go.
        assert await asyncio.to_thread(held.entered.wait, WAIT)
        held.release.set()
        return await asyncio.wait_for(task, WAIT)

    outcome = asyncio.run(main())
    # A kill's crash restarts the session: its next incarnation's session_start may have
    # run by now too (let go at once). The take-over's is the first.
    released = held.released[:1] if call == "kill" else held.released
    assert released == [True], "session_start gave up: the loop was held meanwhile"
    if call == "send":
        assert outcome.content == "echo: after"
    if call == "events":
        assert outcome.type == "turn_started"


def test_a_call_for_a_session_no_node_has_fails_off_the_loop_as_before(cluster: Cluster) -> None:
    ahost = AsyncAgentHost(cluster.node("b"))

    async def main() -> None:
        with pytest.raises(Exception, match="nope") as send:
            await ahost.send("nope", "hi")
        with pytest.raises(Exception, match="nope") as events:
            await first_event_of(ahost, "nope")
        assert type(send.value).__name__ == type(events.value).__name__ == "SessionNotFound"

    asyncio.run(main())


async def first_event_of(ahost: AsyncAgentHost, sid: str) -> Any:
    async with ahost.events(sid) as stream:
        return await anext(stream)


def test_a_stream_cancelled_while_its_take_over_runs_leaves_no_subscription(
    cluster: Cluster,
) -> None:
    held = HeldStart()
    ahost = orphan_on_a_second_node(cluster, held)

    async def main() -> None:
        reader = asyncio.create_task(first_event_of(ahost, "s"))
        assert await asyncio.to_thread(held.entered.wait, WAIT)
        reader.cancel()  # the reader leaves while the take-over runs
        with pytest.raises(asyncio.CancelledError):
            await reader
        held.release.set()
        # The take-over completes; the subscription the stream was making is then closed.
        assert (await ahost.send("s", "after")).content == "echo: after"

    asyncio.run(main())  # (its executor is joined at the end: the take-over is over)
    buffer = ahost.host._table.live("s", None).events
    streams = [s for s in buffer._subscribers if getattr(s, "__name__", "") == "notify"]
    assert streams == [], "a stream nobody reads is woken on every event of the session"
