"""How one save of the PostgreSQL store extends a session's message log (a ``LogPlan``).

A save either appends the bytes that follow the log it extends, or starts a
new log generation holding all its messages; either way it names the log row
it expects to find, and the save function writes nothing if the row is
another (see ``_pg_schema``). Pure. What the store remembers of each log is a
``_log_cache.CachedLog``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from supervisor._log_cache import CachedLog
from supervisor._message_log import SplitSnapshot

__all__ = [
    "LogPlan",
    "extend",
    "extend_cached",
    "new_log",
    "plan_for_row",
]


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
