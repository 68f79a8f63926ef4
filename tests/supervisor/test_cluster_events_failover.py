"""A subscriber through a third node, across the failover of a SIGKILLed owner.

Nodes ``a`` and ``b`` are ``cluster_node_worker`` processes on 127.0.0.1 (TTL
2 s); the third node, which follows the session, is a host of this process
that takes nothing over. The session converses on ``a`` without pause (a
20 ms model), ``a`` is killed mid-turn, ``b``'s sweeper claims the session
after the TTL and a turn is answered there. ``a`` is killed right after it sent a
turn's first event, so the follower heard of events its last checkpoint does
not cover: ``b`` must number above them (the event mark).
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Iterator

import pytest

from actors import Event
from supervisor import AgentHost, PostgresCheckpointStore
from supervisor.cluster import NodeConfig
from tests.supervisor.cluster_helpers import NodeProcess, redis_url_or_skip
from tests.supervisor.host_helpers import WAIT, poll_until
from tests.supervisor.test_cluster_events import Collected

TTL = 2.0


@pytest.fixture(params=["postgres", "redis"])
def transport(request: pytest.FixtureRequest) -> str:
    return "postgres" if request.param == "postgres" else redis_url_or_skip()


@pytest.fixture
def nodes(pg_dsn: str, pg_schema: str, transport: str) -> Iterator[dict[str, NodeProcess]]:
    started: dict[str, NodeProcess] = {}
    try:
        for node_id in ("a", "b"):
            started[node_id] = NodeProcess(pg_dsn, pg_schema, node_id, TTL, transport)
        yield started
    finally:
        for process in started.values():
            process.close()


@pytest.fixture
def watcher(pg_dsn: str, pg_schema: str, transport: str) -> Iterator[AgentHost]:
    store = PostgresCheckpointStore(pg_dsn, schema=pg_schema)
    try:
        with AgentHost(store=store, node=NodeConfig(node_id="c", ttl=TTL, events=transport)) as c:
            yield c
    finally:
        store.close()


def _kill_at_turn_start(node: NodeProcess, event: Event) -> None:
    if event.type == "turn_started" and node.process.poll() is None:
        node.signal(signal.SIGKILL)


def test_a_subscriber_on_a_third_node_follows_a_session_across_failover(
    nodes: dict[str, NodeProcess], watcher: AgentHost
) -> None:
    a, b = nodes["a"], nodes["b"]
    a.request("start", sids=["s"])
    with watcher.follow("s") as follower:
        seen = Collected(follower)
        a.request("converse", sids=["s"])
        assert a.wait_for(lambda line: line.get("ack") == "s", count=5)
        # Killed as soon as a turn's first event was sent: mid-turn, with events
        # made known after the session's last checkpoint.
        follower.subscribe(lambda event: _kill_at_turn_start(a, event))
        a.process.wait(WAIT)
        heard_from_a = follower.last_seq
        assert heard_from_a > 0

        answers: list[list[str]] = []

        def answered_on_b() -> bool:  # "a" (its owner) until b's sweeper claims it
            answers.append(b.request("answer", sids=["s"], text="on b"))
            return answers[-1] == ["ok"]

        assert poll_until(answered_on_b, TTL + WAIT), answers[-1]
        assert set(answers[0]) <= {"a", "ok"}
        held = [(seq, kind) for seq, kind in b.request("events", sid="s")]
        assert held[0][0] > heard_from_a  # b numbers on above whatever a made known
        assert "turn_finished" in {kind for _, kind in held}
        assert seen.wait_for(held[-1][0])

    received = [(e.seq, e.type) for e in seen.events]
    seqs = [seq for seq, _ in received]
    assert seqs == sorted(set(seqs))  # in order, no number twice
    assert [r for r in received if r[0] >= held[0][0]] == held  # all of b's, as b holds them
    from_a = [r for r in received if r[0] < held[0][0]]
    assert from_a[-1][0] >= heard_from_a
    jumps = sum(later - earlier - 1 for earlier, later in itertools.pairwise(seqs))
    assert follower.missed == sum(seen.gaps) == jumps  # every gap reported as missed
