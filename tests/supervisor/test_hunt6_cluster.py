"""Hunt 6: what a fenced node tells its callers, and the store's pool bound.

Nodes are ``ClusterNode``s of this process on the test's own schema
(``cluster_helpers``), on a ``FakeClock`` where the fence's timing matters.
"""

from __future__ import annotations

import pytest

from supervisor import NodeFenced, PostgresCheckpointStore
from supervisor.cluster import ClusterNode, NodeConfig
from tests.supervisor.cluster_helpers import Cluster, FakeClock, expire


def test_a_node_fenced_by_a_late_heartbeat_says_it_serves_again_once_renewed(
    cluster: Cluster,
) -> None:
    clock = FakeClock()
    node = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=9.0, clock=clock, events=None))
    try:
        clock.advance(8.0)  # past ttl - margin (6.75 s) without a renewal
        with pytest.raises(NodeFenced) as fenced:
            node.check_serving()
        assert "its lease was last renewed 8.00 s ago" in str(fenced.value)
        assert "or here once it has renewed its lease" in str(fenced.value)
        assert fenced.value.final is False
        assert node.renew() is True
        node.check_serving()  # as the message said
    finally:
        node.drain()


def test_a_node_whose_id_was_taken_over_says_it_never_serves_again(cluster: Cluster) -> None:
    # Its lease lapsed, another process registered under its id: no renewal of its will
    # ever succeed again, so "once it has renewed its lease" would send callers to wait.
    clock = FakeClock()
    store = cluster.store()
    old = ClusterNode(store, NodeConfig(node_id="a", ttl=9.0, clock=clock, events=None))
    expire(store, "a")
    new = ClusterNode(store, NodeConfig(node_id="a", ttl=9.0, events=None))
    try:
        assert new.incarnation == old.incarnation + 1
        assert old.renew() is False
        with pytest.raises(NodeFenced) as fenced:
            old.check_serving()
        message = str(fenced.value)
        assert fenced.value.final is True
        assert "renewed its lease" not in message
        assert "another process registered under its node id" in message
        assert "it will not serve again: retry on another node" in message
        assert "restart this process" in message
        assert old.renew() is False  # indeed: never again
        with pytest.raises(NodeFenced, match="it will not serve again"):
            old.claim("s")
    finally:
        new.drain()
        old.drain()


def test_a_drained_node_says_it_never_serves_again(cluster: Cluster) -> None:
    node = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=9.0, events=None))
    node.drain()
    with pytest.raises(NodeFenced) as fenced:
        node.check_serving()
    assert fenced.value.final is True
    assert "(it was drained)" in str(fenced.value)
    assert "renewed its lease" not in str(fenced.value)


@pytest.mark.parametrize("size", [1001, 10**6, 2**63])
def test_an_absurd_pool_size_is_refused_before_anything_connects(
    pg_dsn: str, pg_schema: str, size: int
) -> None:
    with pytest.raises(
        ValueError, match=r"pool_size must be an int >= 1 and at most 1000, got "
    ) as bad:
        PostgresCheckpointStore(pg_dsn, schema=pg_schema, pool_size=size)
    assert "max_connections" in str(bad.value)


def test_the_largest_pool_size_is_taken(pg_dsn: str, pg_schema: str) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, pool_size=1000) as store:
        assert store.sessions() == []  # opens one connection; more only on demand
