"""What the PostgreSQL store remembers of each session's message log, and how one save
extends it (a ``LogPlan``).

A save either appends the bytes that follow the log it extends, or starts a
new log generation holding all its messages; either way it names the log row
it expects to find, and the save function writes nothing if the row is
another (see ``_pg_schema``). Pure, apart from ``LogCache``'s lock.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from supervisor._message_log import KnownLog, SplitSnapshot

__all__ = [
    "CachedLog",
    "LogCache",
    "LogPlan",
    "extend",
    "extend_cached",
    "new_log",
    "plan_for_row",
]

LOG_CACHE_SESSIONS = 1024
"""Most sessions a ``LogCache`` remembers."""


@dataclass(frozen=True, slots=True)
class CachedLog:
    """What this instance last wrote as a session's message log: valid while the
    database's ``message_logs`` row says ``(gen, length, digest)``, which the save
    function checks (else it writes nothing and the save reads the row)."""

    gen: int
    length: int
    digest: bytes
    known: KnownLog
    hasher: Any  # hashlib's sha256 state after the log's bytes


class LogCache:
    """``CachedLog`` per session, least recently used out beyond a byte budget or
    ``LOG_CACHE_SESSIONS`` sessions. An optimisation only. Thread-safe."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._bytes = 0
        self._entries: OrderedDict[str, CachedLog] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sid: str) -> CachedLog | None:
        with self._lock:
            entry = self._entries.get(sid)
            if entry is not None:
                self._entries.move_to_end(sid)
            return entry

    def put(self, sid: str, entry: CachedLog) -> None:
        with self._lock:
            self._drop(sid)
            if entry.length > self._budget:
                return
            self._entries[sid] = entry
            self._bytes += entry.length
            while self._bytes > self._budget or len(self._entries) > LOG_CACHE_SESSIONS:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.length

    def drop(self, sid: str) -> None:
        with self._lock:
            self._drop(sid)

    def _drop(self, sid: str) -> None:
        old = self._entries.pop(sid, None)
        if old is not None:
            self._bytes -= old.length

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


@dataclass(frozen=True, slots=True)
class LogPlan:
    """How one save writes its messages: the log row it expects, what it appends where."""

    gen: int
    expect: tuple[int, int, bytes] | None  # (gen, length, digest) of the row, None: no row
    append_at: int
    append: bytes | memoryview
    digest: bytes
    hasher: Any


def new_log(cut: SplitSnapshot, expect: tuple[int, int, bytes] | None) -> LogPlan:
    """A new log generation holding all the messages, after the row ``expect`` (or none)."""
    messages = cut.messages
    assert messages is not None
    whole = messages.whole()
    hasher = hashlib.sha256(whole)
    gen = 0 if expect is None else expect[0] + 1
    return LogPlan(gen, expect, 0, whole, hasher.digest(), hasher)


def extend(
    cut: SplitSnapshot,
    *,
    gen: int,
    length: int,
    expect: tuple[int, int, bytes],
    hasher: Any,
) -> LogPlan:
    """Append what follows the log's ``length`` bytes (``hasher`` holds their state); the
    chunks merge afterwards, on the server (``merge_log_chunks``)."""
    messages = cut.messages
    assert messages is not None
    added = messages.after(length)
    hasher.update(added)
    return LogPlan(gen, expect, length, added, hasher.digest(), hasher)


def extend_cached(cut: SplitSnapshot, cached: CachedLog) -> LogPlan | None:
    """A plan from what this instance last wrote, when the messages extend it; else ``None``
    (the row must be read)."""
    if not cut.extends:
        return None
    expect = (cached.gen, cached.length, cached.digest)
    return extend(
        cut,
        gen=cached.gen,
        length=cached.length,
        expect=expect,
        hasher=cached.hasher.copy(),
    )


def plan_for_row(cut: SplitSnapshot, row: tuple[Any, ...] | None) -> LogPlan:
    """A plan against the session's ``message_logs`` row ``(gen, length, digest)``
    as read: extend it when it is a prefix of the messages (checked by its digest), else
    start a new generation after it."""
    messages = cut.messages
    assert messages is not None
    if row is None:
        return new_log(cut, None)
    gen, length, digest = row[0], row[1], bytes(row[2])
    expect = (gen, length, digest)
    if length <= messages.length:
        hasher = hashlib.sha256(messages.whole()[:length])
        if hasher.digest() == digest:
            return extend(cut, gen=gen, length=length, expect=expect, hasher=hasher)
    return new_log(cut, expect)
