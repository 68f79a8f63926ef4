"""Worker-process benchmarks (issue 6): send round trips, SIGKILL recovery, CPU isolation.

1. ``send`` round trips/s to a session in a worker (EchoModel, checkpoints off)
   against a bare ``multiprocessing.Pipe`` echo of a msgpack frame between two
   processes, interleaved rounds, same run, with thread-mode ``AgentHost.send``
   (no IPC at all) against the same echo for context; and a ceiling: a bare
   pipe server that runs a plain ``AgentSession`` turn on the thread that reads
   the frame (no host, supervision, events relay or thread hop). No transport
   can do better than that ceiling. The goal (issue 12's restatement of issue
   6's benchmark 1): ``send`` against that ceiling, measured directly, >= 0.5.
2. SIGKILL of the session's worker -> registry eviction, and -> resumed and
   answering: p50 / p99 over ``KILLS`` (100) kills, back to back (the host's
   worker restart intensity is raised to allow them all; the default, 50 deaths
   in 10 s, would stop replacing workers halfway).
3. Wall time of 8 CPU-bound tool calls across 8 sessions: threads vs 2 workers.

``--only round-trips`` (or ``kills``, ``cpu``) runs one of them (a few seconds for
benchmark 1, when comparing two versions back to back).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

import msgpack

from actors import AgentSession, AgentTemplate, Event, Message, tool
from benchmarks._common import interleaved_rates, percentile, print_table
from supervisor import AgentHost, MemoryCheckpointStore

KILLS = 100
BURN = 2_000_000


@tool
def burn(n: int) -> int:
    """CPU-bound work in pure Python."""
    total = 0
    for i in range(n):
        total += i * i
    return total


def _echo_server(conn: Connection) -> None:
    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        conn.send_bytes(data)


def _turn_server(conn: Connection) -> None:
    """The ceiling: one ``AgentSession`` turn per frame, on the thread that read it."""
    session = AgentSession(AgentTemplate())  # a plain object: no actor thread
    while True:
        try:
            frame = msgpack.unpackb(conn.recv_bytes())
        except EOFError:
            return
        answer = session.send(frame["payload"]["text"])
        reply = {"id": frame["id"], "ok": True, "payload": {"message": answer.to_dict()}}
        conn.send_bytes(msgpack.packb(reply))


def _serve(
    ctx: multiprocessing.context.BaseContext, target: Callable[[Connection], None]
) -> tuple[Connection, multiprocessing.process.BaseProcess]:
    parent, child = ctx.Pipe()
    server = ctx.Process(target=target, args=(child,))  # type: ignore[attr-defined]
    server.start()
    child.close()
    return parent, server


def bench_round_trips() -> dict[str, float]:
    """Benchmark 1, and (for context) thread-mode ``send`` against the same echo."""
    # The host first: its pool sets the forkserver's preload list, which applies only
    # if the forkserver is not running yet, and the echo server below would start it.
    with AgentHost(MemoryCheckpointStore(), workers=1, checkpoint_every=None) as host:
        ctx = multiprocessing.get_context("forkserver")
        echo, echo_server = _serve(ctx, _echo_server)
        turns, turn_server = _serve(ctx, _turn_server)
        frame = {"id": 1, "op": "send", "payload": {"session": "s", "text": "hi"}}

        def bare() -> None:
            echo.send_bytes(msgpack.packb(frame))
            msgpack.unpackb(echo.recv_bytes())

        def ceiling() -> None:
            turns.send_bytes(msgpack.packb(frame))
            Message.from_dict(msgpack.unpackb(turns.recv_bytes())["payload"]["message"])

        sid = host.start_session(AgentTemplate())
        figures = dict(
            zip(
                ("subject", "base", "ratio"),
                interleaved_rates(lambda: host.send(sid, "hi"), bare, ops=500, rounds=5),
                strict=True,
            )
        )
        with AgentHost(MemoryCheckpointStore(), checkpoint_every=None) as threads:
            tid = threads.start_session(AgentTemplate())
            _, _, figures["threads"] = interleaved_rates(
                lambda: threads.send(tid, "hi"), bare, ops=500, rounds=5
            )
        _, _, figures["ceiling"] = interleaved_rates(ceiling, bare, ops=500, rounds=5)
        _, _, figures["of_ceiling"] = interleaved_rates(  # the goal: more rounds, less noise
            lambda: host.send(sid, "hi"), ceiling, ops=500, rounds=15
        )
        for conn, server in ((echo, echo_server), (turns, turn_server)):
            conn.close()
            server.join(5)
    return figures


def bench_kills() -> tuple[list[float], list[float]]:
    # Each kill logs a worker death and a session crash: 200 warnings that would bury the table.
    logging.getLogger("supervisor").setLevel(logging.ERROR)
    evicted, answering = [], []
    with AgentHost(
        MemoryCheckpointStore(),
        workers=2,
        max_restarts=10_000,
        worker_max_restarts=KILLS,
        worker_max_seconds=600.0,
    ) as host:
        sid = host.start_session(AgentTemplate())
        host.send(sid, "warm")
        for _ in range(KILLS):
            crashed = threading.Event()

            def seen(event: Event, flag: threading.Event = crashed) -> None:
                if event.type == "crashed":
                    flag.set()

            unsubscribe = host.subscribe(sid, seen)
            [pid] = [w.pid for w in host.workers() if sid in w.sessions]
            start = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            if not crashed.wait(10):
                raise RuntimeError(f"no 'crashed' event within 10 s of killing pid {pid}")
            evicted.append(time.perf_counter() - start)
            while True:
                try:
                    host.send(sid, "back")
                    break
                except Exception:  # not acknowledged: retry, as callers do
                    if time.perf_counter() - start > 30:
                        raise
                    continue
            answering.append(time.perf_counter() - start)
            unsubscribe()
            if not host.wait_for_workers(10):
                raise RuntimeError("the killed worker was not replaced within 10 s")
    return evicted, answering


def bench_cpu() -> tuple[float, float]:
    template = AgentTemplate(tools=(burn,))
    walls = []
    for workers in (None, 2):
        with AgentHost(MemoryCheckpointStore(), workers=workers, checkpoint_every=None) as host:
            sids = [host.start_session(template) for _ in range(8)]
            with ThreadPoolExecutor(8) as pool:
                start = time.perf_counter()
                list(pool.map(lambda s: host.send(s, f'/burn {{"n": {BURN}}}'), sids))
                walls.append(time.perf_counter() - start)
    return walls[0], walls[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--only", choices=("round-trips", "kills", "cpu"), help="run one benchmark only"
    )
    only = parser.parse_args(argv).only
    rows: list[tuple[str, str]] = []
    if only in (None, "round-trips"):
        trips = bench_round_trips()
        rows += [
            ("send round trips/s (worker, echo, no ckpt)", f"{trips['subject']:,.0f}"),
            ("bare Pipe msgpack echo round trips/s", f"{trips['base']:,.0f}"),
            ("send (worker) / same echo", f"{trips['ratio']:.2f}"),
            ("context: thread-mode send / same echo", f"{trips['threads']:.2f}"),
            ("ceiling: bare AgentSession turn over a Pipe / same echo", f"{trips['ceiling']:.2f}"),
            ("send (worker) / that ceiling (goal >= 0.5)", f"{trips['of_ceiling']:.2f}"),
        ]
    if only in (None, "kills"):
        evicted, answering = bench_kills()
        ms = 1000
        rows += [
            (
                f"SIGKILL -> eviction p50/p99 ({KILLS} kills)",
                f"{percentile(evicted, 50) * ms:.1f} / {percentile(evicted, 99) * ms:.1f} ms",
            ),
            (
                "SIGKILL -> resumed and answering p50/p99",
                f"{percentile(answering, 50) * ms:.1f} / {percentile(answering, 99) * ms:.1f} ms",
            ),
            ("median eviction", f"{statistics.median(evicted) * ms:.1f} ms"),
        ]
    if only in (None, "cpu"):
        threads, procs = bench_cpu()
        rows += [
            ("8 CPU-bound calls, threads", f"{threads:.2f} s"),
            ("8 CPU-bound calls, 2 workers", f"{procs:.2f} s (x{threads / procs:.2f})"),
        ]
    print_table("workers", rows)


if __name__ == "__main__":
    main()
