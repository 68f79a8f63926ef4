"""Hunt 15: a fenced node answers ``history`` and ``checkpoint`` as it answers ``send``.

A node that fenced itself (it could not renew its lease in time) must stop acting as
the owner of its sessions: another node may have taken one over and run turns its copy
here lacks. ``send`` there raises ``NodeFenced``; ``history`` answered from the stale
copy (without the new owner's turns), and ``checkpoint`` wrote a checkpoint as a fenced
node (or raised ``OwnershipLost`` and stopped the copy). Now every form of both (blocking,
``host.futures``, ``AsyncAgentHost``) raises ``NodeFenced`` there, writes nothing, and
leaves the session alone on its owner. A node back from its fence that is still stopping
a copy another node took over meanwhile answers ``OwnershipLost`` from it, ``send``
included (no turn runs on that copy).

Nodes of this process on the test's own schema (``cluster_helpers``): a node fences
itself on a ``FakeClock`` and "dies" for the others by having its heartbeat made stale in
the database (``expire``), so each test decides when ownership moves.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import pytest

from actors import Event, Snapshot
from supervisor import (
    AgentHost,
    AsyncAgentHost,
    NodeFenced,
    OwnershipLost,
    SessionOwnedElsewhere,
)
from supervisor.cluster import ClusterNode, NodeConfig
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.cluster_helpers import (
    FENCE_TTL,
    FENCED,
    Cluster,
    FakeClock,
    expire,
    taken_over_while_fenced,
)
from tests.supervisor.host_helpers import WAIT, EventWaiter, host_options, pairs, template

TTL = FENCE_TTL


def _aio(host: AgentHost, call: Callable[[AsyncAgentHost], Awaitable[object]]) -> object:
    """``call`` of an ``AsyncAgentHost`` on ``host``, awaited on a loop of its own."""

    async def run() -> object:
        return await asyncio.wait_for(call(AsyncAgentHost(host)), WAIT)

    return asyncio.run(run())


READS: dict[str, Callable[[AgentHost, str], object]] = {
    "history": lambda host, sid: host.history(sid),
    "futures.history": lambda host, sid: host.futures.history(sid).result(WAIT),
    "aio.history": lambda host, sid: _aio(host, lambda aio: aio.history(sid)),
    "checkpoint": lambda host, sid: host.checkpoint(sid, "late"),
    "futures.checkpoint": lambda host, sid: host.futures.checkpoint(sid, "late").result(WAIT),
    "aio.checkpoint": lambda host, sid: _aio(host, lambda aio: aio.checkpoint(sid, "late")),
}
"""The calls under test, by name, each in every form a caller has."""

SENDS: dict[str, Callable[[AgentHost, str], object]] = {
    "send": lambda host, sid: host.send(sid, "late"),
    "futures.send": lambda host, sid: host.futures.send(sid, "late").result(WAIT),
}


def _saved(host: AgentHost, session_id: str) -> list[str]:
    """The ids of the session's checkpoints in the store, newest first."""
    return [info.checkpoint_id for info in host.store.list(session_id)]


def _texts(history: object) -> list[str]:
    assert isinstance(history, list)
    return [text for text, _ in pairs(history)]


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
def test_a_fenced_node_answers_no_read_of_a_session_taken_over(
    fenced_after_takeover: tuple[AgentHost, AgentHost, EventWaiter], call: str
) -> None:
    a, b, moved = fenced_after_takeover
    saved = _saved(b, "s")
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        READS[call](a, "s")  # was: a's copy's history ["one"], or a write refused
    assert _saved(b, "s") == saved  # nothing written by the fenced node
    assert b.node is not None
    assert b.node.leases() == {"s": 2}  # the owner's session undisturbed
    assert b.send("s", "three").content == "echo: three"
    assert _texts(b.history("s")) == ["one", "two", "three"]
    assert a.node is not None
    assert a.node.renew()  # back: it finds s claimed meanwhile, and stops its copy
    moved.wait_for("moved")
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        READS[call](a, "s")


@pytest.mark.parametrize("call", sorted(READS))
def test_a_fenced_node_writes_nothing_for_a_session_nobody_claimed(
    cluster: Cluster, call: str
) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=TTL, clock=clock)
    a.start_session(template(), "s")
    a.send("s", "one")
    saved = _saved(a, "s")
    clock.advance(FENCED)
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        READS[call](a, "s")  # was: a checkpoint written by a fenced node
    assert _saved(a, "s") == saved
    assert a.node is not None
    assert a.node.renew()  # nobody claimed s: the node serves it again
    answer = READS[call](a, "s")
    if call.endswith("history"):
        assert _texts(answer) == ["one"]
    else:
        assert a.store.load("s").label == "late"
        assert _saved(a, "s") == [a.store.load("s").checkpoint_id, *saved]


def test_a_fenced_node_answers_no_read_in_any_runtime(cluster: Cluster, mode: str) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=TTL, clock=clock, **host_options(mode))
    b = cluster.node("b", **host_options(mode))
    a.start_session(template(), "s")
    a.send("s", "one")
    clock.advance(FENCED)
    expire(a.store, "a")
    assert b.send("s", "two").content == "echo: two"
    saved = _saved(b, "s")
    for call in ("history", "futures.history", "checkpoint", "futures.checkpoint"):
        with pytest.raises(NodeFenced):
            READS[call](a, "s")
    assert _saved(b, "s") == saved
    assert _texts(b.history("s")) == ["one", "two"]


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


@pytest.mark.parametrize(
    "call",
    [
        *sorted(READS),
        *sorted(SENDS),
    ],
)
def test_a_node_back_from_its_fence_answers_nothing_from_a_copy_it_is_stopping(
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
    saved = _saved(b, "s")
    assert a.node is not None
    assert a.node.renew()  # not fenced now; the housekeeping thread stops the lost copies
    try:
        assert held.holding.wait(WAIT)  # ...and is held at the first: s still runs on a
        assert a.node.fenced is None
        assert [info.session_id for info in a.list_sessions()] == ["s"]
        with pytest.raises(OwnershipLost, match="session 's' is no longer owned by node 'a'"):
            {**READS, **SENDS}[call](a, "s")  # was: the copy's history ["one"]; a turn run
        assert seen.count("turn_started") == 0  # no turn ran on the copy
        assert _saved(b, "s") == saved
    finally:
        held.let_go()
    seen.wait_for("moved")
    assert _texts(b.history("s")) == ["one", "two"]
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        {**READS, **SENDS}[call](a, "s")
    assert a.node._revoked == {}  # nothing is kept of the copies gone (one per move)


def test_check_serving_names_a_session_the_node_lost(cluster: Cluster) -> None:
    """``ClusterNode.check_serving(session_id)``: ``NodeFenced`` while fenced; once back,
    ``OwnershipLost`` for a session claimed elsewhere meanwhile, even after the host's
    ``lose`` released it (it marks its record stopped only then), until the node claims
    the session again or stops it for good."""
    clock = FakeClock()
    node_a = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=TTL, clock=clock))
    node_b = ClusterNode(cluster.store(), NodeConfig(node_id="b", ttl=60.0))
    try:
        node_a.claim("kept")
        node_a.claim("taken")
        node_a.check_serving("taken")
        clock.advance(FENCED)
        with pytest.raises(NodeFenced, match="node 'a' is fenced"):
            node_a.check_serving("kept")
        expire(node_a.store, "a")
        assert node_b.claim("taken") == 2
        assert node_a.renew()
        node_a.check_serving()
        node_a.check_serving("kept")
        lost = "session 'taken' is no longer owned by node 'a' \\(epoch 1\\)"
        with pytest.raises(OwnershipLost, match=lost):
            node_a.check_serving("taken")
        node_a.release("taken", stopped=False)  # the host's lose releases it first...
        with pytest.raises(OwnershipLost, match=lost):
            node_a.check_serving("taken")  # ...and its copy is still no answer
        node_b.drain()  # the session is free again: a takes it over anew
        assert node_a.claim("taken") == 3
        node_a.check_serving("taken")
    finally:
        node_a.drain()
        node_b.drain()


def test_a_refused_save_marks_the_session_lost_without_a_fence(cluster: Cluster) -> None:
    """The database saw ``a`` dead while ``a`` never fenced itself (the clocks disagree):
    its refused save tells it the session moved, and its copy answers nothing from then on;
    a stop for good forgets that."""
    node_a = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=60.0))
    node_b = ClusterNode(cluster.store(), NodeConfig(node_id="b", ttl=60.0))
    try:
        node_a.claim("s")
        expire(node_a.store, "a")
        assert node_b.claim("s") == 2
        node_a.check_serving("s")  # a cannot know yet
        late = Snapshot.new(session_id="s", state=session_state(1, session_id="s"))
        with pytest.raises(OwnershipLost):
            node_a.save(late)
        with pytest.raises(OwnershipLost, match="\\(epoch 1\\)"):
            node_a.check_serving("s")
        node_a.release("s", stopped=True)
        node_a.check_serving("s")
    finally:
        node_a.drain()
        node_b.drain()
