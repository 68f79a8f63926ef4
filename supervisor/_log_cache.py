"""What a store instance remembers of the message logs it wrote (``LogCache``): the
SQLite and PostgreSQL stores alike.

A save of a session whose log this instance wrote last, and whose messages extend
it, hashes and writes only the new bytes (``_sqlite_writes``, ``_pg_writes``). An
optimisation only: every entry is checked against the database's ``message_logs``
row before use (PostgreSQL: by the save function), so a missing or stale one just
means a full save.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from actors._record import record
from supervisor._message_log import KnownLog

__all__ = ["LOG_CACHE_SESSIONS", "CachedLog", "LogCache"]

LOG_CACHE_SESSIONS = 16_384
"""Most sessions a ``LogCache`` remembers. An entry costs about 460 bytes beside the log's
own bytes (which the byte budget bounds): 7.5 MiB for all of them. At 1,024, a host with
3,000 sessions in flight found the cached log of only a third of them on their next turn:
the others' saves left the batch to read their log's row and hash it again, and the
second of two bursts of 3,000 turns took 1.20-1.26 s instead of 1.02-1.08 s."""


@record
class CachedLog:
    """What this instance last wrote as a session's message log.

    Valid only while the database's ``message_logs`` row still says
    ``(gen, length, digest)`` (``digest`` as stored: an envelope when the
    store is encrypted, so a rewrite by anyone else changes it): then the log
    in the file is ``known.data``, and ``hasher`` holds the SHA-256 state
    after those bytes.
    """

    gen: int
    length: int
    digest: bytes
    known: KnownLog
    hasher: Any


class LogCache:
    """Per-session ``CachedLog`` entries, least recently used dropped beyond a byte
    budget or ``LOG_CACHE_SESSIONS`` sessions (a host may hold 100,000 sessions
    of which only the busy ones gain from a cached log).

    An optimisation only: a missing or stale entry just means a full save
    (every entry is checked against the database row before use). Thread-safe.
    """

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
            self.drop(sid, locked=True)
            if entry.length > self._budget:
                return
            self._entries[sid] = entry
            self._bytes += entry.length
            while self._bytes > self._budget or len(self._entries) > LOG_CACHE_SESSIONS:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.length

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def drop(self, sid: str, *, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                self.drop(sid, locked=True)
            return
        old = self._entries.pop(sid, None)
        if old is not None:
            self._bytes -= old.length
