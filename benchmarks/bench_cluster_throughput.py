"""Throughput of a cluster of 3 gateway nodes against 1 node, through the gateways.

Both clusters run at once as ``sessionvisor serve --postgres`` processes on one
PostgreSQL database (a schema each), with the same total number of sessions,
a model that takes 200 ms per turn (``bench_concurrency.TEMPLATE``) and a
checkpoint per turn. A round sends every session ``TURNS`` turns, one at a time
per session, all sessions at once, from one asyncio client; each request goes
to a node chosen round-robin, as a load balancer would, so on 3 nodes two in
three are forwarded to the session's owner. Rounds alternate 1 node / 3 nodes,
and the figure is the median of the per-round ratios of turns per second.

Run: ``python -m benchmarks.bench_cluster_throughput`` (``BENCH_CLUSTER_SESSIONS``,
``BENCH_CLUSTER_ROUNDS``, ``BENCH_CLUSTER_TURNS`` change the sizes). Without a
PostgreSQL server it says so and skips.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks._common import percentile, print_table
from benchmarks.bench_concurrency import DELAY
from gateway.keys_pg import PostgresKeyStore
from supervisor import PostgresCheckpointStore
from tests.gateway.cluster_nodes import ServeProcess
from tests.pg_server import fresh_database, server_problem

SESSIONS = int(os.environ.get("BENCH_CLUSTER_SESSIONS", "48"))
ROUNDS = int(os.environ.get("BENCH_CLUSTER_ROUNDS", "5"))
TURNS = int(os.environ.get("BENCH_CLUSTER_TURNS", "4"))
PER_KEY = 6  # sessions per tenant key: under the gateway's 16 requests in flight per key
TTL = 10.0
TEMPLATE = ["slow=benchmarks.bench_concurrency:TEMPLATE"]


class Cluster:
    """``nodes`` serve processes on one schema, with ``SESSIONS`` sessions created across
    them (each through node ``index % nodes``, so the owners are spread)."""

    def __init__(self, dsn: str, schema: str, data_dir: Path, nodes: int) -> None:
        self.processes = [
            ServeProcess(dsn, schema, data_dir, f"{schema}-{index}", TTL, TEMPLATE)
            for index in range(nodes)
        ]
        with PostgresCheckpointStore(dsn, schema=schema, pool_size=1) as store:
            keys = PostgresKeyStore(store, data_dir)
            self.keys = [keys.create(f"t{index}").key for index in range(SESSIONS // PER_KEY + 1)]
        self.sessions = [(f"s{index}", self.keys[index // PER_KEY]) for index in range(SESSIONS)]

    async def create(self, client: httpx.AsyncClient) -> None:
        for index, (sid, key) in enumerate(self.sessions):
            url = self.processes[index % len(self.processes)].url
            answer = await client.post(
                f"{url}/v1/sessions",
                json={"template": "slow", "session_id": sid},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert answer.status_code == 201, answer.text

    async def round(self, client: httpx.AsyncClient) -> tuple[float, list[float]]:
        """Turns per second of one round, and each turn's latency."""
        urls = itertools.cycle([p.url for p in self.processes])
        latencies: list[float] = []

        async def converse(sid: str, key: str, start: int) -> None:
            for turn in range(TURNS):
                url = next(urls)
                sent = time.perf_counter()
                answer = await client.post(
                    f"{url}/v1/sessions/{sid}/messages",
                    json={"text": f"turn {start + turn}"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert answer.status_code == 200, answer.text
                latencies.append(time.perf_counter() - sent)

        begun = time.perf_counter()
        await asyncio.gather(*(converse(sid, key, 0) for sid, key in self.sessions))
        return SESSIONS * TURNS / (time.perf_counter() - begun), latencies

    def close(self) -> None:
        for process in self.processes:
            process.close()


async def measure(one: Cluster, three: Cluster) -> list[tuple[str, str]]:
    limits = httpx.Limits(
        max_connections=SESSIONS * 2, max_keepalive_connections=SESSIONS * 2, keepalive_expiry=2.0
    )
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await one.create(client)
        await three.create(client)
        await one.round(client)  # warm up both (first turns, connection pools)
        await three.round(client)
        rates: dict[str, list[float]] = {"1": [], "3": []}
        latencies: dict[str, list[float]] = {"1": [], "3": []}
        ratios = []
        for _ in range(ROUNDS):
            for name, cluster in (("1", one), ("3", three)):
                rate, lat = await cluster.round(client)
                rates[name].append(rate)
                latencies[name] += lat
            ratios.append(rates["3"][-1] / rates["1"][-1])
    ideal = SESSIONS / DELAY
    rows = [
        (
            f"{SESSIONS} sessions, {TURNS} turns each per round, model {DELAY * 1e3:.0f} ms",
            f"ideal {ideal:.0f} turns/s",
        ),
    ]
    for name in ("1", "3"):
        lat = latencies[name]
        rows.append(
            (
                f"{name} node(s): turns/s (median); latency p50 / p99",
                f"{statistics.median(rates[name]):.1f}; "
                f"{statistics.median(lat) * 1e3:.0f} / {percentile(lat, 99) * 1e3:.0f} ms",
            )
        )
    rows.append(
        (
            f"3 nodes / 1 node, turns/s (median of {ROUNDS} per-round ratios)",
            f"{statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        )
    )
    return rows


def main() -> None:
    problem = server_problem()
    if problem is not None:
        print(f"skipped: {problem}")
        return
    with fresh_database("sv_bench_cluster") as dsn, tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        one = Cluster(dsn, "one", data_dir, 1)
        try:
            three = Cluster(dsn, "three", data_dir, 3)
            try:
                rows = asyncio.run(measure(one, three))
            finally:
                three.close()
        finally:
            one.close()
    print_table("Cluster throughput through the gateways (3 nodes vs 1)", rows)


if __name__ == "__main__":
    main()
