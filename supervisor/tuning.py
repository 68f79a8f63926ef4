"""``tune_interpreter``: the interpreter setting a process with many session threads wants;
``freeze_startup_objects``: full garbage collections that skip what the imports made;
``pin_to_one_cpu``: every thread of the process on one CPU as batch work, so that threads
waiting for the GIL neither fight over it from other CPUs nor wake only to find it held.

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

One CPU, as batch work: only one thread runs Python at a time, whatever the CPU
count. A thread the kernel wakes (its model call returned, a message arrived) on
another CPU runs there at once, takes the GIL's mutex, finds the GIL held and
sleeps again; on the same CPU, the kernel preempts the thread holding the GIL for
it, to the same end. Either way a turn costs each of its wake-ups twice.
``pin_to_one_cpu`` puts every thread on one CPU and schedules them as batch work
(``SCHED_BATCH``: a woken thread waits until the running one blocks, by which
time that one has let go of the GIL). With 3,000 turns in flight on this 2-core
machine (``bench_concurrency``, interleaved rounds) a turn took about 5.3
voluntary context switches spread over both CPUs, 5.3 and 1 preemption pinned,
and as few as 3 pinned as batch work; the runs' medians were 0.99 s spread,
0.82 s pinned, 0.78 s pinned as batch work, and the spread runs varied twice as
much. At 100 sessions it made no difference. What the process gives up is C
code running beside Python on another CPU (SQLite writing pages, TLS): for a
process of many sessions that is little against what it ends. Two such
processes on one machine (a host per CPU) should be given different CPUs.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import sys
import threading
from typing import Final

__all__ = [
    "FULL_COLLECTION_EVERY",
    "HINT_THREADS",
    "SWITCH_INTERVAL",
    "Scheduling",
    "freeze_startup_objects",
    "hint_if_untuned",
    "pin_to_one_cpu",
    "scheduling_before_pin",
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

_pinning = threading.Lock()
_before: Scheduling | None = None  # how threads ran before the first pin_to_one_cpu, if any


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


@dataclasses.dataclass(frozen=True, slots=True)
class Scheduling:
    """Where and how the kernel ran this process's threads before ``pin_to_one_cpu``.

    Attributes:
        cpus: The CPUs they could run on.
        policy: Their scheduling policy (``os.SCHED_OTHER`` as a rule).
        priority: Their static priority under ``policy`` (0 but for a real-time one).
    """

    cpus: frozenset[int]
    policy: int
    priority: int = 0

    def apply(self, thread: int) -> None:
        """Make ``thread`` (a kernel thread id; 0 for the calling one) run as described."""
        os.sched_setaffinity(thread, self.cpus)
        os.sched_setscheduler(thread, self.policy, os.sched_param(self.priority))


def pin_to_one_cpu(cpu: int | None = None, *, batch: bool = True) -> int:
    """Run every thread of this process on one CPU, ``cpu`` (by default the one the calling
    thread runs on now), and with ``batch`` as batch work (``SCHED_BATCH``: a thread the
    kernel wakes waits for the running one to block instead of preempting it); the threads
    started from then on inherit both. Returns that CPU.

    For a process of thousands of session threads, which fight over the GIL from several
    CPUs, and wake only to find it held (see the module docstring). Linux only. Call it
    once at start, before the host starts its sessions (a thread that an unpinned thread
    starts while this runs may keep the old setting). Worker processes a host starts
    afterwards run as this process did before (``scheduling_before_pin``): each is a GIL
    of its own, best on a CPU of its own; a ``worker_initializer`` may pin one in turn.

    Raises:
        NotImplementedError: the platform cannot confine a thread to a CPU (only Linux has
            ``os.sched_setaffinity``); nothing changed.
        ValueError: ``cpu`` is not a CPU this process may run on (the message lists them);
            nothing changed.
    """
    global _before  # noqa: PLW0603 (the process's own setting, recorded once)
    if not hasattr(os, "sched_setaffinity"):
        raise NotImplementedError(
            "pin_to_one_cpu needs os.sched_setaffinity, which only Linux has; "
            "on this platform leave the process on every CPU"
        )
    with _pinning:
        before = _before or Scheduling(
            frozenset(os.sched_getaffinity(0)),
            os.sched_getscheduler(0),
            os.sched_getparam(0).sched_priority,
        )
        if cpu is None:
            cpu = _current_cpu(before.cpus)
        elif isinstance(cpu, bool) or not isinstance(cpu, int) or cpu not in before.cpus:
            raise ValueError(
                f"cpu must be one of the CPUs this process may run on, "
                f"{sorted(before.cpus)}; got {cpu!r}"
            )
        pinned = (
            Scheduling(frozenset({cpu}), os.SCHED_BATCH)
            if batch
            else Scheduling(frozenset({cpu}), before.policy, before.priority)
        )
        for thread in _thread_ids():
            try:
                pinned.apply(thread)
            except ProcessLookupError:  # the thread ended meanwhile
                continue
        _before = before
    return cpu


def scheduling_before_pin() -> Scheduling | None:
    """How this process's threads ran before ``pin_to_one_cpu``, or ``None`` if it was never
    called. Thread-safe."""
    with _pinning:
        return _before


def _current_cpu(allowed: frozenset[int]) -> int:
    """The CPU the calling thread runs on now (``/proc/thread-self/stat``'s 39th field), or
    the lowest of ``allowed`` where that cannot be read."""
    try:
        with open("/proc/thread-self/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()  # the name may hold spaces
        cpu = int(fields[36])  # field 39 counted from 1; the split starts at field 3
    except (OSError, ValueError, IndexError):
        return min(allowed)
    return cpu if cpu in allowed else min(allowed)


def _thread_ids() -> list[int]:
    """The kernel's ids of every thread of this process (``/proc/self/task``): those that
    ``threading`` knows and any other."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the threads that ``threading`` started
        return [t.native_id for t in threading.enumerate() if t.native_id is not None]


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
        "supervisor.tune_interpreter() once at start (sessionvisor serve does), and "
        "consider supervisor.pin_to_one_cpu() (serve --cpu N): their turns run one at a "
        "time on the interpreter lock anyway, and on one CPU they stop waking each other "
        "to no purpose",
        threading.active_count(),
        sys.getswitchinterval(),
    )
