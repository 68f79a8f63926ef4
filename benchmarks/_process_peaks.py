"""Peak thread count and resident memory of this process while a block of code runs.

Both come from ``/proc/self/status`` (Linux): ``Threads`` counts every OS thread of
the process (Python's, and any a C library started), ``VmRSS`` is the resident
set. A sampler thread reads them every ``interval`` seconds; the peaks are the
largest values it saw, so a spike shorter than the interval can be missed. The
sampler is itself one of the threads counted.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Self

__all__ = ["PeakSampler", "ProcessStatus", "process_status"]


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    """One reading of ``/proc/self/status``: OS threads, and resident set in bytes."""

    threads: int
    rss: int


def process_status(pid: int | None = None) -> ProcessStatus:
    """Read the thread count and resident set of this process (or of ``pid``) now.

    Raises:
        OSError: no ``/proc/self/status`` (not Linux).
        RuntimeError: it lacks a ``Threads`` or ``VmRSS`` line.
    """
    threads = rss = None
    path = "/proc/self/status" if pid is None else f"/proc/{pid}/status"
    with open(path, encoding="ascii") as status:
        for line in status:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024  # reported in kB
    if threads is None or rss is None:
        raise RuntimeError("/proc/self/status has no Threads or VmRSS line")
    return ProcessStatus(threads, rss)


class PeakSampler:
    """Samples ``process_status`` on a thread of its own while the ``with`` block runs.

    ``peak`` holds the largest thread count and the largest resident set seen
    (each on its own; they need not come from one sample), including one sample
    taken on entry and one on exit. Not thread-safe: one thread enters and
    leaves it and reads ``peak`` after the block; the sampler thread is joined
    on exit.

    Args:
        interval: Seconds between samples.
        pid: Sample that process instead of this one.
    """

    def __init__(self, interval: float = 0.002, pid: int | None = None) -> None:
        self.interval = interval
        self.pid = pid
        self.peak = process_status(pid)
        self.own_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-sampler", daemon=True)

    def _sample(self) -> None:
        now = process_status(self.pid)
        self.peak = ProcessStatus(max(self.peak.threads, now.threads), max(self.peak.rss, now.rss))

    def _run(self) -> None:
        start = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self._sample()
        finally:
            self.own_cpu = time.thread_time() - start

    def __enter__(self) -> Self:
        self.peak = process_status(self.pid)  # before the sampler starts: one writer at a time
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
