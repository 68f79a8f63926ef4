"""Hosts as nodes of one cluster on PostgreSQL, in this process: claims, fences, takeover.

Each node has a store of its own; a node "dies" by having its heartbeat made
stale in the database (``expire``), and fences itself on a ``FakeClock``, so
every test decides exactly when ownership may move. The multi-process failure
tests (SIGKILL, SIGSTOP) are in ``test_cluster_failover.py``.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest

from actors import Snapshot, StepKey
from actors._ids import CheckpointIdGenerator
from supervisor import (
    AgentHost,
    Fence,
    MemoryCheckpointStore,
    NodeFenced,
    NodeIdInUse,
    OwnershipLost,
    SessionNotFound,
    SessionOwnedElsewhere,
)
from supervisor.cluster import ClusterNode, NodeConfig
from supervisor.cluster._leases import LeaseTable
from tests.actors.snapshot_helpers import session_state
from tests.pg_private import PrivateServer, ShutdownMode
from tests.supervisor.cluster_helpers import Cluster, FakeClock, expire, quiesce, sql, whereami
from tests.supervisor.host_helpers import EventWaiter, host_options, pairs, poll_until, template

FIVE_MINUTES_NS = 300 * 10**9


def test_a_session_runs_on_one_node_and_others_name_it(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    assert a.send("s", "hello").content == "echo: hello"
    for call in (
        lambda: b.send("s", "hi"),
        lambda: b.history("s"),
        lambda: b.resume("s", template()),
    ):
        with pytest.raises(
            SessionOwnedElsewhere, match="owned by live node 'a' at 'http://a'"
        ) as info:
            call()
        assert (info.value.node, info.value.address) == ("a", "http://a")
    a.start_session(template(), "new-on-a")
    with pytest.raises(SessionOwnedElsewhere):  # no checkpoint yet, but claimed by a
        b.start_session(template(), "new-on-a")
    assert b.resume_all(template()) == []
    assert a.node is not None
    assert a.node.leases() == {"s": 1, "new-on-a": 1}


def test_a_second_process_under_a_live_node_id_is_refused(cluster: Cluster) -> None:
    first = cluster.node("a")
    with pytest.raises(NodeIdInUse, match="node id 'a' is in use by a live process at 'http://a'"):
        cluster.node("a")
    assert first.node is not None
    incarnation = first.node.incarnation
    first.shutdown()  # drained: the id is free at once
    again = cluster.node("a")
    assert again.node is not None
    assert again.node.incarnation == incarnation + 1


def test_exactly_one_node_wins_each_race_to_resume(cluster: Cluster) -> None:
    seeder = cluster.store()
    a, b = cluster.node("a"), cluster.node("b")
    rounds = 200  # as issue 17 asks
    for index in range(rounds):
        seeder.save(Snapshot.new(session_id=f"r{index}", state=session_state(1)))
    barrier = threading.Barrier(2)
    outcome: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def race(host: AgentHost, name: str) -> None:
        for index in range(rounds):
            barrier.wait(10)
            try:
                host.resume(f"r{index}", template())
                outcome[name].append(f"r{index}")
            except SessionOwnedElsewhere as exc:
                if exc.node == name:
                    errors.append(AssertionError(f"{name} lost to itself"))
            except BaseException as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=race, args=(h, n)) for h, n in ((a, "a"), (b, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    won_a, won_b = set(outcome["a"]), set(outcome["b"])
    assert won_a.isdisjoint(won_b)
    assert won_a | won_b == {f"r{index}" for index in range(rounds)}
    owners = dict(sql(seeder, "SELECT session_id, owner_node FROM {s}.sessions"))
    assert all(owners[sid] == "a" for sid in won_a)
    assert all(owners[sid] == "b" for sid in won_b)


def test_a_dead_nodes_session_moves_and_its_late_save_is_refused(
    cluster: Cluster, mode: str
) -> None:
    a, b = cluster.node("a", **host_options(mode)), cluster.node("b", **host_options(mode))
    a.start_session(template(), "s")
    a.send("s", "one")
    moved = EventWaiter()
    a.subscribe("s", moved)
    expire(a.store, "a")  # a stopped heartbeating (its own clock has not noticed yet)
    assert b.send("s", "two").content == "echo: two"  # b took it over on request
    with pytest.raises(OwnershipLost, match="no longer owned by node 'a' \\(epoch 1\\)"):
        a.send("s", "stale")  # the turn ran on a, but its checkpoint was refused
    moved.wait_for("moved")
    with pytest.raises(SessionOwnedElsewhere, match="node 'b'"):
        a.send("s", "again")  # a forgot it: b owns it
    assert [text for text, _ in pairs(b.history("s"))] == ["one", "two"]
    assert b.store.load("s").state["turns"] == 2
    assert b.node is not None
    assert b.node.leases() == {"s": 2}


def test_owners_reads_many_sessions_owners_at_once(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "on-a")
    b.start_session(template(), "on-b")
    assert a.node is not None
    expire(a.store, "b")
    owners = a.node.owners(["on-a", "on-b", "never"])
    assert sorted(owners) == ["on-a", "on-b"]  # never claimed: absent
    assert (owners["on-a"].node_id, owners["on-a"].live, owners["on-a"].address) == (
        "a",
        True,
        "http://a",
    )
    assert (owners["on-b"].node_id, owners["on-b"].live, owners["on-b"].state) == (
        "b",
        False,
        "active",
    )
    assert a.node.owners([]) == {}


def test_a_fenced_node_takes_no_turns_until_it_renews(cluster: Cluster) -> None:
    clock = FakeClock()
    a = cluster.node("a", ttl=8.0, clock=clock)
    a.start_session(template(), "s")
    assert a.node is not None
    clock.advance(8.0 - 2.0 + 0.01)  # past ttl - margin (margin = ttl / 4) without renewal
    with pytest.raises(NodeFenced, match="node 'a' is fenced"):
        a.send("s", "now?")
    with pytest.raises(NodeFenced):
        a.start_session(template(), "other")
    assert a.node.renew()  # nobody claimed s meanwhile: it stays
    assert a.send("s", "now").content == "echo: now"
    assert a.node.leases() == {"s": 1}


def test_a_renewal_after_a_fence_stops_the_sessions_claimed_meanwhile(cluster: Cluster) -> None:
    clock = FakeClock()
    a, b = cluster.node("a", ttl=8.0, clock=clock), cluster.node("b")
    for sid in ("kept", "taken"):
        a.start_session(template(), sid)
        a.send(sid, "one")
    moved = EventWaiter()
    a.subscribe("taken", moved)
    clock.advance(10.0)  # a is fenced (its heartbeat thread has not run: ttl / 3 is long)
    expire(a.store, "a")
    assert b.send("taken", "two").content == "echo: two"
    assert a.node is not None
    assert a.node.renew()
    moved.wait_for("moved")
    assert a.node.leases() == {"kept": 1}
    assert [r.session_id for r in a.list_sessions()] == ["kept"]
    assert a.send("kept", "two").content == "echo: two"


def test_a_stale_owner_with_a_fast_clock_cannot_write_the_newest_checkpoint(
    pg_dsn: str, pg_schema: str, cluster: Cluster
) -> None:
    store_a, store_b = cluster.store(), cluster.store()
    node_a = ClusterNode(store_a, NodeConfig(node_id="a", ttl=60.0))
    node_b = ClusterNode(store_b, NodeConfig(node_id="b", ttl=60.0))
    ahead = CheckpointIdGenerator(clock_ns=lambda: __import__("time").time_ns() + FIVE_MINUTES_NS)

    def from_a(turns: int) -> Snapshot:
        made = Snapshot.new(session_id="s", state=session_state(turns, session_id="s"))
        return Snapshot(**{**made.__dict__, "checkpoint_id": ahead.new()[0]})

    node_a.claim("s")
    node_a.save(from_a(1))
    expire(store_a, "a")
    assert node_b.claim("s") == 2
    snapshot_b = Snapshot.new(session_id="s", state=session_state(2, session_id="s"))
    node_b.save(snapshot_b)
    late = from_a(3)
    with pytest.raises(OwnershipLost, match="another owner or a newer epoch"):
        node_a.save(late)
    with pytest.raises(OwnershipLost):  # straight to the store with its old fence, too
        store_a.save(late, fence=Fence("a", node_a.incarnation, 1))
    assert late.checkpoint_id > snapshot_b.checkpoint_id  # a's ids are "newer"...
    assert store_a.load("s") == snapshot_b  # ...but b's epoch is
    assert "s" not in node_a.leases()
    node_a.drain()
    node_b.drain()


def test_drain_hands_sessions_over_without_waiting_for_the_ttl(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    for sid in ("s1", "s2"):
        a.start_session(template(), sid)
        a.send(sid, f"{sid} before")
    a.hibernate("s2")
    a.shutdown()  # final checkpoints, then every session released
    assert b.node is not None
    assert b.node.sweep() == ["s1"]  # the active one at once; the hibernated one on request
    assert [r.session_id for r in b.list_sessions()] == ["s1"]
    assert b.send("s2", "after").content == "echo: after"
    assert [text for text, _ in pairs(b.history("s2"))] == ["s2 before", "after"]
    assert b.node.leases() == {"s1": 2, "s2": 2}


def test_the_sweeper_takes_over_a_dead_nodes_active_sessions_in_batches(
    cluster: Cluster,
) -> None:
    a = cluster.node("a")
    sids = [f"s{index}" for index in range(5)]
    for sid in sids:
        a.start_session(template(), sid)
        a.send(sid, f"{sid} one")
    a.hibernate("s4")
    quiesce(a)
    expire(a.store, "a")
    b = AgentHost(
        store=cluster.store(),
        node=NodeConfig(node_id="b", ttl=60.0, template=template(), sweep_batch=2),
    )
    cluster.hosts.append(b)
    assert b.node is not None
    assert sorted(b.node.sweep()) == sids[:4]
    assert b.node.sweep() == []
    for sid in sids[:4]:
        assert [text for text, _ in pairs(b.history(sid))] == [f"{sid} one"]
    assert sorted(b.node.leases()) == sids[:4]


def test_a_session_that_died_before_its_first_checkpoint_is_not_taken_over(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "never-saved")
    expire(a.store, "a")
    assert b.node is not None
    assert b.node.sweep() == []
    assert b.node.leases() == {}
    owners = sql(cluster.stores[0], "SELECT owner_node, state FROM {s}.sessions")
    assert owners == [(None, "stopped")]  # released, and no sweeper takes it again
    with pytest.raises(SessionNotFound):
        b.send("never-saved", "hello")


def test_a_stopped_session_is_not_taken_over_but_can_be_resumed(cluster: Cluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    a.stop_session("s")
    assert b.node is not None
    assert b.node.sweep() == []
    with pytest.raises(SessionNotFound):
        b.send("s", "two")
    b.resume("s", template())
    assert b.send("s", "two").content == "echo: two"


def test_tools_read_the_step_key(cluster: Cluster, mode: str) -> None:
    chosen = template(tools=(whereami,))
    a = cluster.node("a", chosen=chosen, **host_options(mode))
    a.start_session(chosen, "s")
    answers = [a.send("s", "/whereami {}").content for _ in range(2)]
    expire(a.store, "a")
    b = cluster.node("b", chosen=chosen, **host_options(mode))
    answers.append(b.send("s", "/whereami {}").content)
    alone = AgentHost(store=MemoryCheckpointStore(), **host_options(mode))
    try:
        alone.start_session(chosen, "t")
        answers.append(alone.send("t", "/whereami {}").content)
    finally:
        alone.shutdown()
    assert answers == [
        f"whereami returned: {StepKey('s', 1, 1, 1)}",
        "whereami returned: s:1:2:1",
        "whereami returned: s:2:3:1",
        "whereami returned: t:0:1:1",
    ]


def test_node_needs_a_postgres_store() -> None:
    with pytest.raises(TypeError, match=r"node= needs store=PostgresCheckpointStore"):
        AgentHost(store=MemoryCheckpointStore(), node=NodeConfig(node_id="a"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"node_id": ""}, "node_id must be a non-empty str"),
        ({"node_id": "a", "ttl": 0}, "ttl must be a positive number"),
        ({"node_id": "a", "ttl": 2.0, "margin": 2.0}, r"margin must be > 0 and < ttl \(2.0\)"),
        # ttl - margin within one heartbeat interval: fenced between every two heartbeats
        ({"node_id": "a", "ttl": 3.0, "margin": 2.5}, r"margin must be < 2/3 of ttl \(2 s for"),
        ({"node_id": "a", "ttl": 3.0, "margin": 2.0}, r"renews every ttl / 3 \(1 s\)"),
        ({"node_id": "a\x00b"}, r"node_id must not hold a NUL character"),
        ({"node_id": "a", "address": "http://x\x00"}, r"address must not hold a NUL character"),
        ({"node_id": "a", "sweep_batch": 0}, "sweep_batch must be an int >= 1"),
        ({"node_id": "a", "sweep_interval": -1}, "sweep_interval must be > 0"),
    ],
)
def test_node_config_names_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NodeConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_node_keeps_its_sessions_across_a_server_restart_shorter_than_its_ttl(
    private_pg: PrivateServer, mode: ShutdownMode
) -> None:
    """Issue 17: the database restarts while a node's fenced save is in flight (blocked
    in the server on a table lock), and its heartbeat fails while the server is down.
    Back within the TTL, the node is not fenced, keeps its sessions at the same epochs,
    and its saves go on."""
    clock = FakeClock()
    cluster = Cluster(private_pg.dsn, "restart")
    try:
        a = cluster.node("a", ttl=8.0, clock=clock)
        assert a.node is not None
        for sid in ("s1", "s2"):
            a.start_session(template(), sid)
            a.send(sid, "one")
        answers: list[str] = []
        errors: list[BaseException] = []

        def send() -> None:
            try:
                answers.append(a.send("s1", "two").content or "")
            except BaseException as exc:  # reported below
                errors.append(exc)

        gate = psycopg.connect(private_pg.dsn)  # the restart ends its transaction
        sender = threading.Thread(target=send)
        try:
            gate.execute('LOCK TABLE "restart".checkpoints IN EXCLUSIVE MODE')
            sender.start()
            deadline = time.monotonic() + 10
            while not _waiting_on_a_lock(private_pg.dsn):  # a bounded poll of the server
                assert time.monotonic() < deadline, "the turn's save never blocked"
                time.sleep(0.005)
            private_pg.stop(mode)
            assert not a.node.renew()  # the heartbeat fails while the server is down
            clock.advance(3.0)  # less than ttl - margin (6 s) since the last renewal
            private_pg.start()
        finally:
            gate.close()
            sender.join(30)
        assert not sender.is_alive()
        assert errors == []
        assert answers == ["echo: two"]  # the save was retried on a new connection
        assert a.node.fenced is None
        assert a.node.renew()
        assert a.send("s2", "two").content == "echo: two"
        assert a.node.leases() == {"s1": 1, "s2": 1}  # kept, at the same epochs
        for sid in ("s1", "s2"):
            assert [text for text, _ in pairs(a.history(sid))] == ["one", "two"]
            assert a.store.load(sid).state["turns"] == 2
    finally:
        cluster.close()


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'sessionvisor' AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_node_that_stopped_adopting_leaves_released_sessions_to_the_others(
    cluster: Cluster,
) -> None:
    a, b, c = cluster.node("a"), cluster.node("b"), cluster.node("c")
    a.start_session(template(), "s1")
    a.send("s1", "before")
    assert b.node is not None
    assert c.node is not None
    b.node.stop_adopting()
    a.shutdown()  # released: claimable at once
    assert (b.node.adopting, c.node.adopting) == (False, True)
    assert b.node.sweep() == []
    assert b.node.leases() == {}
    assert c.node.sweep() == ["s1"]
    assert [text for text, _ in pairs(c.history("s1"))] == ["before"]


def test_shutdown_stops_adopting_before_its_final_checkpoints(cluster: Cluster) -> None:
    b = cluster.node("b")
    b.start_session(template(), "mine")
    node = b.node
    assert node is not None
    adopting_at_save: list[bool] = []
    b._checkpoints.observe(lambda info, seconds: adopting_at_save.append(node.adopting))
    b.shutdown()
    assert adopting_at_save == [False]  # the final checkpoint came after the stop


def test_next_lapse_is_the_first_other_live_nodes_lease(cluster: Cluster) -> None:
    a, b = cluster.node("a", ttl=60.0), cluster.node("b", ttl=60.0)
    assert a.node is not None
    assert b.node is not None
    table = LeaseTable(cluster.store())
    lapse = table.next_lapse("a")
    assert lapse is not None
    assert 55.0 < lapse <= 60.0  # b's, renewed just now
    sql(table.store, "UPDATE {s}.nodes SET heartbeat = heartbeat - interval '50 seconds'"
        " WHERE node_id = 'b'")  # fmt: skip
    lapse = table.next_lapse("a")
    assert lapse is not None
    assert 5.0 < lapse <= 10.0
    expire(table.store, "b")
    assert table.next_lapse("a") is None  # no other live node
    assert table.next_lapse("b") is not None  # a's


def test_the_sweeper_takes_a_dead_nodes_sessions_when_its_lease_lapses_not_a_sweep_later(
    cluster: Cluster,
) -> None:
    ttl = 40.0  # a sweep every 10 s
    a = cluster.node("a", ttl=ttl)
    a.start_session(template(), "s")
    a.send("s", "before")
    lapses_in = 0.5
    sql(cluster.store(), "UPDATE {s}.nodes SET heartbeat = clock_timestamp()"
        " - %s * interval '1 second' WHERE node_id = 'a'", (ttl - lapses_in,))  # fmt: skip
    started = time.monotonic()
    b = cluster.node("b", ttl=ttl)  # its sweeper starts now (a's heartbeat renews in ~13 s)
    node = b.node
    assert node is not None
    taken = poll_until(lambda: "s" in node.leases(), timeout=ttl / 4 - 1.0)
    assert taken, "not taken over before the next regular sweep"
    assert time.monotonic() - started >= lapses_in * 0.5  # not before the lapse (roughly)
    assert [text for text, _ in pairs(b.history("s"))] == ["before"]


def test_a_session_id_postgresql_cannot_store_is_refused_clearly_and_the_node_goes_on(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    with pytest.raises(ValueError, match=r"session_id 'n\\x00ul' holds a NUL character"):
        a.start_session(template(), "n\x00ul")
    long_id = os.urandom(1600).hex()  # 3,200 bytes that do not compress
    with pytest.raises(ValueError, match=r"\(3200 bytes\) is too long for the PostgreSQL"):
        a.start_session(template(), long_id)
    assert a.node is not None
    assert a.node.leases() == {}
    assert a.node.owner("n\x00ul") is None  # no claim could store it
    assert a.node.owners(["n\x00ul", "s"]) == {}
    a.start_session(template(), "s")
    assert a.send("s", "hello").content == "echo: hello"
    with pytest.raises(SessionOwnedElsewhere):
        b.send("s", "hi")


def test_a_renewal_that_cannot_read_its_leases_keeps_the_fence_and_does_not_raise(
    cluster: Cluster,
) -> None:
    # The heartbeat thread calls renew: an exception out of it would end the heartbeats,
    # and the node would stay fenced (and lose every session) for good.
    clock = FakeClock()
    store = cluster.store(transaction_timeout=0.2)
    node = ClusterNode(store, NodeConfig(node_id="a", ttl=8.0, clock=clock, events=None))
    try:
        node.claim("s")
        clock.advance(10.0)  # fenced: the next renewal reads its leases first
        assert node.fenced is not None
        with psycopg.connect(store.conninfo) as locker:  # e.g. a DBA's ALTER TABLE
            locker.execute(f'LOCK TABLE "{store.schema}".sessions IN ACCESS EXCLUSIVE MODE')
            assert node.renew() is False  # the read is cancelled (StoreBusy): not renewed
            assert node.fenced is not None
            locker.rollback()
        assert node.renew() is True
        assert node.fenced is None
        assert node.leases() == {"s": 1}
    finally:
        node.drain()


def test_release_and_hibernated_are_best_effort_when_the_row_stays_locked(
    cluster: Cluster,
) -> None:
    # The host calls them after it stopped or hibernated the session: an error out of
    # them would leave the session half stopped there (still running, or not forgotten).
    store = cluster.store(transaction_timeout=0.2)
    node = ClusterNode(store, NodeConfig(node_id="a", ttl=60.0, events=None))
    try:
        node.claim("kept")
        node.claim("gone")
        with psycopg.connect(store.conninfo) as locker:
            locker.execute(f'LOCK TABLE "{store.schema}".sessions IN ACCESS EXCLUSIVE MODE')
            node.hibernated("kept", True)  # StoreBusy inside: logged, not raised
            node.release("gone", stopped=True)
            locker.rollback()
        assert node.leases() == {"kept": 1}  # the released lease is gone all the same
        state = sql(store, "SELECT state FROM {s}.sessions WHERE session_id = 'kept'")
        assert state == [("active",)]  # not recorded; at worst a sweeper resumes it
        node.hibernated("kept", True)
        state = sql(store, "SELECT state FROM {s}.sessions WHERE session_id = 'kept'")
        assert state == [("hibernated",)]
    finally:
        node.drain()


def test_release_and_hibernated_are_best_effort_when_the_database_disk_is_full(
    cluster: Cluster,
) -> None:
    store = cluster.store()
    node = ClusterNode(store, NodeConfig(node_id="a", ttl=60.0, events=None))
    try:
        node.claim("kept")
        node.claim("gone")
        sql(  # the server's answer to a write it has no disk for
            store,
            "CREATE FUNCTION {s}.no_room() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = 'disk_full';"
            " END$$",
        )
        sql(
            store,
            "CREATE TRIGGER no_room BEFORE UPDATE ON {s}.sessions"
            " FOR EACH ROW EXECUTE FUNCTION {s}.no_room()",
        )
        node.hibernated("kept", True)  # StoreFull inside: logged, not raised
        node.release("gone", stopped=True)
        assert node.leases() == {"kept": 1}  # the released lease is gone all the same
        sql(store, "DROP TRIGGER no_room ON {s}.sessions")
        node.hibernated("kept", True)
        state = sql(store, "SELECT state FROM {s}.sessions WHERE session_id = 'kept'")
        assert state == [("hibernated",)]
    finally:
        node.drain()
