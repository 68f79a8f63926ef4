"""A checkpoint costs the turn, not the history, over a long session (issue 14).

One session, driven on this thread as a plain object (``AgentSession.send``, an
``EchoModel``), checkpointed after every turn through the host's ``Checkpoints``
saver into a default ``SQLiteCheckpointStore`` (durable, ``synchronous=FULL``,
``keep_last=100``) in a fresh temporary directory, for ``BENCH_LONG_TURNS``
turns (default 20,000: 40,000 messages). Each turn is timed whole (the turn, its
snapshot and its durable save), in wall time and in this thread's CPU time.

Figures: the mean and median of the first and of the last 1,000 turns, and the
ratios last / first of the means. The mean is the figure that counts here: it
includes the turns whose save does more than append (one in eight merges log
chunks), which a median skips; what a long-lived host pays per turn on average
is the mean. Goal (issue 14): the last 1,000 turns cost no more per turn than
the first 1,000, within noise (reported as <= 1.5 on the CPU-time mean, since
fsync times swing with the machine's other load).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from actors import AgentSession, AgentTemplate, EchoModel, EventBuffer
from benchmarks._common import print_table
from supervisor import SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints

TURNS = int(os.environ.get("BENCH_LONG_TURNS", "20000"))
WINDOW = 1_000
GOAL = 1.5


def run(directory: Path, turns: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each of ``turns`` checkpointed turns of one session."""
    events = EventBuffer(16)
    with SQLiteCheckpointStore(directory / "long.db") as store:
        session = AgentSession(
            AgentTemplate(model=EchoModel()),
            session_id="long",
            event_buffer=events,
            checkpointer=Checkpoints(store).saver(events),
        )
        session.on_start()
        walls, cpus = [], []
        for turn in range(turns):
            wall, cpu = time.perf_counter(), time.thread_time()
            session.send(f"question {turn}: " + "words " * 16)
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - wall)
        if len(store.load("long").messages()) != 2 * turns:
            raise RuntimeError("the last checkpoint does not hold the whole conversation")
    return walls, cpus


def figures(walls: list[float], cpus: list[float]) -> list[tuple[str, str]]:
    window = min(WINDOW, len(walls) // 2)
    first, last = slice(0, window), slice(len(walls) - window, len(walls))

    def ms(values: list[float]) -> str:
        mean, median = statistics.mean(values), statistics.median(values)
        return f"mean {mean * 1e3:.3f} ms, median {median * 1e3:.3f} ms"

    cpu_ratio = statistics.mean(cpus[last]) / statistics.mean(cpus[first])
    wall_ratio = statistics.mean(walls[last]) / statistics.mean(walls[first])
    verdict = "met" if cpu_ratio <= GOAL else "missed"
    return [
        (f"first {window:,} turns, wall", ms(walls[first])),
        (f"last {window:,} turns, wall", ms(walls[last])),
        (f"first {window:,} turns, CPU", ms(cpus[first])),
        (f"last {window:,} turns, CPU", ms(cpus[last])),
        ("last / first, mean wall", f"{wall_ratio:.2f}x"),
        (f"goal: last / first, mean CPU (<= {GOAL})", f"{cpu_ratio:.2f}x ({verdict})"),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        start = time.perf_counter()
        walls, cpus = run(Path(tmp), TURNS)
        total = time.perf_counter() - start
    title = (
        f"one session, {TURNS:,} turns ({2 * TURNS:,} messages), a durable checkpoint each "
        f"({total:.1f} s in all)"
    )
    print_table(title, figures(walls, cpus))


if __name__ == "__main__":
    main()
