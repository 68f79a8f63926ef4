"""The cluster's event fan-out (issue 17): what it costs a turn, and how late events arrive.

1. Turns per second of a cluster node whose sessions' events are fanned out
   (``NodeConfig(events="postgres")``, the default, and ``events="redis://..."``)
   against the same node without fan-out (``events=None``): 40 sessions, 8
   threads sending turns to an echo model, each turn checkpointed; rounds
   interleaved, median of the per-round ratios.
2. Delivery delay: from an event's publication on the owner (``Event.at``) to
   its arrival at a follower on another node of this process, p50 and p99 over
   the events of 300 turns, per transport.

Needs the PostgreSQL server of ``tests/pg_server.py`` (and Redis at
``SESSIONVISOR_REDIS_URL`` for the Redis rows, which are skipped without one).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from actors import Event
from benchmarks._common import percentile, print_table
from supervisor import AgentHost, PostgresCheckpointStore
from supervisor.cluster import NodeConfig
from tests.pg_server import fresh_database, server_problem
from tests.supervisor.cluster_helpers import REDIS_URL
from tests.supervisor.host_helpers import template

SESSIONS = 40
THREADS = 8
TURNS = 400  # per round and node
ROUNDS = 5
DELAY_TURNS = 300


def _redis_up() -> bool:
    try:
        import redis  # noqa: PLC0415

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _turns_per_second(host: AgentHost, sids: list[str], turns: int) -> float:
    texts = [(sids[i % len(sids)], f"turn {i}") for i in range(turns)]
    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda pair: host.send(*pair), texts))
    return turns / (time.perf_counter() - start)


def cost_figures(dsn: str, transports: dict[str, str | None]) -> list[tuple[str, str]]:
    stores: list[PostgresCheckpointStore] = []
    hosts: dict[str, AgentHost] = {}
    sids: dict[str, list[str]] = {}
    try:
        for name, events in transports.items():
            store = PostgresCheckpointStore(dsn, schema="events_cost")
            stores.append(store)
            config = NodeConfig(node_id=f"cost-{name}", ttl=30.0, events=events)
            hosts[name] = AgentHost(store=store, node=config)
            sids[name] = [
                hosts[name].start_session(template(), f"{name}-{i}") for i in range(SESSIONS)
            ]
            _turns_per_second(hosts[name], sids[name], SESSIONS)  # warm up
        rates: dict[str, list[float]] = {name: [] for name in transports}
        for _ in range(ROUNDS):
            for name, host in hosts.items():
                rates[name].append(_turns_per_second(host, sids[name], TURNS))
    finally:
        for host in hosts.values():
            host.shutdown()
        for store in stores:
            store.close()
    base = rates["none"]
    rows = [("turns/s without fan-out (baseline)", f"{statistics.median(base):.0f}")]
    for name in transports:
        if name == "none":
            continue
        ratio = statistics.median(r / b for r, b in zip(rates[name], base, strict=True))
        rows.append((f"turns/s with {name} fan-out / baseline", f"{ratio:.2f}  ({ROUNDS} rounds)"))
    return rows


def delay_figures(dsn: str, name: str, events: str) -> list[tuple[str, str]]:
    stores = [PostgresCheckpointStore(dsn, schema=f"events_delay_{name}") for _ in range(2)]
    delays: list[float] = []
    lock = threading.Lock()

    def arrived(event: Event) -> None:
        now = time.time()
        with lock:
            delays.append(now - event.at)

    owner = AgentHost(store=stores[0], node=NodeConfig(node_id="owner", events=events))
    other = AgentHost(store=stores[1], node=NodeConfig(node_id="other", events=events))
    try:
        sid = owner.start_session(template(), "s")
        with other.follow(sid) as follower:
            follower.subscribe(arrived)
            for turn in range(DELAY_TURNS):
                owner.send(sid, f"turn {turn}")
            last = owner.events(sid).cursor
            deadline = time.monotonic() + 10
            while follower.last_seq < last and time.monotonic() < deadline:
                time.sleep(0.01)
            missed = follower.missed
    finally:
        owner.shutdown()
        other.shutdown()
        for store in stores:
            store.close()
    return [
        (
            f"{name}: publish -> follower on another node, p50 / p99",
            f"{statistics.median(delays) * 1e3:.2f} ms / {percentile(delays, 99) * 1e3:.2f} ms"
            f"  ({len(delays)} events, {missed} missed)",
        )
    ]


def main() -> None:
    problem = server_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return
    transports: dict[str, str | None] = {"none": None, "postgres": "postgres"}
    if _redis_up():
        transports["redis"] = REDIS_URL
    else:
        print(f"(no Redis at {REDIS_URL}: its rows are skipped)")
    with fresh_database("sv_bench") as dsn:
        print_table("1. the fan-out's cost to turns", cost_figures(dsn, transports))
        rows = []
        for name, events in transports.items():
            if events is not None:
                rows += delay_figures(dsn, name, events)
        print_table("2. delivery delay", rows)


if __name__ == "__main__":
    main()
