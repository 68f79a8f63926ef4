"""Helpers shared by the benchmark scripts: repeated timing, medians, percentiles, tables.

Machines here are shared and noisy, so every figure is a median over several
rounds and every ratio compares against a baseline measured in the same run,
rounds interleaved so that drift hits both sides alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

__all__ = ["interleaved_rates", "percentile", "print_table", "rate"]


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
