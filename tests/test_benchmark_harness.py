"""The yardsticks of issue 14's benchmarks: the asyncio floors, the peak sampler and the
concurrency benchmark's cases, run small, so a broken floor cannot make a goal look met."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks import bench_concurrency, bench_long_session, bench_providers
from benchmarks._asyncio_floors import (
    _GroupCommitter,
    group_commits,
    open_floor_db,
    per_turn_commits,
)
from benchmarks._process_peaks import PeakSampler, process_status
from supervisor import SWITCH_INTERVAL


@pytest.fixture
def floor_db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = open_floor_db(tmp_path / "floor.db", "FULL")
    yield conn
    conn.close()


def _rows(conn: sqlite3.Connection) -> int:
    count: int = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    return count


def test_floor_database_is_durable_wal(floor_db: sqlite3.Connection) -> None:
    assert floor_db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert floor_db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_per_turn_floor_commits_every_row_on_its_own(floor_db: sqlite3.Connection) -> None:
    assert asyncio.run(per_turn_commits(floor_db, 20, 0.0, b"x" * 100)) == 20
    assert _rows(floor_db) == 20


def test_group_floor_commits_rows_that_arrive_together_in_one_transaction(
    floor_db: sqlite3.Connection,
) -> None:
    # With no delay every task asks before the first transaction starts.
    assert asyncio.run(group_commits(floor_db, 50, 0.0, b"x" * 100)) == 1
    assert _rows(floor_db) == 50


def test_group_floor_fails_every_waiter_of_a_failed_batch_and_goes_on(
    floor_db: sqlite3.Connection,
) -> None:
    async def scenario() -> list[BaseException | None]:
        with ThreadPoolExecutor(max_workers=1) as writer:
            committer = _GroupCommitter(floor_db, writer)
            row = ("s", "1", b"data")
            # The same primary key twice in one batch: the whole transaction fails.
            batch = await asyncio.gather(
                committer.save(row), committer.save(row), return_exceptions=True
            )
            await committer.save(("s", "2", b"data"))  # the committer still serves
        return list(batch)

    failures = asyncio.run(scenario())
    assert all(isinstance(f, sqlite3.IntegrityError) for f in failures)
    assert floor_db.execute("SELECT checkpoint_id FROM checkpoints").fetchall() == [("2",)]


def test_peak_sampler_sees_a_thread_that_ran_during_the_block() -> None:
    release = threading.Event()
    before = process_status().threads
    worker = threading.Thread(target=release.wait, args=(5,))
    with PeakSampler(interval=60) as peaks:  # only the entry and exit samples fire
        worker.start()
    release.set()
    worker.join(5)
    assert peaks.peak.threads >= before + 1
    assert peaks.peak.rss > 0
    assert 0 <= peaks.own_cpu < 1  # set once the sampler thread ended: it sampled nothing


def test_peak_sampler_counts_its_own_cpu_time() -> None:
    with PeakSampler(interval=0.0005) as peaks:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # keep the block open while it samples
            threading.Event().wait(0.01)
    assert peaks.own_cpu > 0  # hundreds of /proc reads


@pytest.mark.parametrize("case", ["floor-commit", "floor-group", "threads"])
def test_concurrency_case_runs_and_checks_its_answers(case: str, tmp_path: Path) -> None:
    result = bench_concurrency.child(case, 3, tmp_path)
    assert result["wall"] >= bench_concurrency.DELAY
    assert result["threads"] >= 2
    assert "rss" in result
    assert 0 < result["cpu"] < result["wall"] * os.cpu_count()  # the window's CPU, all threads


@pytest.mark.parametrize("case", ["futures", "futures-tuned"])
def test_concurrency_futures_case_sends_through_host_futures(case: str, tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    try:
        result = bench_concurrency.child(case, 3, tmp_path)
        tuned = sys.getswitchinterval()
    finally:
        sys.setswitchinterval(before)
    assert result["wall"] >= bench_concurrency.DELAY
    assert result["commits"] >= 1  # three durable turns, in one or more group commits
    assert 0 < result["cpu"] < result["wall"] * os.cpu_count()
    assert tuned == pytest.approx(SWITCH_INTERVAL if case == "futures-tuned" else before)


def test_actor_floor_runs_bare_actors_and_stops_them(tmp_path: Path) -> None:
    before, threads = sys.getswitchinterval(), threading.active_count()
    try:
        result = bench_concurrency.child("actor-floor", 3, tmp_path)
        tuned = sys.getswitchinterval()
    finally:
        sys.setswitchinterval(before)
    assert result["wall"] >= bench_concurrency.DELAY
    assert result["threads_before"] >= 3 + 1  # an actor thread each, and this one
    assert "commits" not in result  # no store: it is the floor of the threads alone
    assert 0 < result["cpu"] < result["wall"] * os.cpu_count()
    assert tuned == pytest.approx(SWITCH_INTERVAL)  # the same process tuning as futures-tuned
    assert threading.active_count() == threads  # every actor stopped


def test_the_tuned_row_says_how_far_it_is_above_the_actor_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walls = {"floor-group": 0.2, "futures-tuned": 0.9, "actor-floor": 0.3}

    def run_case(case: str, n: int) -> dict[str, float]:
        return {"wall": walls[case], "threads": 3, "rss": 0, "cpu": walls[case] / 2}

    monkeypatch.setattr(bench_concurrency, "CASES", {case: case for case in walls})
    monkeypatch.setattr(bench_concurrency, "_run_case", run_case)
    rows, ok = bench_concurrency._size_rows(7, 1)
    assert ok
    assert dict(rows)["futures-tuned"].endswith(
        "CPU 64,286 us/turn; 4.5x group floor, 3.0x actor floor"
    )  # 0.45 s of CPU over 7 turns
    assert dict(rows)["actor-floor"].endswith("; 1.5x group floor")


def test_a_stalled_round_shows_beside_the_median(monkeypatch: pytest.MonkeyPatch) -> None:
    walls = {"floor-group": iter([0.2, 0.2, 0.2]), "futures": iter([0.4, 30.0, 0.4])}

    def run_case(case: str, n: int) -> dict[str, float]:
        return {"wall": next(walls[case]), "threads": 3, "rss": 0}

    monkeypatch.setattr(bench_concurrency, "CASES", {case: case for case in walls})
    monkeypatch.setattr(bench_concurrency, "_run_case", run_case)
    rows, ok = bench_concurrency._size_rows(7, 3)
    assert ok
    futures = dict(rows)["futures"]
    assert futures.startswith("  0.40 s (worst 30.00 s)")  # the median alone would hide it
    assert "2.0x group floor" in futures


def test_the_long_session_benchmark_times_every_turn_and_compares_the_ends(tmp_path: Path) -> None:
    walls, cpus = bench_long_session.run(tmp_path, 12)  # raises unless the store holds it all
    assert len(walls) == len(cpus) == 12
    assert all(wall > 0 for wall in walls)
    rows = dict(bench_long_session.figures(walls, cpus))
    assert rows["first 6 turns, wall"].startswith("mean ")
    goal = rows["goal: last / first, mean CPU (<= 1.5)"]
    assert goal.endswith(("(met)", "(missed)"))


def test_provider_turns_run_in_lockstep_with_the_bare_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every subject gets each round's turns in a rotating order, on a conversation opened
    for the round and closed after it; the warm-up round is not counted."""
    monkeypatch.setattr(bench_providers, "ROUNDS", 3)
    monkeypatch.setattr(bench_providers, "TURNS", 4)
    calls: list[tuple[str, str]] = []
    closed: list[str] = []

    def opener(name: str) -> bench_providers.Opener:
        def open_conversation() -> tuple[bench_providers.Turn, Callable[[], object]]:
            return (lambda text: calls.append((name, text))), lambda: closed.append(name)

        return open_conversation

    spent = bench_providers._lockstep({name: opener(name) for name in ("a", "b", "c")})
    assert {name: len(seconds) for name, seconds in spent.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(s > 0 for seconds in spent.values() for s in seconds)
    assert closed == ["a", "b", "c"] * 4  # the warm-up round and 3 counted ones
    assert len(calls) == 4 * 4 * 3
    firsts = [calls[i][0] for i in range(0, len(calls), 3)]
    assert firsts[:4] == ["a", "b", "c", "a"]  # the order rotates turn by turn
    assert [text for name, text in calls if name == "b"][:4] == [f"hello {k}" for k in range(4)]


def test_the_gateway_floor_runs_the_turn_and_answers_what_the_load_generator_reads(
    tmp_path: Path,
) -> None:
    """The bare ASGI floor of ``bench_gateway`` creates sessions and runs real turns (a floor
    that answered without the turn would make the gateway look slow), and refuses the rest."""
    import httpx  # noqa: PLC0415  (the test extra)

    from benchmarks._asgi_floor import FloorApp  # noqa: PLC0415
    from benchmarks.bench_gateway import ECHO  # noqa: PLC0415
    from supervisor import AgentHost, AsyncAgentHost  # noqa: PLC0415

    async def exchange(host: AgentHost) -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=FloorApp(AsyncAgentHost(host), ECHO))
        async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
            return [
                await client.post("/v1/sessions", json={"session_id": "g0"}),
                await client.post("/v1/sessions/g0/messages", json={"text": "hello"}),
                await client.post("/v1/other", json={}),
                await client.get("/v1/sessions"),
            ]

    with AgentHost(data_dir=tmp_path) as host:
        created, sent, unknown, wrong_method = asyncio.run(exchange(host))
        history = host.history("g0", tenant_id="bench")
    assert (created.status_code, created.json()) == (201, {"session_id": "g0"})
    assert sent.status_code == 200
    assert sent.json() == {"role": "assistant", "content": "echo: hello"}
    assert [m.content for m in history] == ["hello", "echo: hello"]
    assert (unknown.status_code, wrong_method.status_code) == (404, 405)
