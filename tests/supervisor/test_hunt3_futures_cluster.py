"""``host.futures.send`` on a cluster node keeps the blocking ``send``'s ownership rules
(the gateway's messages route sends this way): a fenced node takes no turn
(``NodeFenced``), and a turn whose checkpoint finds the session owned by another node
fails with ``OwnershipLost`` *and* stops the session here, so the next call is told
who owns it (``SessionOwnedElsewhere``) instead of running another turn on a stale
copy whose checkpoints are all refused."""

from __future__ import annotations

import pytest

from supervisor import NodeFenced, OwnershipLost, SessionOwnedElsewhere
from tests.supervisor.cluster_helpers import Cluster, FakeClock, expire
from tests.supervisor.host_helpers import WAIT, EventWaiter, pairs, template


def test_a_fenced_node_takes_no_non_blocking_turn(cluster: Cluster) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=8.0, clock=clock)
    a.start_session(template(), "s")
    clock.advance(8.0 - 2.0 + 0.01)  # past ttl - margin without renewal: fenced
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        a.futures.send("s", "now?").result(WAIT)
    assert a.node is not None
    assert a.node.renew()
    assert a.futures.send("s", "now").result(WAIT).content == "echo: now"
    assert [text for text, _ in pairs(a.history("s"))] == ["now"]


def test_a_non_blocking_turn_refused_its_checkpoint_stops_the_stale_copy(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    moved = EventWaiter()
    a.subscribe("s", moved)
    expire(a.store, "a")  # a stopped heartbeating (its own clock has not noticed yet)
    assert b.send("s", "two").content == "echo: two"  # b took it over on request
    with pytest.raises(OwnershipLost, match="no longer owned by node 'a'"):
        a.futures.send("s", "stale").result(WAIT)
    moved.wait_for("moved")
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        a.futures.send("s", "again").result(WAIT)
    assert [text for text, _ in pairs(b.history("s"))] == ["one", "two"]


def test_a_non_blocking_checkpoint_refused_stops_the_stale_copy(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    moved = EventWaiter()
    a.subscribe("s", moved)
    expire(a.store, "a")
    assert b.send("s", "two").content == "echo: two"
    with pytest.raises(OwnershipLost, match="no longer owned by node 'a'"):
        a.futures.checkpoint("s", "stale").result(WAIT)
    moved.wait_for("moved")
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        a.futures.history("s").result(WAIT)
