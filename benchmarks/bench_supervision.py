"""Cost of supervision (issue 3): the four figures, each against a baseline of the same run.

1. ``ask()`` throughput of a monitored, registered, supervised actor vs a bare
   ``pykka.ThreadingActor`` (goal: ratio >= 0.9).
2. Crash-to-eviction latency over 1,000 crashes, from the moment the handler
   raises: until the store has evicted the entry (on the dying thread), until an
   ordinary watcher gets ``Down``, and until another thread, woken by that
   ``Down``, sees ``get()`` raise ``SessionNotFound`` (goal: p99 < 1 ms).
3. Restarts per second of a one_for_one supervisor whose child crashes on
   every message (crash -> restarted -> answering a ping).
4. ``list_by_tenant`` on 100,000 entries over 1,000 tenants vs ``list()``
   filtered by hand (goal: >= 100x).
"""

from __future__ import annotations

import functools
import logging
import statistics
import threading
import time
from typing import Any

import pykka

from benchmarks._common import interleaved_rates, percentile, print_table, rate
from supervisor import (
    ChildSpec,
    Down,
    SessionEntry,
    SessionNotFound,
    SessionStore,
    SupervisedActor,
    SupervisorHandle,
    monitor,
    terminate,
)

TIMEOUT = 10.0
CRASHES = 1000
RESTART_ROUNDS, RESTARTS_PER_ROUND = 5, 200
ENTRIES, TENANTS, HOLDERS = 100_000, 1000, 100


class BareEcho(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


class Echo(SupervisedActor):
    def on_receive(self, message: Any) -> Any:
        return message


class Crashy(SupervisedActor):
    """Stamps the time, then raises on every message."""

    def __init__(self, stamps: list[float]) -> None:
        super().__init__()
        self.stamps = stamps

    def on_receive(self, message: Any) -> Any:
        if message == "ping":
            return "pong"
        self.stamps.append(time.perf_counter())
        raise RuntimeError("crash")


def ask_throughput() -> list[tuple[str, str]]:
    store = SessionStore()
    handle = SupervisorHandle.start([ChildSpec("echo", Echo.start)])
    [info] = handle.which_children()
    subject = info.actor_ref
    assert subject is not None
    store.create("s", subject, tenant_id="t", api_key="k")
    monitor(subject, lambda _down: None)
    bare = BareEcho.start()
    try:
        subj, base, ratio = interleaved_rates(
            lambda: subject.ask("hi", timeout=TIMEOUT),
            lambda: bare.ask("hi", timeout=TIMEOUT),
            ops=3000,
            rounds=9,
        )
    finally:
        handle.stop()
        bare.stop()
    return [
        ("1. ask/s supervised+monitored+registered", f"{subj:,.0f}"),
        ("   ask/s bare pykka.ThreadingActor", f"{base:,.0f}"),
        ("   ratio (median of rounds, goal >= 0.9)", f"{ratio:.3f}"),
    ]


def crash_to_eviction() -> list[tuple[str, str]]:
    evicted_at: list[float] = []
    store = SessionStore(on_evict=lambda _e, _r: evicted_at.append(time.perf_counter()))
    raised_at: list[float] = []
    down_at: list[float] = []
    seen_at: list[float] = []
    for n in range(CRASHES):
        ref = Crashy.start(raised_at)
        sid = f"s{n}"
        store.create(sid, ref)
        arrived = threading.Event()

        def on_down(_down: Down, ev: threading.Event = arrived) -> None:
            down_at.append(time.perf_counter())
            ev.set()

        monitor(ref, on_down)
        ref.tell("crash")
        assert arrived.wait(TIMEOUT)
        try:
            store.get(sid)
        except SessionNotFound:
            seen_at.append(time.perf_counter())
        else:
            raise AssertionError("get() returned a dead session")
        assert terminate(ref, TIMEOUT)

    def pcts(ends: list[float]) -> str:
        us = [(end - start) * 1e6 for start, end in zip(raised_at, ends, strict=True)]
        return f"p50 {percentile(us, 50):7.1f} us   p99 {percentile(us, 99):7.1f} us"

    return [
        ("2. raise -> entry evicted (on_evict)", pcts(evicted_at)),
        ("   raise -> Down at ordinary watcher", pcts(down_at)),
        ("   raise -> get() raises in woken thread", pcts(seen_at)),
    ]


def _grew(items: list[Any], size: int) -> bool:
    return len(items) > size


def restarts_per_second() -> list[tuple[str, str]]:
    cond = threading.Condition()
    current: list[pykka.ActorRef[Any]] = []
    stamps: list[float] = []

    def start() -> pykka.ActorRef[Any]:
        ref = Crashy.start(stamps)
        with cond:
            current.append(ref)
            cond.notify_all()
        return ref

    handle = SupervisorHandle.start([ChildSpec("c", start)], max_restarts=10**9)
    rates = []
    try:
        for _ in range(RESTART_ROUNDS):
            began = time.perf_counter()
            for _ in range(RESTARTS_PER_ROUND):
                with cond:
                    before = len(current)
                    victim = current[-1]
                victim.tell("crash")
                with cond:
                    assert cond.wait_for(functools.partial(_grew, current, before), TIMEOUT)
                    fresh = current[-1]
                assert fresh.ask("ping", timeout=TIMEOUT) == "pong"
            rates.append(RESTARTS_PER_ROUND / (time.perf_counter() - began))
    finally:
        handle.stop()
    return [("3. restarts/s one_for_one (median)", f"{statistics.median(rates):,.0f}")]


def tenant_index() -> list[tuple[str, str]]:
    store = SessionStore()
    holders = [Echo.start() for _ in range(HOLDERS)]
    for n in range(ENTRIES):
        store.create(f"s{n}", holders[n % HOLDERS], tenant_id=f"tenant-{n % TENANTS}")
    tenant = "tenant-7"

    def by_hand() -> list[SessionEntry]:
        return [e for e in store.list() if e.tenant_id == tenant]

    assert sorted(e.session_id for e in store.list_by_tenant(tenant)) == sorted(
        e.session_id for e in by_hand()
    )
    indexed, scanned, ratios = [], [], []
    for _ in range(5):
        i = rate(lambda: store.list_by_tenant(tenant), 2000)
        s = rate(by_hand, 5)
        indexed.append(i)
        scanned.append(s)
        ratios.append(i / s)
    for entry in store.list():
        store.delete(entry.session_id)
    for ref in holders:
        ref.stop()
    return [
        ("4. list_by_tenant/s (100k entries, 1k tenants)", f"{statistics.median(indexed):,.0f}"),
        ("   list() filtered by hand /s", f"{statistics.median(scanned):,.1f}"),
        ("   ratio (goal >= 100)", f"{statistics.median(ratios):,.0f}x"),
    ]


def main() -> None:
    logging.disable(logging.CRITICAL)  # crash tracebacks would dominate the timings
    rows = ask_throughput() + crash_to_eviction() + restarts_per_second() + tenant_index()
    print_table("supervision overhead (medians; ratios vs a baseline of the same run)", rows)


if __name__ == "__main__":
    main()
