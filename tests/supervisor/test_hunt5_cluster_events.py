"""Hunt 5: a node's event fan-out when its Redis server is down.

No Redis server is needed: the node is pointed at a port nothing listens on
(only the ``redis`` library must be installed; without it the tests skip).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors import Event
from supervisor.cluster import ClusterNode, NodeConfig
from tests.supervisor.cluster_helpers import Cluster, redis_library_or_skip
from tests.supervisor.host_helpers import WAIT

NOBODY = "redis://127.0.0.1:1/0"
"""A Redis URL nothing answers at (port 1 refuses connections)."""


@pytest.fixture
def node(cluster: Cluster) -> Iterator[ClusterNode]:
    redis_library_or_skip()
    made = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=60.0, events=NOBODY))
    try:
        yield made
    finally:
        made.drain()


def test_events_redis_never_took_are_each_counted_once_as_dropped(node: ClusterNode) -> None:
    node.claim("mine")
    events = node.events
    assert events is not None
    events.publish("mine", "", Event(1, "turn_start", {}, 0.0))
    events.publish("not-mine", "", Event(1, "turn_start", {}, 0.0))  # no lease: never sent
    assert events.flush(WAIT)
    assert events.dropped == 2  # not 3: the one without a lease counted again


def test_following_with_redis_down_says_why(node: ClusterNode) -> None:
    events = node.events
    assert events is not None
    with pytest.raises(TimeoutError, match=r"could not listen .*listening on Redis failed: "):
        events.follow("s")
