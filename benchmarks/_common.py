"""Helpers shared by the benchmark scripts: repeated timing, medians, percentiles, tables,
and the bare SQLite connection that store baselines write to.

Machines here are shared and noisy, so every figure is a median over several
rounds and every ratio compares against a baseline measured in the same run,
rounds interleaved so that drift hits both sides alike.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["bare_sqlite", "interleaved_rates", "percentile", "print_table", "rate"]


def rate(fn: Callable[[], object], ops: int) -> float:
    """Operations per second of calling ``fn`` ``ops`` times."""
    start = time.perf_counter()
    for _ in range(ops):
        fn()
    return ops / (time.perf_counter() - start)


def interleaved_rates(
    subject: Callable[[], object],
    baseline: Callable[[], object],
    ops: int,
    rounds: int = 7,
) -> tuple[float, float, float]:
    """Median ops/s of ``subject`` and ``baseline`` over interleaved rounds, and their ratio.

    The ratio is the median of per-round ratios, so a noisy round skews neither side.
    """
    subject(), baseline()  # warm up both paths
    subj, base, ratios = [], [], []
    for _ in range(rounds):
        s = rate(subject, ops)
        b = rate(baseline, ops)
        subj.append(s)
        base.append(b)
        ratios.append(s / b)
    return statistics.median(subj), statistics.median(base), statistics.median(ratios)


def percentile(samples: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (0-100) of ``samples`` by nearest rank."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


def print_table(title: str, rows: Sequence[tuple[str, str]]) -> None:
    """Print a two-column table of figure names and formatted values."""
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")


def bare_sqlite(
    path: Path, synchronous: str, *, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A plain ``sqlite3`` connection for a baseline: WAL journal, the given ``synchronous``,
    autocommit (``isolation_level=None``: transactions are the caller's ``BEGIN``/``COMMIT``).

    The same durability settings as ``SQLiteCheckpointStore``, without any of its
    work, so a ratio against it measures what the store adds. The caller creates its
    tables and closes the connection.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn
