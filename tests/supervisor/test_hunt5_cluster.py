"""Hunt 5: a cluster node when PostgreSQL drops its connections, keeps rows locked, or is
given a configuration it cannot work with.

Nodes are ``ClusterNode``s (or hosts) of this process on the test's own schema
(``cluster_helpers``); backends are ended with ``pg_terminate_backend``
(``tests.pg_server.terminate_connections``), never by stopping the server.
"""

from __future__ import annotations

import psycopg
import pytest

from supervisor import AgentHost
from supervisor.cluster import ClusterNode, NodeConfig
from tests.pg_server import terminate_connections
from tests.supervisor.cluster_helpers import Cluster, FakeClock, expire, quiesce, sql
from tests.supervisor.host_helpers import pairs, poll_until, template


def _backends(dsn: str) -> int:
    """The store connections (``application_name`` sessionvisor) open on the database."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = 'sessionvisor'",
            (dbname,),
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_a_heartbeat_whose_backend_was_terminated_renews_on_a_new_connection(
    cluster: Cluster, pg_dsn: str
) -> None:
    # An idle heartbeat connection ended by the server (idle_session_timeout, a pooler, an
    # operator) must not cost a heartbeat: with margin ttl / 2, one missed heartbeat
    # (two intervals, 2/3 of the TTL) would fence the node.
    clock = FakeClock()
    store = cluster.store()
    config = NodeConfig(node_id="a", ttl=9.0, margin=4.5, clock=clock, events=None)
    node = ClusterNode(store, config)
    try:
        node.claim("s")
        assert node.renew() is True
        assert terminate_connections(pg_dsn) >= 1
        clock.advance(3.0)  # the next heartbeat, one interval later
        assert node.renew() is True
        clock.advance(3.0)  # one more interval: fenced had the renewal above failed
        assert node.fenced is None
        assert node.leases() == {"s": 1}
    finally:
        node.drain()


def test_a_drain_kept_waiting_on_the_rows_is_best_effort_and_lets_its_connection_go(
    cluster: Cluster, pg_dsn: str
) -> None:
    # The host's shutdown ends with the drain: an error out of it left the heartbeat's
    # connection open and the leases held; the TTL frees the sessions instead.
    store = cluster.store(transaction_timeout=0.2)
    node = ClusterNode(store, NodeConfig(node_id="a", ttl=60.0, events=None))
    node.claim("s")
    assert node.renew() is True  # the heartbeat's own connection is open
    with psycopg.connect(store.conninfo) as locker:  # e.g. a DBA's ALTER TABLE
        locker.execute(f'LOCK TABLE "{store.schema}".sessions IN ACCESS EXCLUSIVE MODE')
        node.drain()  # StoreBusy inside: logged, not raised
        locker.rollback()
    assert node.leases() == {}
    assert node.renew() is False
    owners = sql(store, "SELECT owner_node FROM {s}.sessions WHERE session_id = 's'")
    assert owners == [("a",)]  # not released: claimable once a's TTL lapses
    store.close()
    assert poll_until(lambda: _backends(pg_dsn) == 0), "a connection of the node stayed open"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": 1e-9}, r"ttl must be between 0.1 and 86400 seconds, got 1e-09"),
        ({"ttl": 1e15}, r"ttl must be between 0.1 and 86400 seconds"),
        ({"sweep_interval": 1e12}, r"sweep_interval must be > 0 and at most 86400 seconds"),
        ({"sweep_batch": 2**40}, r"sweep_batch must be an int >= 1 and at most 2147483647"),
        ({"node_id": "a\nb"}, r"node_id must be 1 to 255 printable ASCII characters"),
        ({"node_id": "nœud"}, r"node_id must be 1 to 255 printable ASCII characters"),
        ({"node_id": "node one"}, r"without spaces"),
        ({"node_id": "n" * 256}, r"node_id must be 1 to 255 printable ASCII characters"),
    ],
)
def test_node_config_refuses_what_the_cluster_cannot_work_with(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        NodeConfig(**{"node_id": "a", **kwargs})  # type: ignore[arg-type]


def test_the_widest_node_config_still_registers_and_renews(cluster: Cluster) -> None:
    store = cluster.store()
    widest = "n" * 255
    config = NodeConfig(node_id=widest, ttl=86400.0, sweep_interval=86400.0, sweep_batch=2**31 - 1)
    node = ClusterNode(store, config)
    try:
        node.claim("s")
        assert node.renew() is True
        assert node.sweep() == []
        assert node.leases() == {"s": 1}
    finally:
        node.drain()


def test_a_claim_of_a_session_id_utf8_cannot_encode_is_a_clear_value_error(
    cluster: Cluster,
) -> None:
    node = ClusterNode(cluster.store(), NodeConfig(node_id="a", ttl=60.0, events=None))
    try:
        with pytest.raises(ValueError, match=r"session_id .* holds a lone surrogate"):
            node.claim("a\ud800b")
        assert node.leases() == {}
        assert node.claim("ünï-cödé-会话") == 1
        assert node.owner("ünï-cödé-会话") is not None
    finally:
        node.drain()


def test_a_sweeper_without_a_template_for_an_orphan_leaves_it_to_a_node_that_has_one(
    cluster: Cluster,
) -> None:
    # A node whose template function returns None for a session (a gateway that does
    # not serve that session's template) must not keep it: it would run nowhere, and
    # every other node would be told that this one owns it.
    a = cluster.node("a")
    for sid in ("s1", "s2"):
        a.start_session(template(), sid)
        a.send(sid, f"{sid} one")
    quiesce(a)
    expire(a.store, "a")
    b = AgentHost(
        store=cluster.store(),
        node=NodeConfig(node_id="b", ttl=60.0, template=lambda sid: None, sweep_batch=1),
    )
    cluster.hosts.append(b)
    assert b.node is not None
    assert b.node.sweep() == []  # one batch at a time, and it ends
    assert b.node.leases() == {}
    owners = b.node.owners(["s1", "s2"])
    assert [(owners[sid].node_id, owners[sid].state) for sid in ("s1", "s2")] == [
        (None, "active"),  # the oldest claimed, then released: to resume on another node
        ("a", "active"),  # left to the next sweep (this batch could claim s1 again)
    ]
    c = cluster.node("c")
    assert c.node is not None
    assert sorted(c.node.sweep()) == ["s1", "s2"]
    assert [text for text, _ in pairs(c.history("s1"))] == ["s1 one"]
    assert c.send("s2", "s2 two").content == "echo: s2 two"
