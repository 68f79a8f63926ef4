"""Failover as a client sees it (issue 17): from the SIGKILL of a node to every one of its
sessions answering a turn on another node.

Three node processes (``tests/supervisor/cluster_node_worker.py``) share one
PostgreSQL database, TTL 2 s: two stay up (``b``, ``c``); each round a fresh
owner node starts ``BENCH_FAILOVER_SESSIONS`` sessions (default 200), answers
one turn on each (their first checkpoints), and is SIGKILLed at a random
moment of its heartbeat period (a seeded uniform delay of up to TTL/3, so the
time until its lease lapses is sampled over the whole period rather than
locked to how long the setup took). From the kill,
a client sends one turn to each session, half through ``b`` and half through
``c`` at the same time (a load balancer's spread), and to the other node for
those a node says it owns (``SessionOwnedElsewhere``: the library's answer
where a gateway would forward), retrying every 20 ms those still owned by
the dead node, until every session has answered. ``BENCH_FAILOVER_KILLS`` rounds
(default 20); p50 and p99 of the time from kill to the last answer (goal:
<= TTL + 1 s). The sweepers of ``b`` and ``c`` take the sessions over after
the TTL; a request that reaches a session no live node owns takes it over
on the node it reached. Each round's sessions are stopped at its end.

Needs the PostgreSQL server of ``tests/pg_server.py``; without one it says how
to start it and skips. The run works in a database of its own, dropped at the end.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from benchmarks._common import percentile, print_table
from tests.pg_server import fresh_database, server_problem
from tests.supervisor.cluster_helpers import NodeProcess

TTL = 2.0
SCHEMA = "failover_answers"
_RETRY = 0.02  # seconds between two tries of the sessions still owned by the dead node
_GIVE_UP = TTL + 30.0


def _answer_all(nodes: dict[str, NodeProcess], sids: list[str], text: str) -> dict[str, str]:
    """Send one turn to each session until each answered; by session, the node that did.
    Sessions are spread over the live nodes as a load balancer would, and the nodes are
    asked at the same time; one that names the other as owner sends the client there."""
    names = sorted(nodes)
    answered: dict[str, str] = {}
    pending = {sid: names[index % len(names)] for index, sid in enumerate(sids)}
    deadline = time.monotonic() + _GIVE_UP

    def ask(node_id: str, asked: list[str]) -> tuple[str, list[str], list[str]]:
        return node_id, asked, nodes[node_id].request("answer", sids=asked, text=text)

    with ThreadPoolExecutor(len(nodes)) as pool:
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} sessions never answered: {sorted(pending)[:5]}")
            groups = {n: sorted(s for s, where in pending.items() if where == n) for n in names}
            retry: dict[str, str] = {}
            redirected = False
            for node_id, asked, replies in pool.map(ask, *zip(*groups.items(), strict=True)):
                for sid, reply in zip(asked, replies, strict=True):
                    if reply == "ok":
                        answered[sid] = node_id
                    elif reply in nodes and reply != node_id:
                        retry[sid] = reply  # owned by the other live node: ask it at once
                        redirected = True
                    else:  # still owned by the dead node (within its TTL), or being taken over
                        retry[sid] = node_id
            if retry and not redirected:
                threading.Event().wait(_RETRY)
            pending = retry
    return answered


def _dead_in(dsn: str, node_id: str) -> float:
    """Seconds from now until the database counts ``node_id`` dead (its heartbeat older
    than its TTL), on the database's clock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT extract(epoch FROM heartbeat + ttl - clock_timestamp())"
            f' FROM "{SCHEMA}".nodes WHERE node_id = %s',
            (node_id,),
        ).fetchone()
    assert row is not None
    return float(row[0])


def failover_answers(dsn: str) -> list[tuple[str, str]]:
    sessions = int(os.environ.get("BENCH_FAILOVER_SESSIONS", "200"))
    kills = int(os.environ.get("BENCH_FAILOVER_KILLS", "20"))
    nodes = {node_id: NodeProcess(dsn, SCHEMA, node_id, TTL) for node_id in ("b", "c")}
    times: list[float] = []
    moved = 0  # sessions claimed away from b or c meanwhile (a starved node fenced)
    detection: list[float] = []  # from the kill until the database counts the node dead
    spread: list[str] = []
    started = time.monotonic()
    phases = random.Random(17)
    try:
        for kill in range(1, kills + 1):
            owner = NodeProcess(dsn, SCHEMA, f"owner{kill}", TTL)
            try:
                sids = [f"k{kill}-{index}" for index in range(sessions)]
                owner.request("start", sids=sids)
                owner.request("send_all", sids=sids, text="before")  # a first checkpoint each
                time.sleep(phases.uniform(0, TTL / 3))  # a random point of the heartbeat period
                owner.signal(signal.SIGKILL)
                killed = time.monotonic()
                owner.process.wait(5)
                dead_in = _dead_in(dsn, f"owner{kill}") - (time.monotonic() - killed)
                answered = _answer_all(nodes, sids, f"after kill {kill}")
                times.append(time.monotonic() - killed)
                detection.append(dead_in)
            finally:
                owner.close()
            counts = dict.fromkeys(nodes, 0)
            for node_id in answered.values():
                counts[node_id] += 1
            spread.append("/".join(str(counts[n]) for n in sorted(counts)))
            for node_id, node in nodes.items():
                mine = [s for s, n in answered.items() if n == node_id]
                moved += len(mine) - len(node.request("stop", sids=mine))
    finally:
        for node in nodes.values():
            node.close()
    p50, p99 = statistics.median(times), percentile(times, 99)
    after = [t - d for t, d in zip(times, detection, strict=True)]
    return [
        (f"{sessions} sessions, {kills} SIGKILLs, TTL {TTL:.0f} s, 2 other nodes", ""),
        ("kill -> all answering on other nodes: p50 / p99", f"{p50:.2f} s / {p99:.2f} s"),
        ("goal p99 <= TTL + 1 s", "met" if p99 <= TTL + 1.0 else "missed"),
        ("each kill (s)", ", ".join(f"{t:.2f}" for t in times)),
        (
            "of which until counted dead (last heartbeat + TTL): p50 / max",
            f"{statistics.median(detection):.2f} s / {max(detection):.2f} s",
        ),
        (
            "counted dead -> all answering: p50 / p99",
            f"{statistics.median(after):.2f} s / {percentile(after, 99):.2f} s",
        ),
        ("answered on b/c, per kill", ", ".join(spread)),
        ("sessions that moved again (b or c starved past its TTL)", str(moved)),
        ("whole run", f"{time.monotonic() - started:.0f} s"),
    ]


def main() -> None:
    problem = server_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return
    with fresh_database("sv_bench") as dsn:
        print_table("failover, kill to answers (issue 17)", failover_answers(dsn))


if __name__ == "__main__":
    main()
