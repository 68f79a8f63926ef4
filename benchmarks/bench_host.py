"""AgentHost figures (issue 5).

1. Resume latency of a 300-message session (load + rehydrate + session_start +
   start + register), p50/p99, against ``SQLiteCheckpointStore.load`` alone of
   the same checkpoint (the raw floor), in the same run; and resume followed by
   the session's first turn, which builds the history's ``Message`` objects (a
   resume does not: it checks the dicts, or, as here, takes them unchecked when
   the store vouches for them, ``actors.snapshot.checked_messages``) and takes
   the turn's durable checkpoint.
2. Reactivation latency of a hibernated session on ``send``, p50/p99.
3. Session lifecycle (issue 14): ``start_session`` + ``hibernate`` (which takes
   the session's first checkpoint) per second, on a host with the default
   durable store, against a bare ``pykka.ThreadingActor`` start + ``ask`` +
   ``stop`` plus one committed SQLite insert (WAL, same ``synchronous``) of a
   row as large as that first checkpoint; interleaved rounds, same run.
4. Turn throughput with the default after-every-turn durable checkpoint
   against the same host with checkpoints off, as a ratio.
5. Memory: N sessions (default 100,000; ``BENCH_HIBERNATED=...`` to change)
   started and hibernated in one host: bytes per hibernated session (resident
   set growth / N) and the thread count afterwards.

Issue 14's goals: resume / load <= 2.0 (figure 1) and lifecycle rate / bare
rate >= 0.5 (figure 3); a missed goal is reported, not failed.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pykka

from actors import AgentTemplate, EchoModel, Plugin, PluginContext, tool
from benchmarks._common import bare_sqlite, interleaved_rates, percentile, print_table
from supervisor import AgentHost, SQLiteCheckpointStore

SAMPLES = 200


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


class Counter(Plugin):
    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("starts", 0)
        ctx.state["starts"] += 1


TEMPLATE = AgentTemplate(model=EchoModel(), tools=[lookup], plugins=[Counter()])


def _ms(samples: list[float]) -> str:
    return f"p50 {percentile(samples, 50) * 1e3:.2f} ms, p99 {percentile(samples, 99) * 1e3:.2f} ms"


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def resume_latency(tmp: Path) -> list[tuple[str, str]]:
    store = SQLiteCheckpointStore(tmp / "resume.db")
    with AgentHost(store=store) as host:
        host.start_session(TEMPLATE, session_id="long")
        for i in range(75):  # 75 turns x 4 messages (user, call, tool, answer) = 300
            host.send("long", f'/lookup {{"key": "k{i}"}}')
        assert len(host.history("long")) == 300
        host.stop_session("long")
        resumes, loads = [], []
        for _ in range(SAMPLES):
            start = time.perf_counter()
            store.load("long")
            loads.append(time.perf_counter() - start)
            start = time.perf_counter()
            host.resume("long", TEMPLATE)
            resumes.append(time.perf_counter() - start)
            host.stop_session("long")
        firsts = []
        kept = store.list("long")[0].checkpoint_id
        for _ in range(SAMPLES // 4):
            start = time.perf_counter()
            host.resume("long", TEMPLATE)
            host.send("long", "hello")
            firsts.append(time.perf_counter() - start)
            host.stop_session("long")
            for info in store.list("long"):  # back to the 300 messages for the next round
                if info.checkpoint_id > kept:
                    store.delete("long", info.checkpoint_id)
    ratio = statistics.median(resumes) / statistics.median(loads)
    verdict = "met" if ratio <= 2.0 else "missed"
    return [
        ("1. resume of a 300-message session", _ms(resumes)),
        ("   SQLiteCheckpointStore.load alone (floor)", _ms(loads)),
        ("   ratio resume / load (medians; goal <= 2.0)", f"{ratio:.1f}x ({verdict})"),
        ("   resume + its first turn (durable checkpoint)", _ms(firsts)),
    ]


def reactivation_latency(tmp: Path) -> list[tuple[str, str]]:
    with AgentHost(store=SQLiteCheckpointStore(tmp / "react.db"), auto_hibernate=False) as host:
        host.start_session(TEMPLATE, session_id="idle")
        host.send("idle", "hello")
        samples = []
        for _ in range(SAMPLES):
            assert host.hibernate("idle")
            start = time.perf_counter()
            host.send("idle", "wake up")
            samples.append(time.perf_counter() - start)
    return [("2. reactivation of a hibernated session on send", _ms(samples))]


def hibernated_memory(tmp: Path, count: int) -> list[tuple[str, str]]:
    store = SQLiteCheckpointStore(tmp / "many.db", synchronous="NORMAL")
    with AgentHost(store=store, auto_hibernate=False) as host:
        host.start_session(TEMPLATE, session_id="warm-up")
        host.hibernate("warm-up")
        gc.collect()
        before = _rss_bytes()
        start = time.perf_counter()
        for i in range(count):
            sid = f"s{i}"
            host.start_session(TEMPLATE, session_id=sid, tenant_id=f"t{i % 100}")
            host.hibernate(sid)
        elapsed = time.perf_counter() - start
        gc.collect()
        grown = _rss_bytes() - before
        threads = threading.active_count()
        hibernated = sum(1 for s in host.list_sessions() if s.status == "hibernated")
    return [
        (f"5. {count:,} sessions started then hibernated", f"{elapsed:.0f} s"),
        ("   hibernated sessions listed", f"{hibernated:,}"),
        ("   resident memory per hibernated session", f"{grown / count:,.0f} bytes"),
        ("   threads in the process afterwards", f"{threads} (main + supervisor)"),
    ]


def checkpoint_cost(tmp: Path) -> list[tuple[str, str]]:
    durable = AgentHost(store=SQLiteCheckpointStore(tmp / "durable.db"))
    off = AgentHost(store=SQLiteCheckpointStore(tmp / "off.db"), checkpoint_every=None)
    ratios, rates = [], []
    try:
        for round_ in range(5):
            pair = []
            for host in (durable, off) if round_ % 2 == 0 else (off, durable):
                sid = host.start_session(TEMPLATE)
                start = time.perf_counter()
                for _ in range(100):
                    host.send(sid, "hello there")
                pair.append((host is durable, 100 / (time.perf_counter() - start)))
                host.stop_session(sid)
            by_kind = dict(pair)
            ratios.append(by_kind[True] / by_kind[False])
            rates.append(by_kind)
    finally:
        durable.shutdown()
        off.shutdown()
    return [
        (
            "4. turns/s, durable checkpoint every turn",
            f"{statistics.median(r[True] for r in rates):,.0f}",
        ),
        ("   turns/s, checkpoints off", f"{statistics.median(r[False] for r in rates):,.0f}"),
        ("   ratio durable / off (median)", f"{statistics.median(ratios):.2f}"),
    ]


class BareActor(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def lifecycle_rate(tmp: Path) -> list[tuple[str, str]]:
    store = SQLiteCheckpointStore(tmp / "lifecycle.db")
    bare = bare_sqlite(tmp / "bare-lifecycle.db", store.synchronous)
    bare.execute("CREATE TABLE checkpoints (session_id TEXT, data BLOB)")
    with AgentHost(store=store, auto_hibernate=False) as host, closing(bare):
        first = host.start_session(TEMPLATE)
        host.hibernate(first)
        row = bytes(store.list(first)[0].size)  # as large as a first checkpoint

        def lifecycle() -> object:
            return host.hibernate(host.start_session(TEMPLATE))

        def baseline() -> object:
            ref = BareActor.start()
            ref.ask("hello")
            ref.stop()
            bare.execute("BEGIN IMMEDIATE")
            bare.execute("INSERT INTO checkpoints VALUES ('bench', ?)", (row,))
            return bare.execute("COMMIT")

        ours, floor, ratio = interleaved_rates(lifecycle, baseline, ops=100)
    verdict = "met" if ratio >= 0.5 else "missed"
    return [
        ("3. start_session + hibernate (first checkpoint)", f"{ours:,.0f} /s"),
        (f"   bare Pykka start+ask+stop + insert of {len(row)} B", f"{floor:,.0f} /s"),
        ("   ratio of rates (goal >= 0.5)", f"{ratio:.2f} ({verdict})"),
    ]


def main() -> None:
    count = int(os.environ.get("BENCH_HIBERNATED", "100000"))
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rows = resume_latency(tmp)
        rows += reactivation_latency(tmp)
        rows += lifecycle_rate(tmp)
        rows += checkpoint_cost(tmp)
        rows += hibernated_memory(tmp, count)
    print_table("AgentHost", rows)


if __name__ == "__main__":
    main()
