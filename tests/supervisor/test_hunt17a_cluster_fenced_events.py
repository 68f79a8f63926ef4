"""Hunt 17a: a fenced node answers no read of a session's events from its stale copy.

A node that fenced itself (it could not renew its lease in time) may have lost its
sessions to another node, which runs turns the copy here lacks. ``send``, ``history``
and ``checkpoint`` there raise ``NodeFenced`` (hunt 15), but ``events`` answered from
the copy's buffer without a word: a reader polling with its cursor saw a session with
nothing new, while its owner ran turns. ``subscribe`` and ``AsyncAgentHost.events``
subscribed to that copy as well. Now each raises ``NodeFenced`` there (``OwnershipLost``
from a copy the node is stopping because another node took the session over), as
``history`` does, and answers again once the node has renewed its lease.

A stream opened while the node served is not cut at the fence (a fence is no moment the
host sees, only a clock reading): the copy runs no turn meanwhile, and once the node
learns the session moved its stream ends with the ``moved`` event.

Nodes of this process on the test's own schema (``cluster_helpers``): a node fences
itself on a ``FakeClock`` and "dies" for the others by having its heartbeat made stale in
the database (``expire``), so each test decides when ownership moves.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from actors import Event
from supervisor import (
    AgentHost,
    AsyncAgentHost,
    EventStream,
    NodeFenced,
    OwnershipLost,
    SessionOwnedElsewhere,
)
from tests.supervisor.cluster_helpers import (
    FENCE_TTL,
    FENCED,
    Cluster,
    FakeClock,
    expire,
    taken_over_while_fenced,
)
from tests.supervisor.host_helpers import WAIT, EventWaiter, template

TTL = FENCE_TTL


async def _first_events(stream_of: Callable[[], EventStream], count: int) -> list[Event]:
    """The first ``count`` events of the stream ``stream_of()`` makes (each wait bounded by
    ``WAIT``); the stream is closed after."""
    stream = stream_of()
    try:
        return [await asyncio.wait_for(stream.__anext__(), WAIT) for _ in range(count)]
    finally:
        await stream.aclose()


def _aio_events(host: AgentHost, sid: str) -> object:
    """``AsyncAgentHost.events`` read on a loop of its own: its first event."""
    return asyncio.run(_first_events(lambda: AsyncAgentHost(host).events(sid, since=0), 1))


READS: dict[str, Callable[[AgentHost, str], object]] = {
    "events": lambda host, sid: host.events(sid),
    "events.since": lambda host, sid: host.events(sid, 1),
    "subscribe": lambda host, sid: host.subscribe(sid, EventWaiter()),
    "aio.events": _aio_events,
}
"""The calls under test, by name, each in every form a caller has."""


def _turns(host: AgentHost, session_id: str) -> int:
    """How many turns the session's event stream on ``host`` holds."""
    return sum(1 for e in host.events(session_id).events if e.type == "turn_started")


@pytest.fixture
def fenced_after_takeover(
    cluster: Cluster, request: pytest.FixtureRequest
) -> tuple[AgentHost, AgentHost, EventWaiter]:
    """``taken_over_while_fenced``, with ``a``'s copy hibernated if ``request.param`` says
    ``"hibernated"``."""
    hibernated = getattr(request, "param", "running") == "hibernated"
    return taken_over_while_fenced(cluster, hibernated=hibernated)


@pytest.mark.parametrize("fenced_after_takeover", ["running", "hibernated"], indirect=True)
@pytest.mark.parametrize("call", sorted(READS))
def test_a_fenced_node_answers_no_read_of_events_of_a_session_taken_over(
    fenced_after_takeover: tuple[AgentHost, AgentHost, EventWaiter], call: str
) -> None:
    a, b, seen = fenced_after_takeover
    assert _turns(b, "s") == 1  # the owner's stream has the turn a's copy lacks
    assert a.node is not None
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        READS[call](a, "s")  # was: a's copy's events, one turn and none of b's
    assert b.node is not None
    assert b.node.leases() == {"s": 2}  # the owner's session undisturbed
    assert b.send("s", "three").content == "echo: three"
    assert _turns(b, "s") == 2
    assert a.node.renew()  # back: it finds s claimed meanwhile, and stops its copy
    seen.wait_for("moved")  # (subscribed before the fence: the copy's last event)
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        READS[call](a, "s")


@pytest.mark.parametrize("call", sorted(READS))
def test_a_fenced_node_answers_events_again_once_it_renewed(cluster: Cluster, call: str) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=TTL, clock=clock)
    a.start_session(template(), "s")
    a.send("s", "one")
    clock.advance(FENCED)
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        READS[call](a, "s")
    assert a.node is not None
    assert a.node.renew()  # nobody claimed s: the node serves it again
    answer = READS[call](a, "s")
    if call == "subscribe":
        assert callable(answer)
        seen = EventWaiter()
        a.subscribe("s", seen)
        a.send("s", "two")
        assert seen.wait_for("turn_started").data is not None
    elif call == "aio.events":
        assert isinstance(answer, list)
        assert [event.seq for event in answer] == [1]
    else:
        assert _turns(a, "s") == 1


class _HeldMove:
    """Subscriber that holds the thread publishing a session's ``moved`` event (the
    node's housekeeping thread, while it stops the sessions it lost) until ``let_go``;
    every wait is bounded by ``WAIT``."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self._go = threading.Event()

    def __call__(self, event: Event) -> None:
        if event.type == "moved":
            self.holding.set()
            self._go.wait(WAIT)

    def let_go(self) -> None:
        self._go.set()


@pytest.mark.parametrize("call", sorted(READS))
def test_a_node_back_from_its_fence_answers_no_events_from_a_copy_it_is_stopping(
    cluster: Cluster, call: str
) -> None:
    clock = FakeClock()
    a, b = cluster.node("a", ttl=TTL, clock=clock), cluster.node("b")
    for sid in ("first", "s"):  # lost in this order by a's renewal
        a.start_session(template(), sid)
        a.send(sid, "one")
    held, seen = _HeldMove(), EventWaiter()
    a.subscribe("first", held)
    a.subscribe("s", seen)
    clock.advance(FENCED)
    expire(a.store, "a")
    for sid in ("first", "s"):
        assert b.send(sid, "two").content == "echo: two"
    assert a.node is not None
    assert a.node.renew()  # not fenced now; the housekeeping thread stops the lost copies
    try:
        assert held.holding.wait(WAIT)  # ...and is held at the first: s still runs on a
        assert a.node.fenced is None
        assert [info.session_id for info in a.list_sessions()] == ["s"]
        with pytest.raises(OwnershipLost, match="session 's' is no longer owned by node 'a'"):
            READS[call](a, "s")  # was: the copy's events, without b's turn
    finally:
        held.let_go()
    seen.wait_for("moved")
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        READS[call](a, "s")


def test_a_stream_made_before_the_fence_refuses_at_its_first_read(cluster: Cluster) -> None:
    """``AsyncAgentHost.events`` subscribes at the first ``__anext__``: a stream made while
    the node served and first read once it is fenced refuses there, and unsubscribes."""
    clock = FakeClock()
    a = cluster.node("a", ttl=TTL, clock=clock)
    a.start_session(template(), "s")
    a.send("s", "one")

    async def run() -> None:
        stream = AsyncAgentHost(a).events("s", since=0)
        clock.advance(FENCED)
        with pytest.raises(NodeFenced, match="node 'a' is fenced"):
            await asyncio.wait_for(stream.__anext__(), WAIT)
        with pytest.raises(StopAsyncIteration):  # ended: it reads nothing more
            await asyncio.wait_for(stream.__anext__(), WAIT)

    asyncio.run(run())


def test_an_open_stream_ends_once_the_node_learns_it_lost_the_session(
    cluster: Cluster,
) -> None:
    """A stream open since before the fence is not cut by it; the copy runs no turn
    meanwhile (``send`` is refused), and the node's renewal, finding the session claimed
    elsewhere, stops the copy and so ends the stream: its reader goes on at the new owner
    (whose stream is numbered above every event a's copy made known)."""
    clock = FakeClock()
    a, b = cluster.node("a", ttl=TTL, clock=clock), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")

    async def run() -> list[str]:
        stream = AsyncAgentHost(a).events("s")
        types = [(await asyncio.wait_for(stream.__anext__(), WAIT)).type]  # open, and read
        clock.advance(FENCED)
        expire(a.store, "a")
        assert (await asyncio.to_thread(b.send, "s", "two")).content == "echo: two"
        assert a.node is not None
        assert await asyncio.to_thread(a.node.renew)
        async with asyncio.timeout(WAIT):
            types.extend([event.type async for event in stream])
        return types

    types = asyncio.run(run())  # (the ``async for`` ended: the copy was stopped)
    assert types.count("turn_started") == 1  # a's own turn; none of b's came through a
