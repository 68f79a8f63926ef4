"""PostgreSQL checkpoint store and cluster failover (issue 17). Four figures:

1. ``PostgresCheckpointStore.save`` of a growing session (a node's fenced save,
   one turn more each time) against a bare psycopg ``INSERT`` + ``COMMIT`` of
   the same snapshot's ``serialize()`` bytes (goal: p50 ratio <= 1.5), and what
   the fence adds: the fenced save's p50 minus the same store's unfenced save's
   (goal: <= 0.3 ms).
   The same ratio for the snapshots of a running session (``AgentSession.snapshot()``
   after each turn of an ``EchoModel`` session with a tool, as a host saves them: their
   messages come encoded already), for comparison only.
2. ``load`` latest against a bare ``SELECT`` of the same rows (the checkpoint
   row and its message chunks; goal: p50 ratio <= 2.0), and against that
   ``SELECT`` plus ``Snapshot.deserialize`` of the snapshot's bytes.
3. Group commit: 32 threads saving at once through 8 pooled connections, saves per
   transaction.
4. Failover: ``BENCH_FAILOVER_SESSIONS`` sessions (default 200) on a node
   process, ``BENCH_FAILOVER_KILLS`` times (default 5) SIGKILLed while an idle
   node process waits; from the kill until every session is resumed on the
   other node, p50 and p99 (TTL 2 s; goal <= TTL + 1 s).

Latencies interleave the subjects op by op, so drift hits each alike. Needs the
PostgreSQL server of ``tests/pg_server.py``; without one it says how to start it
and skips. Each run works in a database of its own, dropped at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from actors import AgentSession, Snapshot
from benchmarks._common import percentile, print_table
from benchmarks.bench_checkpoint_step import TEMPLATE
from benchmarks.bench_snapshot_store import conversation
from supervisor import Fence, PostgresCheckpointStore
from supervisor.cluster import ClusterNode, NodeConfig
from tests.pg_server import fresh_database, server_problem
from tests.supervisor.cluster_helpers import NodeProcess
from tests.supervisor.host_helpers import poll_until

ROUNDS = 8
TURNS_PER_ROUND = 25
FIRST_TURN = 8  # a session of 33 messages, growing by 4 a turn
LOADS = 300
TTL = 2.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _timed(fn: Callable[[], object], into: list[float]) -> None:
    start = time.perf_counter()
    fn()
    into.append(time.perf_counter() - start)


def _streams(round_: int) -> Iterator[tuple[Snapshot, Snapshot, Snapshot]]:
    """Three copies of one growing conversation, for the fenced, unfenced and bare sides
    (each side's own session id, fresh checkpoint ids)."""
    sides = [
        conversation(FIRST_TURN + TURNS_PER_ROUND),
        conversation(FIRST_TURN + TURNS_PER_ROUND),
        conversation(FIRST_TURN + TURNS_PER_ROUND),
    ]
    for turn, snaps in enumerate(zip(*sides, strict=True)):
        if turn < FIRST_TURN:
            continue
        fenced, plain, bare = snaps
        yield (
            _renamed(fenced, f"fenced{round_}"),
            _renamed(plain, f"plain{round_}"),
            _renamed(bare, f"bare{round_}"),
        )


def _renamed(snap: Snapshot, session_id: str) -> Snapshot:
    """``snap`` as a snapshot of session ``session_id``."""
    state = {**snap.state, "session_id": session_id}
    return dataclasses.replace(snap, session_id=session_id, state=state)


def store_figures(dsn: str) -> list[tuple[str, str]]:
    store = PostgresCheckpointStore(dsn)
    node = ClusterNode(store, NodeConfig(node_id="bench", ttl=600.0))
    bare = psycopg.connect(dsn)
    bare.execute("CREATE TABLE bare (session_id text, checkpoint_id text, data bytea,"
                 " PRIMARY KEY (session_id, checkpoint_id))")  # fmt: skip
    bare.commit()
    fenced: list[float] = []
    plain: list[float] = []
    raw: list[float] = []
    sizes: list[int] = []
    last: dict[str, Snapshot] = {}
    try:
        for round_ in range(ROUNDS):
            epoch = node.claim(f"fenced{round_}")
            fence = Fence(node.node_id, node.incarnation, epoch)
            for mine, theirs, bare_snap in _streams(round_):
                data = bare_snap.serialize()
                sizes.append(len(data))
                _timed(functools.partial(store.save, mine, fence=fence), fenced)
                _timed(functools.partial(store.save, theirs), plain)
                _timed(functools.partial(_bare_insert, bare, bare_snap, data), raw)
                last = {"fenced": mine, "bare": bare_snap}
        load_rows = _load_figures(store, bare, last["fenced"], last["bare"])
        session_rows = _session_figures(store, node, bare)  # before the pool grows
        commit_rows = _group_commit_figures(store)
    finally:
        node.drain()
        store.close()
        bare.close()
    ratio = statistics.median(fenced) / statistics.median(raw)
    fence_cost = statistics.median(fenced) - statistics.median(plain)
    return [
        ("snapshot sizes (serialize())", f"{min(sizes):,} .. {max(sizes):,} bytes"),
        ("save, fenced (a node's): p50 / p99",
         f"{_ms(statistics.median(fenced))} / {_ms(percentile(fenced, 99))}"),
        ("save, unfenced: p50", _ms(statistics.median(plain))),
        ("bare INSERT + COMMIT, same bytes: p50", _ms(statistics.median(raw))),
        ("save / bare, p50 (goal <= 1.5)", f"{ratio:.2f}x ({_verdict(ratio <= 1.5)})"),
        ("fence cost at p50 (goal <= 0.3 ms)",
         f"{_ms(fence_cost)} ({_verdict(fence_cost <= 0.0003)})"),
        *session_rows,
        *load_rows,
        *commit_rows,
    ]  # fmt: skip


def _session_figures(
    store: PostgresCheckpointStore, node: ClusterNode, bare: psycopg.Connection[Any]
) -> list[tuple[str, str]]:
    """Fenced saves of a running session's snapshots against the bare insert of their bytes."""
    bare.autocommit = False  # as in the first figure: INSERT, then COMMIT
    ours: list[float] = []
    raw: list[float] = []
    for round_ in range(ROUNDS):
        session = AgentSession(TEMPLATE, session_id=f"live{round_}")
        session.on_start()
        fence = Fence(node.node_id, node.incarnation, node.claim(session.session_id))
        for turn in range(FIRST_TURN + TURNS_PER_ROUND):
            session.send(f'/lookup {{"key": "topic-{turn}"}}')  # 4 messages a turn
            if turn < FIRST_TURN:
                continue
            snapshot = session.snapshot()
            data = snapshot.serialize()
            _timed(functools.partial(store.save, snapshot, fence=fence), ours)
            _timed(functools.partial(_bare_insert, bare, snapshot, data), raw)
    ratio = statistics.median(ours) / statistics.median(raw)
    return [
        ("running session's snapshots: save p50 / bare p50",
         f"{_ms(statistics.median(ours))} / {_ms(statistics.median(raw))} ({ratio:.2f}x)"),
    ]  # fmt: skip


def _bare_insert(conn: psycopg.Connection[Any], snap: Snapshot, data: bytes) -> None:
    conn.execute(
        "INSERT INTO bare VALUES (%s, %s, %b)", (snap.session_id, snap.checkpoint_id, data)
    )
    conn.commit()


def _load_figures(
    store: PostgresCheckpointStore,
    bare: psycopg.Connection[Any],
    newest: Snapshot,
    bare_snap: Snapshot,
) -> list[tuple[str, str]]:
    sid = newest.session_id
    assert store.load(sid) == newest
    schema = f'"{store.schema}"'
    row = bare.execute(
        f"SELECT log_gen FROM {schema}.checkpoints WHERE session_id = %s AND checkpoint_id = %s",
        (sid, newest.checkpoint_id),
    ).fetchone()
    assert row is not None
    gen = row[0]
    bare.commit()
    bare.autocommit = True
    one_row = (f"SELECT * FROM {schema}.checkpoints"
               " WHERE session_id = %s AND checkpoint_id = %s").encode()  # fmt: skip
    chunk_rows = (f"SELECT start, data FROM {schema}.message_chunks"
                  " WHERE session_id = %s AND gen = %s ORDER BY start").encode()  # fmt: skip
    data = bare_snap.serialize()

    def bare_select() -> None:
        bare.execute(one_row, (sid, newest.checkpoint_id), binary=True).fetchone()
        bare.execute(chunk_rows, (sid, gen), binary=True).fetchall()

    def bare_select_decoded() -> None:
        bare_select()
        Snapshot.deserialize(data)

    ours: list[float] = []
    raw: list[float] = []
    raw_decoded: list[float] = []
    for _ in range(LOADS):
        _timed(functools.partial(store.load, sid), ours)
        _timed(bare_select, raw)
        _timed(bare_select_decoded, raw_decoded)
    ratio = statistics.median(ours) / statistics.median(raw)
    decoded = statistics.median(ours) / statistics.median(raw_decoded)
    return [
        (f"load latest ({len(newest.state['messages'])} messages): p50 / p99",
         f"{_ms(statistics.median(ours))} / {_ms(percentile(ours, 99))}"),
        ("bare SELECT of the same rows: p50", _ms(statistics.median(raw))),
        ("load / bare SELECT, p50 (goal <= 2.0)", f"{ratio:.2f}x ({_verdict(ratio <= 2.0)})"),
        ("load / (bare SELECT + deserialize), p50", f"{decoded:.2f}x"),
    ]  # fmt: skip


def _group_commit_figures(store: PostgresCheckpointStore) -> list[tuple[str, str]]:
    before = store.commits
    threads = 32  # more than the pool's 8 connections: batches form
    saves = 30
    go = threading.Barrier(threads)

    def work(worker: int) -> None:
        go.wait(30)
        for snap in conversation(saves):
            store.save(_renamed(snap, f"gc{worker}"))

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(w,)) for w in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - started
    commits = store.commits - before
    return [
        (f"{threads} threads saving at once: saves/s", f"{threads * saves / elapsed:,.0f}"),
        ("   saves per transaction (group commit)", f"{threads * saves / commits:.2f}"),
    ]


def failover_figures(dsn: str) -> list[tuple[str, str]]:
    sessions = int(os.environ.get("BENCH_FAILOVER_SESSIONS", "200"))
    kills = int(os.environ.get("BENCH_FAILOVER_KILLS", "5"))
    schema = "failover"
    sids = [f"f{index}" for index in range(sessions)]
    owner = NodeProcess(dsn, schema, "n0", TTL)
    started = [owner]
    times: list[float] = []
    try:
        owner.request("start", sids=sids)
        owner.request("send_all", sids=sids, text="before")  # a first checkpoint each
        for kill in range(1, kills + 1):
            standby = NodeProcess(dsn, schema, f"n{kill}", TTL)
            started.append(standby)
            owner.signal(signal.SIGKILL)
            killed = time.monotonic()
            owner.process.wait(5)
            ok = poll_until(functools.partial(_serves, standby, sorted(sids)), TTL + 30)
            assert ok, f"kill {kill}: the sessions did not all resume on the standby"
            times.append(time.monotonic() - killed)
            for sid in sids[:: max(1, sessions // 10)]:
                assert standby.request("send", sid=sid, text=f"after kill {kill}") == (
                    f"echo: after kill {kill}"
                )
            owner = standby
    finally:
        for process in started:
            process.close()
    p50, p99 = statistics.median(times), percentile(times, 99)
    return [
        (f"{sessions} sessions, {kills} SIGKILLs, TTL {TTL:.0f} s", ""),
        ("kill -> all resumed elsewhere: p50 / p99", f"{p50:.2f} s / {p99:.2f} s"),
        ("goal p99 <= TTL + 1 s", _verdict(p99 <= TTL + 1.0)),
        ("each kill", ", ".join(f"{t:.2f}" for t in times)),
    ]


def _serves(node: NodeProcess, sids: list[str]) -> bool:
    sessions: list[str] = node.request("status")["sessions"]
    return sessions == sids


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def main() -> None:
    problem = server_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return
    with fresh_database("sv_bench") as dsn:
        print_table("1-3. PostgresCheckpointStore", store_figures(dsn))
        print_table("4. failover between node processes", failover_figures(dsn))


if __name__ == "__main__":
    main()
