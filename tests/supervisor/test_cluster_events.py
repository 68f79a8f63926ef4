"""A cluster's event fan-out: followers on other nodes, numbering across owners, large events.

Nodes are hosts of this process, each on a store of its own (``cluster_helpers``),
sending over PostgreSQL LISTEN/NOTIFY or Redis Pub/Sub; every wait is bounded.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from actors import Event
from supervisor import AgentHost, MemoryCheckpointStore, PostgresCheckpointStore
from supervisor.cluster import ELIDED, EventFollower, NodeConfig
from supervisor.cluster._transports import NOTIFY_LIMIT
from tests.supervisor.cluster_helpers import Cluster, expire, redis_url_or_skip, sql
from tests.supervisor.host_helpers import WAIT, FlakyModel, ModelDown, poll_until, template


@pytest.fixture
def cluster(pg_dsn: str, pg_schema: str) -> Iterator[Cluster]:
    nodes = Cluster(pg_dsn, pg_schema)
    try:
        yield nodes
    finally:
        nodes.close()


@pytest.fixture(params=["postgres", "redis"])
def transport(request: pytest.FixtureRequest) -> str:
    return "postgres" if request.param == "postgres" else redis_url_or_skip()


class Collected:
    """What a follower's subscriber was handed, with a condition to wait on."""

    def __init__(self, follower: EventFollower) -> None:
        self.events: list[Event] = []
        self.gaps: list[int] = []
        self._cond = threading.Condition()
        self.unsubscribe = follower.subscribe(self._event, self._gap)

    def _event(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def _gap(self, count: int) -> None:
        with self._cond:
            self.gaps.append(count)

    def wait_for(self, seq: int) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: bool(self.events) and self.events[-1].seq >= seq, WAIT
            )


def test_a_follower_on_another_node_gets_the_owners_events(
    cluster: Cluster, transport: str
) -> None:
    owner = cluster.node("a", events=transport)
    other = cluster.node("b", events=transport)
    sid = owner.start_session(template(), "s1")
    with other.follow(sid) as follower:
        seen = Collected(follower)
        owner.send(sid, "hello")
        owner.send(sid, "again")
        held = owner.events(sid).events
        assert seen.wait_for(held[-1].seq)
        first = seen.events[0].seq
        assert [(e.seq, e.type, e.data) for e in seen.events] == [
            (e.seq, e.type, e.data) for e in held if e.seq >= first
        ]
        assert follower.missed == 0
        assert seen.gaps == []
        batch = follower.since(first)
        assert [e.seq for e in batch.events] == [e.seq for e in held if e.seq > first]
        assert (batch.cursor, batch.missed) == (held[-1].seq, 0)


def test_a_follower_of_one_tenant_hears_nothing_of_anothers_session(cluster: Cluster) -> None:
    owner = cluster.node("a")
    other = cluster.node("b")
    sid = owner.start_session(template(), "s1", tenant_id="t1")
    with (
        other.follow(sid, tenant_id="t2") as stranger,
        other.follow(sid, tenant_id="t1") as member,
    ):
        seen = Collected(member)
        owner.send(sid, "hello")
        assert seen.wait_for(owner.events(sid).cursor)
        assert stranger.since(None).events == ()


def test_a_large_event_reaches_other_nodes_as_a_marker_over_postgres(cluster: Cluster) -> None:
    owner = cluster.node("a")
    other = cluster.node("b")
    sid = owner.start_session(template(), "s1")
    big = "x" * NOTIFY_LIMIT
    with other.follow(sid) as follower:
        seen = Collected(follower)
        owner.send(sid, big)
        owner.send(sid, "small")
        held = {e.seq: e for e in owner.events(sid).events}
        assert seen.wait_for(max(held))
        relayed = {e.seq: e for e in seen.events}
        assert relayed.keys() == {s for s in held if s >= min(relayed)}
        started = next(e for e in seen.events if e.type == "turn_started")
        assert held[started.seq].data["text"] == big  # the owner keeps it whole
        assert list(started.data) == [ELIDED]
        assert started.data[ELIDED] >= NOTIFY_LIMIT
        small = [e for e in seen.events if ELIDED not in e.data]
        assert small  # the small turn's events travel whole
        assert all(e.data == held[e.seq].data for e in small)
        assert follower.missed == 0


def test_a_large_event_reaches_other_nodes_whole_over_redis(cluster: Cluster) -> None:
    url = redis_url_or_skip()
    owner = cluster.node("a", events=url)
    other = cluster.node("b", events=url)
    sid = owner.start_session(template(), "s1")
    big = "y" * (4 * NOTIFY_LIMIT)
    with other.follow(sid) as follower:
        seen = Collected(follower)
        owner.send(sid, big)
        assert seen.wait_for(owner.events(sid).cursor)
        started = next(e for e in seen.events if e.type == "turn_started")
        assert started.data["text"] == big


def test_an_event_too_large_even_as_a_marker_does_not_sink_other_sessions_events(
    cluster: Cluster,
) -> None:
    owner = cluster.node("a")
    other = cluster.node("b")
    huge = "L" * (NOTIFY_LIMIT + 1000)  # a session id no NOTIFY payload can carry
    owner.start_session(template(), huge)
    sid = owner.start_session(template(), "s1")
    assert owner.node is not None
    fan_out = owner.node.events
    assert fan_out is not None
    with other.follow(sid) as follower:
        seen = Collected(follower)
        # Queued together, so one batch (one transaction) carries both.
        fan_out.publish(huge, "default", Event(1000, "custom", {}, 0.0))
        fan_out.publish(sid, "default", Event(1000, "custom", {"k": 1}, 0.0))
        assert fan_out.flush(WAIT)
        assert seen.wait_for(1000)  # s1's event arrives; only the one that cannot is dropped
        assert [(e.seq, e.data) for e in seen.events] == [(1000, {"k": 1})]
        assert fan_out.dropped == 1


def test_nodes_reaching_one_database_by_different_names_hear_each_other(
    cluster: Cluster, transport: str
) -> None:
    # One node reaches the database as 127.0.0.1, the other as localhost (as a node on
    # the database's machine, or behind a pooler, would): one cluster, one channel.
    owner = cluster.node("a", events=transport)
    parts = psycopg.conninfo.conninfo_to_dict(cluster.dsn)
    assert parts.get("host") == "127.0.0.1"
    elsewhere = psycopg.conninfo.make_conninfo(
        **{**{k: str(v) for k, v in parts.items()}, "host": "localhost"}
    )
    store = PostgresCheckpointStore(elsewhere, schema=cluster.schema)
    cluster.stores.append(store)
    assert isinstance(owner.store, PostgresCheckpointStore)
    assert store.where != owner.store.where
    other = AgentHost(
        store=store, node=NodeConfig(node_id="b", address="http://b", events=transport)
    )
    cluster.hosts.append(other)
    sid = owner.start_session(template(), "s1")
    with other.follow(sid) as follower:
        seen = Collected(follower)
        owner.send(sid, "hello")
        assert seen.wait_for(owner.events(sid).cursor)


def test_a_new_owner_numbers_above_every_event_other_nodes_saw(cluster: Cluster) -> None:
    owner = cluster.node("a", chosen=template(model=FlakyModel()))
    heir = cluster.node("b", chosen=template(model=FlakyModel()))
    sid = owner.start_session(template(model=FlakyModel()), "s1")
    owner.send(sid, "saved")  # checkpointed, with its event mark
    with heir.follow(sid) as follower:
        seen = Collected(follower)
        with pytest.raises(ModelDown):
            owner.send(sid, "!fail: events, but no checkpoint")  # rolled back: none saved
        last = owner.events(sid).cursor
        assert owner.store.load(sid).metadata["event_seq"] < last
        assert seen.wait_for(last)
        expire(owner.store, "a")  # the owner is dead, as far as the cluster can tell
        heir.send(sid, "after the failover")
        assert heir.node is not None
        assert heir.node.epoch(sid) == 2
        fresh = [e for e in heir.events(sid).events if e.seq > last]
        assert fresh
        assert fresh[0].type == "turn_started"
        assert fresh[0].data["text"] == "after the failover"
        assert seen.wait_for(fresh[-1].seq)
        seqs = [e.seq for e in seen.events]
        assert seqs == sorted(set(seqs))
        assert [e.seq for e in seen.events if e.seq > last] == [e.seq for e in fresh]
        assert follower.missed == 0


def test_a_node_that_lost_a_session_sends_none_of_its_events(cluster: Cluster) -> None:
    owner = cluster.node("a")
    heir = cluster.node("b")
    sid = owner.start_session(template(), "s1")
    owner.send(sid, "one")
    assert owner.node is not None
    assert owner.node.events is not None
    assert owner.node.events.flush(WAIT)  # turn one's events go out while "a" owns it
    expire(owner.store, "a")
    heir.send(sid, "two")  # claims it (epoch 2)
    assert owner.node.events.flush(WAIT)  # whatever "a" sent or dropped meanwhile is counted
    before = owner.node.events.dropped
    record: Any = owner._table.get(sid)  # the stale incarnation's buffer, still on "a"
    record.events.publish("stale", note="from the old owner")
    assert owner.node.events.flush(WAIT)
    assert owner.node.events.dropped == before + 1


def test_a_follower_hears_again_after_its_node_lost_the_database(cluster: Cluster) -> None:
    owner = cluster.node("a")
    other = cluster.node("b")
    sid = owner.start_session(template(), "s1")
    with other.follow(sid) as follower:
        seen = Collected(follower)
        owner.send(sid, "before")
        assert seen.wait_for(owner.events(sid).cursor)
        heard = follower.last_seq
        assert isinstance(owner.store, PostgresCheckpointStore)
        ended = sql(
            owner.store,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE %s",
            ("LISTEN %",),
        )
        assert ended == [(1,)]  # b's listener, the one node that listens

        def heard_again() -> bool:  # what is sent before b listens again is lost
            owner.send(sid, "while b listens again")
            return follower.last_seq > heard and seen.wait_for(owner.events(sid).cursor)

        assert poll_until(heard_again, WAIT)
    seqs = [e.seq for e in seen.events]
    assert seqs == sorted(set(seqs))
    assert seqs[-1] == owner.events(sid).cursor
    jumps = sum(b - a - 1 for a, b in itertools.pairwise(seqs))
    assert follower.missed == sum(seen.gaps) == jumps


def test_follow_needs_a_cluster_node_with_fan_out(cluster: Cluster) -> None:
    with AgentHost(store=MemoryCheckpointStore()) as alone:
        with pytest.raises(RuntimeError, match="follow\\(\\) needs a cluster node"):
            alone.follow("s1")
    quiet = cluster.node("a", events=None)
    with pytest.raises(RuntimeError, match="follow\\(\\) needs a cluster node"):
        quiet.follow("s1")


@pytest.mark.parametrize("events", ["kafka://x", "", 3])
def test_an_unknown_transport_is_refused(events: Any) -> None:
    with pytest.raises(ValueError, match="events must be 'postgres', a redis:// URL or None"):
        NodeConfig(node_id="a", events=events)


def _event(seq: int) -> Event:
    return Event(seq, "x", {}, 0.0)


def test_a_follower_reports_gaps_as_missed_and_drops_repeats() -> None:
    closed: list[EventFollower] = []
    follower = EventFollower("s1", None, 3, closed.append)
    seen = Collected(follower)
    for seq in (4, 5, 8, 8, 7, 9):
        follower._deliver(_event(seq))
    assert [e.seq for e in seen.events] == [4, 5, 8, 9]
    assert seen.gaps == [2]
    assert follower.missed == 2
    batch = follower.since(3)  # 4 fell out of its buffer of 3; 6 and 7 never came
    assert ([e.seq for e in batch.events], batch.cursor, batch.missed) == ([5, 8, 9], 9, 3)
    batch = follower.since(5)
    assert ([e.seq for e in batch.events], batch.cursor, batch.missed) == ([8, 9], 9, 2)
    assert follower.since(9).events == ()
    assert follower.since(None).missed == 0
    follower.close()
    follower.close()
    assert closed == [follower]


def test_a_follower_given_a_cursor_counts_what_it_skipped_after_it() -> None:
    follower = EventFollower("s1", 10, 100, lambda _: None)
    for seq in (9, 10, 12):
        follower._deliver(_event(seq))
    assert [e.seq for e in follower.since(10).events] == [12]
    assert follower.missed == 1
