"""Many turns in flight on one host (issue 14): N sessions, one message each, all at once.

The workload: a model whose ``generate`` sleeps 200 ms; one message to each of
N sessions at the same time; a durable checkpoint after every turn (the
default ``SQLiteCheckpointStore`` in a fresh data directory: WAL,
``synchronous=FULL``). The ideal wall time is the sleep, 0.2 s. Side by side,
rounds interleaved, for N = 100, 1,000 and 3,000:

(a) asyncio floor, one commit per turn, and (b) asyncio floor with group
    commit (``benchmarks/_asyncio_floors.py``): asyncio tasks that sleep 200 ms
    and then write a row as large as a sessionvisor turn's checkpoint, with the
    store's durability, through one executor thread that owns the connection;
(c) sessionvisor in thread mode: today's blocking ``AgentHost.send``, called
    from N threads (``ThreadPoolExecutor(max_workers=N)``);
(d) sessionvisor's non-blocking API: ``host.futures.send`` for all N, then wait for
    every future (no caller thread per call);
(e) the same in a process tuned as ``supervisor.tuning`` advises for many
    sessions: ``tune_interpreter()`` (as the ``serve`` command does), a 200 ms
    switch interval instead of Python's 5 ms, which keeps thousands of session
    threads from thrashing on the GIL, and full collections ten times rarer;
    and ``pin_to_one_cpu()`` (``serve --cpu``), every thread on the CPU the
    process started on, as batch work, so that threads waiting for the GIL do
    not fight over it from the other CPU, nor wake only to find it held. The
    floors, an asyncio program each, keep every CPU;
(f) for context, the floor of an actor per session, tuned as (e): N bare
    Pykka actors, started before the clock starts as the sessions are, each
    asked once without blocking, sleeping 200 ms and answering; no checkpoint,
    no host. What (e) takes beyond it is sessionvisor's own work per turn
    (the turn, its checkpoint, the host's routing) with N threads wanting the
    interpreter, not the thread per session that the design gives each one.

Each case runs in a process of its own, so its threads and memory are its
own. Figures per case: wall time from the first send to the last answer;
peak OS threads of the process (``/proc/self/status`` ``Threads``, sampled
every 2 ms from a sampler thread, which counts itself) and, for the host, how
many existed before the sends (the sessions' own threads); peak resident
memory (``VmRSS`` sampled likewise) above the process's before any setup,
so a host's N started sessions count; the transactions committed (for
the host, from its store's ``commits`` where it counts them); and the CPU time
of the process over the timed window (every thread's, less the sampler's own)
per turn. The turns' Python shares one interpreter lock, so past the sleep a
case's wall time is at least N times its CPU per turn: at N = 1,000 the floor
spends tens of microseconds a turn, and a goal of 2.0 leaves a host about
(2 x floor - 0.2 s) / N of CPU per turn. Ratios are wall time over the
group-commit floor of the same round, median over rounds; the worst round's
wall time is shown beside the median, since a round that stalls (thousands of
threads sometimes do: see ``supervisor.tuning``) would vanish in the median.
Goals (issue 14):
N = 1,000 <= 2.0; N = 3,000 <= 3.0 with no caller threads (so only the
non-blocking API, (d) or (e), can meet it). A missed goal is reported, not failed.

``BENCH_CONCURRENCY_N`` (``--n``) picks the sizes, e.g. ``100,1000``;
``BENCH_CONCURRENCY_ROUNDS`` (``--rounds``) the rounds of every size
(default 5, 5 and 3 for 100, 1,000 and 3,000).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pykka

from actors import AgentSession, AgentTemplate, Message, ModelResponse, Tool, Usage
from benchmarks._asyncio_floors import group_commits, open_floor_db, per_turn_commits
from benchmarks._common import print_table
from benchmarks._process_peaks import PeakSampler, process_status
from supervisor import AgentHost, SQLiteCheckpointStore, pin_to_one_cpu, tune_interpreter

DELAY = 0.2
TEXT = "hello there"
DEFAULT_ROUNDS = {100: 5, 1000: 5, 3000: 3}
CASE_TIMEOUT = 600.0
SYNCHRONOUS: str = inspect.signature(SQLiteCheckpointStore).parameters["synchronous"].default
GOALS = {1000: 2.0, 3000: 3.0}

CASES = {
    "floor-commit": "asyncio floor, one commit per turn",
    "floor-group": "asyncio floor, group commit",
    "threads": "sessionvisor threads, blocking send",
    "futures": "sessionvisor host.futures.send",
    "futures-tuned": "the same, tune_interpreter(), pin_to_one_cpu()",
    "actor-floor": "Pykka actors alone, no checkpoint, tuned",
}


class SleepingModel:
    """Answers ``answer: <last user text>`` after sleeping ``delay`` seconds, like a remote
    model call. Stateless, hence thread-safe."""

    model_string = "sleeping"

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        """Sleep, then answer the last message."""
        time.sleep(self.delay)
        return ModelResponse(Message.assistant(f"answer: {messages[-1].content}"), Usage(2, 2))


TEMPLATE = AgentTemplate(model=SleepingModel(DELAY))


def checkpoint_bytes() -> bytes:
    """A one-turn session's checkpoint as ``serialize`` encodes it: the floors' row."""
    session = AgentSession(AgentTemplate(model=SleepingModel(0.0)))  # a plain object
    session.send(TEXT)
    return session.snapshot().serialize()


# -- one case, in a child process --------------------------------------------------------


def _floor(case: str, n: int, directory: Path) -> dict[str, Any]:
    run: Callable[..., Coroutine[Any, Any, int]] = (
        per_turn_commits if case == "floor-commit" else group_commits
    )
    data = checkpoint_bytes()
    conn = open_floor_db(directory / "floor.db", SYNCHRONOUS)

    async def timed() -> tuple[float, float, int]:
        start, cpu = time.perf_counter(), time.process_time()
        commits = await run(conn, n, DELAY, data)
        return time.perf_counter() - start, time.process_time() - cpu, commits

    try:
        with asyncio.Runner() as runner, PeakSampler() as peaks:
            wall, cpu, commits = runner.run(timed())
        stored = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    finally:
        conn.close()
    if stored != n:
        raise RuntimeError(f"{case}: {stored} rows stored, expected {n}")
    return {"wall": wall, "cpu": cpu - peaks.own_cpu, "peak": peaks.peak, "commits": commits}


class SleepingActor(pykka.ThreadingActor):
    """A bare actor whose every message takes a model's sleep: one session's thread, alone."""

    def on_receive(self, message: Any) -> Any:
        time.sleep(DELAY)
        return message


def _tune() -> None:
    """What case (e) and (f) apply (see the module docstring)."""
    tune_interpreter()
    pin_to_one_cpu()


def _actor_floor(n: int) -> dict[str, Any]:
    _tune()
    refs = [SleepingActor.start() for _ in range(n)]
    try:
        before = process_status().threads
        with PeakSampler() as peaks:
            start, cpu = time.perf_counter(), time.process_time()
            pending = [ref.ask(TEXT, block=False) for ref in refs]
            answers = [future.get(timeout=CASE_TIMEOUT) for future in pending]
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        for ref in refs:
            ref.stop(block=False)
        for ref in refs:
            ref.actor_stopped.wait(CASE_TIMEOUT)
    if answers != [TEXT] * n:
        raise RuntimeError("actor-floor: an actor answered something else")
    return {"wall": wall, "cpu": cpu - peaks.own_cpu, "peak": peaks.peak, "threads_before": before}


def _host(case: str, n: int, directory: Path) -> dict[str, Any]:
    if case == "futures-tuned":
        _tune()
    with AgentHost(data_dir=directory / "data") as host:
        sids = [host.start_session(TEMPLATE) for _ in range(n)]
        before = process_status().threads
        store: Any = host.store
        commits: int = store.commits
        with PeakSampler() as peaks:
            start, cpu = time.perf_counter(), time.process_time()
            if case == "threads":
                with ThreadPoolExecutor(max_workers=n) as pool:
                    pending = [pool.submit(host.send, sid, TEXT) for sid in sids]
                    answers = [f.result(CASE_TIMEOUT) for f in pending]
                    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            else:
                pending = [host.futures.send(sid, TEXT) for sid in sids]
                answers = [f.result(CASE_TIMEOUT) for f in pending]
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        result = {
            "wall": wall,
            "cpu": cpu - peaks.own_cpu,
            "peak": peaks.peak,
            "threads_before": before,
            "commits": store.commits - commits,
        }
        wrong = [a.content for a in answers if a.content != f"answer: {TEXT}"]
        if wrong:
            raise RuntimeError(f"{case}: {len(wrong)} unexpected answers, e.g. {wrong[0]!r}")
    return result


def child(case: str, n: int, directory: Path) -> dict[str, Any]:
    """Run one case; its figures as plain data (RSS as growth over the process at entry)."""
    base = process_status().rss
    if case == "actor-floor":
        result = _actor_floor(n)
    else:
        result = (_floor if case.startswith("floor") else _host)(case, n, directory)
    if "peak" in result:
        peak = result.pop("peak")
        result.update(threads=peak.threads, rss=peak.rss - base)
    return result


# -- the runner --------------------------------------------------------------------------


def _run_case(case: str, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        command = [sys.executable, "-m", "benchmarks.bench_concurrency", "--child", case]
        command += ["--n", str(n), "--dir", tmp]
        here = Path(__file__).resolve().parent.parent
        try:
            done = subprocess.run(
                command, cwd=here, capture_output=True, text=True, timeout=CASE_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": f"no result within {CASE_TIMEOUT:.0f} s"}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"error": f"exit {done.returncode}: {tail[0]}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median(results: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in results))


def _size_rows(n: int, rounds: int) -> tuple[list[tuple[str, str]], bool]:
    """Run every case ``rounds`` times, interleaved; the table rows and whether none failed."""
    by_round: list[dict[str, dict[str, Any]]] = []
    failed: dict[str, str] = {}
    names = list(CASES)
    for index in range(rounds):
        results: dict[str, dict[str, Any]] = {}
        for case in names[index % len(names) :] + names[: index % len(names)]:
            if case in failed:
                continue
            result = _run_case(case, n)
            if "error" in result:
                failed[case] = result["error"]
            else:
                results[case] = result
        by_round.append(results)
    rows, ratios = [], {}
    for case, label in CASES.items():
        runs = [r[case] for r in by_round if case in r]
        if case in failed:
            rows.append((label, f"not run: {failed[case]}"))
            continue
        value = f"{_median(runs, 'wall'):6.2f} s"
        if len(runs) > 1:  # a median hides a round that stalled
            value += f" (worst {max(r['wall'] for r in runs):.2f} s)"
        value += f", peak threads {_median(runs, 'threads'):,.0f}"
        if "threads_before" in runs[0]:
            value += f" ({_median(runs, 'threads_before'):,.0f} before the sends)"
        value += f", peak RSS +{_median(runs, 'rss') / 2**20:,.0f} MiB"
        if "cpu" in runs[0]:
            value += f", CPU {_median(runs, 'cpu') / n * 1e6:,.0f} us/turn"
        if "commits" in runs[0]:
            value += f", {_median(runs, 'commits'):,.0f} commits"
        if case != "floor-group" and "floor-group" not in failed:
            ratios[case] = statistics.median(
                r[case]["wall"] / r["floor-group"]["wall"] for r in by_round
            )
            value += f"; {ratios[case]:.1f}x group floor"
        if case == "futures-tuned" and "actor-floor" not in failed:
            beyond = statistics.median(
                r[case]["wall"] / r["actor-floor"]["wall"] for r in by_round if case in r
            )
            value += f", {beyond:.1f}x actor floor"
        rows.append((label, value))
    if n in GOALS:
        rows += _goal_rows(n, ratios, failed)
    return rows, not failed


def _goal_rows(n: int, ratios: dict[str, float], absent: dict[str, str]) -> list[tuple[str, str]]:
    goal = GOALS[n]
    rows = []
    for case in ("threads", "futures", "futures-tuned"):
        name = f"goal: N={n:,} {case} wall / group floor (<= {goal})"
        if case not in ratios:
            rows.append((name, f"no figure ({absent.get(case, 'no group floor')})"))
        elif case == "threads" and n == 3000:
            rows.append((name, f"{ratios[case]:.1f}x, not eligible: it needs N caller threads"))
        else:
            verdict = "met" if ratios[case] <= goal else "missed"
            rows.append((name, f"{ratios[case]:.1f}x ({verdict})"))
    return rows


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--n", type=_sizes, default=os.environ.get("BENCH_CONCURRENCY_N", "100,1000,3000")
    )
    parser.add_argument("--rounds", type=int, default=os.environ.get("BENCH_CONCURRENCY_ROUNDS"))
    parser.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes: list[int] = args.n
    if args.child is not None:
        print(json.dumps(child(args.child, sizes[0], args.dir)))
        return 0
    print(
        f"sleep {DELAY * 1e3:.0f} ms per turn, one message per session, synchronous={SYNCHRONOUS}"
    )
    print(f"floor row: {len(checkpoint_bytes())} B (a one-turn checkpoint)")
    ok = True
    for n in sizes:
        rounds = args.rounds or DEFAULT_ROUNDS.get(n, 3)
        rows, ran = _size_rows(n, rounds)
        ok = ok and ran
        print_table(f"N = {n:,} sessions (ideal {DELAY:.2f} s; medians of {rounds} rounds)", rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
