"""Checkpoint ids: unique, fixed width, and sortable by creation time.

An id is 32 lowercase hex digits: 12 for the Unix time in milliseconds (48
bits, good until the year 10889) and 20 for an 80-bit sequence that starts at
a random value each millisecond and counts up within it. So ids compare like
their creation times, are strictly increasing within one process even when the
clock stands still or steps back, and ids made in other processes collide only
with negligible probability (ordering between processes within the same
millisecond is arbitrary: a caller that must sort after an id made elsewhere
passes it as ``after``).

The random starts come from a generator seeded from the operating system's
entropy once per process (and again in a forked child, which would otherwise
repeat its parent's draws), not from a system call per millisecond: with
thousands of sessions checkpointing at once, each such call let the other
threads take the interpreter and cost its caller a wait to get it back. The
starts need to be unpredictable only to the point of making collisions between
processes unlikely, not secret.
"""

from __future__ import annotations

import os
import random
import secrets
import threading
import time
from collections.abc import Callable

__all__ = ["PROCESS_IDS", "CheckpointIdGenerator", "new_checkpoint_id"]

_SEQ_BITS = 80
_SEQ_START_BITS = 79  # random start below half the range leaves room to count up


class _SeededBits:
    """``randbits`` from a ``random.Random`` seeded from ``secrets``, reseeded in a forked
    child. Thread-safe: ``getrandbits`` is one C call under the interpreter lock."""

    def __init__(self) -> None:
        self._random = random.Random(secrets.randbits(128))
        if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
            os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        self._random.seed(secrets.randbits(128))

    def __call__(self, bits: int) -> int:
        return self._random.getrandbits(bits)


_SEEDED_BITS = _SeededBits()


class CheckpointIdGenerator:
    """Makes checkpoint ids. Thread-safe: one lock guards the last (time, sequence) pair.

    Args:
        clock_ns: Wall clock in nanoseconds since the epoch (injectable for tests).
        randbits: Source of the random sequence start (injectable for tests); by
            default a generator seeded once from the system's entropy (see the
            module docstring).
    """

    def __init__(
        self,
        clock_ns: Callable[[], int] = time.time_ns,
        randbits: Callable[[int], int] | None = None,
    ) -> None:
        self._clock_ns = clock_ns
        self._randbits = _SEEDED_BITS if randbits is None else randbits
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_seq = 0

    def new(self, after: str | None = None) -> tuple[str, int]:
        """A fresh id and the clock reading (ns) it was made at.

        Args:
            after: An id (made by any process) the new one must sort after; one not
                in this module's format is ignored.
        """
        now_ns = self._clock_ns()
        ms = now_ns // 1_000_000
        floor = _parse(after)
        # The random start is drawn before the lock (read without it, ``_last_ms`` only
        # decides whether to draw): an injected source may block, and every thread making
        # an id would queue on the lock meanwhile.
        fresh = self._randbits(_SEQ_START_BITS) if ms > self._last_ms else None
        with self._lock:
            if floor is not None and floor > (self._last_ms, self._last_seq):
                self._last_ms, self._last_seq = floor  # count on from it
            if ms > self._last_ms:
                seq = fresh if fresh is not None else self._randbits(_SEQ_START_BITS)
            else:  # same millisecond, or the clock stepped back: keep counting
                ms = self._last_ms
                seq = self._last_seq + 1
                if seq >= 1 << _SEQ_BITS:  # pragma: no cover - needs 2**79 ids in one ms
                    ms, seq = ms + 1, 0
            self._last_ms, self._last_seq = ms, seq
        return f"{ms:012x}{seq:020x}", now_ns


def _parse(checkpoint_id: str | None) -> tuple[int, int] | None:
    """``(ms, sequence)`` of an id in this module's format, else ``None``."""
    if checkpoint_id is None or len(checkpoint_id) != 32:
        return None
    try:
        return int(checkpoint_id[:12], 16), int(checkpoint_id[12:], 16)
    except ValueError:
        return None


PROCESS_IDS = CheckpointIdGenerator()
"""The process's one generator: every id made here (a snapshot's, ``new_checkpoint_id``'s)
comes from it. Two generators would each draw their own random start in a millisecond,
so an id of one could sort before an id the other made earlier in that millisecond: a
host that gave a turn's snapshot an id after a copy's saw the session's next snapshot
sort before it, and came back from the older turn."""


def new_checkpoint_id(after: str | None = None) -> str:
    """A fresh checkpoint id from the process-wide generator, sorting after ``after`` when
    given (see ``CheckpointIdGenerator.new``). Thread-safe."""
    return PROCESS_IDS.new(after)[0]
