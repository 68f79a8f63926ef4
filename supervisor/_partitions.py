"""``SessionSupervisors``: a host's sessions spread over several root supervisors.

A supervisor handles one request at a time on its own thread, and a session's
start runs there (its checkpoint load, its plugins' ``session_start``). Under a
single root supervisor, one slow ``session_start`` held up every other start,
reactivation and crash restart of the host for as long as it ran. Each session
belongs to one of ``PARTITIONS`` supervisors, chosen by a stable hash of its id,
so a slow start holds up only the sessions of its own partition. A session's
requests still go to one supervisor, in order, as OTP's ``one_for_one`` needs.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Any

import pykka

from supervisor.handle import SupervisorHandle

__all__ = ["PARTITIONS", "SessionSupervisors", "partition_of"]

PARTITIONS = 16
"""Root supervisors (and so supervisor threads) per host."""


def partition_of(session_id: str, count: int) -> int:
    """The partition of ``session_id`` among ``count``: stable across processes and
    runs (CRC-32 of its UTF-8 bytes, unlike ``hash``, which is salted per process)."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % count


class SessionSupervisors:
    """``count`` root supervisors, each started with ``options`` (as
    ``SupervisorHandle.start``) and named ``{name}-{index}``. Thread-safe: it only
    picks a handle, and handles are thread-safe.

    Raises:
        ValueError: ``count`` is below 1.
    """

    def __init__(self, count: int = PARTITIONS, *, name: str, **options: Any) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1 supervisor, got {count!r}")
        self._handles: list[SupervisorHandle] = []
        try:
            for index in range(count):
                handle = SupervisorHandle.start(name=f"{name}-{index}", **options)
                self._handles.append(handle)
        except BaseException:
            self.stop()
            raise

    def of(self, session_id: str) -> SupervisorHandle:
        """The supervisor of ``session_id``'s partition."""
        return self._handles[partition_of(session_id, len(self._handles))]

    def is_alive(self) -> bool:
        """Whether any of the supervisors still runs."""
        return any(handle.is_alive() for handle in self._handles)

    def stop(self) -> list[str]:
        """Stop every supervisor and its sessions, all partitions at once (each stops its
        sessions concurrently; see ``SupervisorHandle.stop``); the ids of the sessions
        abandoned because they did not stop in time.

        Every partition is stopped even if one fails; the first failure is raised
        then, a ``pykka.Timeout`` (a partition busy past its timeout, which stops its
        sessions once it is free) only if nothing else failed.
        """
        outcomes: list[list[str] | BaseException] = [[] for _ in self._handles]

        def stop_one(index: int) -> None:
            try:
                outcomes[index] = self._handles[index].stop(concurrently=True)
            except BaseException as exc:  # raised below, on the caller's thread
                outcomes[index] = exc

        _run_all(stop_one, len(self._handles))
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        failures.sort(key=lambda exc: isinstance(exc, pykka.Timeout))
        if failures:
            raise failures[0]
        return [sid for outcome in outcomes if isinstance(outcome, list) for sid in outcome]


def _run_all(work: Callable[[int], None], count: int) -> None:
    """Run ``work(0) … work(count - 1)`` at once, each on a thread of its own, and wait
    for all; at interpreter exit, where no thread may start, the rest run here in turn."""
    threads: list[threading.Thread] = []
    for index in range(count):
        thread = threading.Thread(
            target=work, args=(index,), name=f"sessionvisor-stop-{index}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down
            for rest in range(index, count):
                work(rest)
            break
        threads.append(thread)
    for thread in threads:
        thread.join()
