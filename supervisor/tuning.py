"""``tune_interpreter``: the interpreter setting a process with many session threads wants;
``freeze_startup_objects``: full garbage collections that skip what the imports made.

Every running session owns a thread. When hundreds of them become runnable at
once (their model calls return together), each thread waiting for the GIL
wakes every switch interval and, if the holder has not changed meanwhile,
forces a hand-over. At CPython's default of 5 ms, with thousands of waiters,
the process spends its time on those wake-ups and hand-overs (more kernel time
than Python time) and a thread that submits work is starved for up to seconds.
Session threads give the GIL up on their own at every model call, lock and
store write, so a longer interval costs them little.

How much longer: 50 ms removed the thrashing of a typical run but not the
stalls. With 3,000 turns in flight, the waiters' wake-ups (3,000 every 50 ms)
take the CPU from the thread that holds the GIL, which then holds it longer,
so more threads wait: in 7 of 62 processes a run of about 1 s took 2.2 s to
over 40 s, nearly all of it kernel time, with every session thread in a futex
wait. At 200 ms none of 50 stalled, and the others were a little faster
(``benchmarks/bench_concurrency.py``'s workload: 3,000 sessions, one 200 ms
turn each submitted with ``host.futures.send``; medians 1.03-1.04 s against
1.10-1.11 s at 50 ms and 2.4-8.5 s at 5 ms). The price of a
longer interval is paid by a thread that runs Python for long without
blocking (a CPU-bound tool): it may keep the others waiting that long at a time.

The interval is one setting of the whole process, so a library does not
change it behind its user's back: the ``sessionvisor serve`` command (which
owns its process) applies ``SWITCH_INTERVAL`` by default; a program of your
own calls ``tune_interpreter()`` once at start. Worker processes take the
interval of the host's process when the host starts them. A host that starts
a session while its process runs ``HINT_THREADS`` threads or more at a shorter
interval says so in a warning, once per process.

Garbage collection: a full collection walks every object the collector
tracks, and every thread waits it out. After sessionvisor's and the server's
imports a process tracks about 63,000 objects (modules, classes, their data)
and a full collection took 39 ms here: in ``bench_gateway``'s 16-client round
trips, such pauses made the gateway's p99 3.5x the in-process call's.
``freeze_startup_objects()`` moves what exists at that point out of the
collector's reach (``gc.freeze``); a full collection then took microseconds,
and the p99 ratio fell to about 2 (two interleaved pairs of runs). ``serve``
calls it once its imports and templates are loaded, before any session starts;
a program of your own may do the same.

Full collections also stall a process of thousands of session threads. With
3,000 turns in flight (``bench_concurrency``'s workload, tuned), two full
collections ran in every burst, walking the sessions' objects (about 124
each) and taking 0.3-2.6 s of a run's 2.5-4.7 s; in one run a collection
took 62 s, nearly all of it kernel time (not yet traced; likely the
finalizers a collection runs, Python code that gives the GIL up to the
thousands of threads waiting for it). ``tune_interpreter`` therefore raises
the collector's third threshold from 10 to ``FULL_COLLECTION_EVERY`` (100):
full collections ten times rarer.
Six interleaved pairs of runs: none ran during a burst, medians 2.21 s against
2.94 s, 490 against 655 us of user time per turn. Garbage cycles are freed
less often; objects that no cycle holds are freed at once as ever.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from typing import Final

__all__ = [
    "FULL_COLLECTION_EVERY",
    "HINT_THREADS",
    "SWITCH_INTERVAL",
    "freeze_startup_objects",
    "hint_if_untuned",
    "tune_interpreter",
]

logger = logging.getLogger("supervisor.host")

SWITCH_INTERVAL: Final = 0.2
"""Seconds a thread may hold the GIL while another waits for it, for many session threads."""

FULL_COLLECTION_EVERY: Final = 100
"""The collector's third threshold ``tune_interpreter`` sets at least: younger collections
between two full ones (Python's default is 10)."""

HINT_THREADS = 1000
"""Threads in the process from which a session start at a shorter interval is warned about."""

_HINTED = threading.Lock()  # taken, and never released, by the one warning of the process


def tune_interpreter(switch_interval: float = SWITCH_INTERVAL) -> float:
    """Set the interpreter's switch interval (``sys.setswitchinterval``) for a process that
    runs many sessions, and make full garbage collections rarer (the collector's third
    threshold raised to ``FULL_COLLECTION_EVERY``, never lowered; see the module
    docstring); return the previous interval (to restore it, pass it back; the
    thresholds are restored with ``gc.set_threshold``).

    Raises:
        ValueError: ``switch_interval`` is not a positive number of seconds (at most 1).
    """
    if (
        isinstance(switch_interval, bool)
        or not isinstance(switch_interval, int | float)
        or not 0 < switch_interval <= 1
    ):
        raise ValueError(
            f"switch_interval must be seconds in (0, 1], got {switch_interval!r}; "
            f"{SWITCH_INTERVAL} suits a host with thousands of sessions"
        )
    previous = sys.getswitchinterval()
    sys.setswitchinterval(float(switch_interval))
    young, middle, full = gc.get_threshold()
    if full < FULL_COLLECTION_EVERY:
        gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    return previous


def freeze_startup_objects() -> int:
    """Collect garbage once, then exclude every object the collector tracks now from all
    later collections (``gc.freeze``); return how many are frozen.

    Call it once, after the imports (and templates) are loaded and before sessions
    start: what is frozen then lives as long as the process anyway, while a session's
    objects, made later, stay collectable. A frozen object is still freed when its
    last reference goes; only as part of a garbage cycle would it stay.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def hint_if_untuned() -> None:
    """Warn, once per process, that ``tune_interpreter()`` is advised: called as a session
    starts, it warns when the process runs ``HINT_THREADS`` threads or more at a switch
    interval shorter than ``SWITCH_INTERVAL``. Thread-safe; costs a thread count."""
    tuned = sys.getswitchinterval() > SWITCH_INTERVAL - 1e-6  # Python keeps microseconds
    if tuned or threading.active_count() < HINT_THREADS:
        return
    if not _HINTED.acquire(blocking=False):
        return
    logger.warning(
        "this process runs %d threads at a GIL switch interval of %.3f s: with thousands of "
        "session threads, Python's default makes them thrash; call "
        "supervisor.tune_interpreter() once at start (sessionvisor serve does)",
        threading.active_count(),
        sys.getswitchinterval(),
    )
