"""Hunt 5: hibernated sessions and fenced nodes, with sessions moving between nodes.

Hosts of this process on the test's own schema (``cluster_helpers``); a node "dies"
by having its heartbeat made stale in the database (``expire``) and fences itself on
a ``FakeClock``, so each test decides when ownership may move.
"""

from __future__ import annotations

import pytest

from supervisor import NodeFenced, SessionOwnedElsewhere
from tests.supervisor.cluster_helpers import Cluster, FakeClock, expire, quiesce
from tests.supervisor.host_helpers import EventWaiter, pairs, template


def test_a_hibernated_session_taken_over_while_its_node_was_frozen_is_lost_there(
    cluster: Cluster,
) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=30.0, clock=clock)
    b = cluster.node("b")
    a.start_session(template(), "h")
    a.send("h", "one")
    assert a.hibernate("h")
    moved = EventWaiter()
    a.subscribe("h", moved)
    clock.advance(40.0)  # a froze past its lease
    expire(a.store, "a")
    with pytest.raises(NodeFenced):
        a.send("h", "on a")  # a fenced node wakes nothing
    assert b.node is not None
    assert b.node.sweep() == []  # a sweeper takes no hibernated session...
    assert b.send("h", "two").content == "echo: two"  # ...a request does
    assert a.node is not None
    assert a.node.renew()  # a comes back: h was claimed meanwhile
    moved.wait_for("moved")
    assert a.node.leases() == {}
    assert a.list_sessions() == []
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        a.send("h", "late")
    assert [text for text, _ in pairs(b.history("h"))] == ["one", "two"]


def test_a_hibernated_session_nobody_claimed_wakes_on_its_node_after_a_fence(
    cluster: Cluster,
) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=30.0, clock=clock)
    b = cluster.node("b")
    a.start_session(template(), "h")
    a.send("h", "one")
    assert a.hibernate("h")
    clock.advance(40.0)
    expire(a.store, "a")
    assert b.node is not None
    assert b.node.sweep() == []
    assert a.node is not None
    assert a.node.renew()
    assert a.send("h", "two").content == "echo: two"
    assert a.node.leases() == {"h": 1}
    with pytest.raises(SessionOwnedElsewhere, match="node 'a'"):
        b.send("h", "three")


def test_after_an_outage_that_lapsed_every_lease_the_first_node_back_takes_no_others(
    cluster: Cluster,
) -> None:
    # The database was away for longer than the TTL: every node's lease lapsed at once.
    # The node that renews first must not sweep up the sessions of nodes that renew a
    # heartbeat later (they would all be stopped there and moved to it); a node that
    # stays away is taken over once the first has been back for a TTL.
    clock_a, clock_b = FakeClock(), FakeClock()
    a = cluster.node("a", ttl=30.0, clock=clock_a)
    b = cluster.node("b", ttl=30.0, clock=clock_b)
    for host, sid in ((a, "on-a"), (b, "on-b")):
        host.start_session(template(), sid)
        host.send(sid, "one")
    assert a.node is not None
    assert b.node is not None
    clock_a.advance(40.0)  # both fenced (their heartbeat threads wait 10 s: not yet run)...
    clock_b.advance(40.0)
    expire(a.store, "a")  # ...and both dead, by the database
    expire(b.store, "b")
    assert a.node.renew()  # a is back first
    assert a.node.sweep() == []
    assert b.node.renew()  # b a moment later: it keeps its session
    assert b.node.leases() == {"on-b": 1}
    assert b.send("on-b", "two").content == "echo: two"
    quiesce(b)
    expire(b.store, "b")  # now b dies for good
    clock_a.advance(15.0)
    assert a.node.renew()
    assert a.node.sweep() == []  # a has been back for less than a TTL
    clock_a.advance(15.0)
    assert a.node.renew()
    assert a.node.sweep() == ["on-b"]
    assert [text for text, _ in pairs(a.history("on-b"))] == ["one", "two"]
