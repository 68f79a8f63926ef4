"""The rows of one SQLite save, on the full path (``write``): the message log, the state
parts, the checkpoint row, and the prune after it.

Saves run inside their group-commit batch's transaction (``GroupCommit``); the
usual ones are written together by ``_saves_together``, every other one here.
The messages extend the session's log when they can: the log this store instance
wrote last (``_log_cache``) or, failing that, the log's bytes read back and
hashed; else they start a new log generation. Damage SQLite meets in the file
while a save reads an old log or deletes old rows (``_sqlite_schema.is_damage``)
fails that save alone, and the session's later saves avoid what met it: a new log,
no clean-up (``cleaning``).

The functions take the store (``WritingStore``) for its codec, ``keep_last`` and
what its saves met, read when called (a test may change ``keep_last``).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from actors import Snapshot
from supervisor._log_cache import CachedLog, LogCache
from supervisor._log_chunks import LogUnreadable, log_rows, value_limit, write_log
from supervisor._message_log import SplitSnapshot
from supervisor._row_codec import RowCodec
from supervisor._saves_together import CHECKPOINT_COLUMNS, CHECKPOINT_UPSERT, checkpoint_row
from supervisor._sqlite_cleanup import collect
from supervisor._sqlite_schema import is_damage, is_too_big, too_long

__all__ = ["WritingStore", "cleaning", "remember", "write"]

logger = logging.getLogger("supervisor.store")

_LOG_STATE_TEMPLATE = (
    "SELECT log.gen, log.length, log.digest, log.chunks,"
    " (SELECT COALESCE(MAX(gen), -1) + 1 FROM message_chunks WHERE session_id = ?1){}"
    " FROM (SELECT 1) LEFT JOIN message_logs AS log ON log.session_id = ?1"
)
_LOG_STATE = _LOG_STATE_TEMPLATE.format("")
"""A save's first read: the session's log row (NULLs when it has none) and its next free
log generation, in one statement."""
_LOG_STATE_COUNTED = _LOG_STATE_TEMPLATE.format(
    ", (SELECT count(*) FROM checkpoints WHERE session_id = ?1)"
)
"""``_LOG_STATE`` and the session's checkpoint count (a store with ``keep_last``)."""


class WritingStore(Protocol):
    """What this module uses of ``SQLiteCheckpointStore``."""

    path: str
    keep_last: int | None
    _rows: RowCodec
    _logs: LogCache
    _damaged_logs: set[tuple[str, int]]
    """The ``(session, log generation)`` whose reading met damage (``_log_unreadable``)."""
    _uncleanable: set[str]
    """The sessions whose clean-up met damage (``cleaning``)."""

    def _prune(
        self, db: sqlite3.Connection, sid: str, keep_last: int, saved_gen: int | None = None
    ) -> int: ...

    def _cleaning(self, sid: str) -> AbstractContextManager[bool]: ...

    def _remember(
        self, sid: str, cut: SplitSnapshot, gen: int, stored_digest: bytes, hasher: Any
    ) -> None: ...


def write(  # noqa: PLR0917 (the store's _write, which QueuedSave calls, and the store)
    store: WritingStore,
    snapshot: Snapshot,
    cut: SplitSnapshot,
    cached: CachedLog | None,
    refs: bytes | None,
    db: sqlite3.Connection,
) -> None:
    """The rows of one save, inside the transaction of its batch (see ``GroupCommit``).

    Raises:
        SnapshotTooLarge: a value of it is longer than SQLite stores (``too_long``).
    """
    sid = snapshot.session_id
    log: tuple[Any, ...] = (None, None, None, None)
    before: int | None = None  # the session's checkpoints before this one, if counted
    try:
        if cut.messages is not None:
            gen, length, log_digest, before = _append(store, db, sid, cut, cached)
            log = (gen, length, cut.count, log_digest)
        _put_parts(db, sid, snapshot.checkpoint_id, cut)
        db.execute(
            f"INSERT INTO checkpoints {CHECKPOINT_COLUMNS} VALUES"
            f" (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){CHECKPOINT_UPSERT}",
            checkpoint_row(store._rows, snapshot, cut, log, refs),
        )
    except sqlite3.DataError as exc:
        if not is_too_big(exc):
            raise
        raise too_long(sid, cut.size, db.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)) from exc
    if store.keep_last is not None and (before is None or before >= store.keep_last):
        with store._cleaning(sid) as clean:
            if clean:
                saved_gen = log[0] if cut.messages is not None else None
                store._prune(db, sid, store.keep_last, saved_gen)


def _put_parts(db: sqlite3.Connection, sid: str, cid: str, cut: SplitSnapshot) -> None:
    """Store each state part of the checkpoint unless the session has its bytes already.

    A part's ``newest`` is the newest checkpoint id that uses it: once every
    retained checkpoint is newer, none uses it (``_sqlite_cleanup``).
    """
    for part in cut.parts:
        known = db.execute(
            "UPDATE state_parts SET newest = max(newest, ?3) WHERE session_id = ?1 AND digest = ?2",
            (sid, part.digest, cid),
        ).rowcount
        if not known:
            db.execute(
                "INSERT INTO state_parts VALUES (?, ?, ?, ?)",
                (sid, part.digest, cid, part.data),
            )


def _append(
    store: WritingStore,
    db: sqlite3.Connection,
    sid: str,
    cut: SplitSnapshot,
    cached: CachedLog | None,
) -> tuple[int, int, bytes, int | None]:
    """Put the snapshot's messages in the log; returns (generation, length, digest,
    how many checkpoints the session had before this save, if ``keep_last`` is set).

    ``cached`` is what this instance last wrote for the session; it spares
    hashing the log again when the database row shows the log is still that
    one and ``split`` found the messages extend it. Any other case (another
    process or instance wrote since, the history was edited) takes the full
    path, which reads the truth from the row. The new state of the log is
    remembered for the next save; ``save`` forgets it if the commit fails.
    One statement reads the log's row, the next free generation and the
    checkpoint count (so that a save need not prune below ``keep_last``).
    """
    messages = cut.messages
    assert messages is not None
    size = messages.length
    rows = store._rows
    counted = store.keep_last is not None
    gen, length, stored_digest, appends, next_gen, *count = db.execute(
        _LOG_STATE_COUNTED if counted else _LOG_STATE, (sid,)
    ).fetchone()
    before: int | None = count[0] if counted else None
    largest = value_limit(db)
    if gen is not None:
        hasher: Any = None
        if (
            cached is not None
            and cut.extends
            and (cached.gen, cached.length, cached.digest) == (gen, length, stored_digest)
        ):
            hasher = cached.hasher.copy()  # the log is known.data, a prefix of messages
        elif length <= size:
            hasher = hashlib.sha256(messages.whole()[:length])
            rows.trust_keys(db, (stored_digest,))
            if hasher.digest() != rows.open_log_digest(sid, gen, length, stored_digest):
                hasher = None
        if hasher is not None and (sid, gen) in store._damaged_logs:
            hasher = None  # a save met damage in it: the messages go to a new log
        if hasher is not None:  # the log is a prefix: append the rest
            planned = log_rows(rows, sid, messages, gen, length, appends, hasher, largest)
            try:
                write_log(db, rows, planned, largest)
            except LogUnreadable as exc:
                _log_unreadable(store, sid, gen, exc)  # raises SQLite's damage
            else:
                store._remember(sid, cut, gen, planned.log[3], hasher)
                return gen, size, planned.digest, before
    # no log yet, or the messages do not extend it (or it is damaged): a new generation
    planned = log_rows(rows, sid, messages, next_gen, 0, 0, hashlib.sha256(), largest)
    write_log(db, rows, planned, largest)
    if next_gen:  # an older generation exists: it may be unused now
        with store._cleaning(sid) as clean:
            if clean:
                collect(db, sid)
    store._remember(sid, cut, next_gen, planned.log[3], planned.hasher)
    return next_gen, size, planned.digest, before


def _log_unreadable(store: WritingStore, sid: str, gen: int, exc: LogUnreadable) -> None:
    """Go on with a save whose message log ``gen`` met damage (``exc``) in a new
    generation: at once if the chunks decoded wrong, else (SQLite found the pages
    malformed: it then refuses the transaction's writes) by failing this save with
    SQLite's error and starting the session's next save in a new generation.

    Raises:
        sqlite3.DatabaseError: SQLite's damage error.
    """
    logger.warning("%s: %s; the session's saves go on in a new message log", store.path, exc)
    if exc.damage is not None:
        store._damaged_logs.add((sid, gen))
        raise exc.damage


@contextmanager
def cleaning(store: WritingStore, sid: str) -> Iterator[bool]:
    """Run a save's clean-up of the session's old rows (pruning, unused logs), unless
    one met damage before; yields whether to run it.

    Deleting rows in damaged pages fails (SQLite cannot free them) and SQLite then
    refuses the transaction's other writes, so that save fails; the session's
    later saves skip the clean-up and succeed, its old rows staying until the file
    is repaired (``doctor`` reports the damage).
    """
    if sid in store._uncleanable:
        yield False
        return
    try:
        yield True
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            logger.warning(
                "%s: damage met deleting old rows of session %r; its saves keep them "
                "from now on: %s",
                store.path,
                sid,
                exc,
            )
            store._uncleanable.add(sid)
        raise


def remember(  # noqa: PLR0917 (the store's _remember, and the store)
    store: WritingStore, sid: str, cut: SplitSnapshot, gen: int, stored_digest: bytes, hasher: Any
) -> None:
    """Remember the session's log as this save leaves it, for the session's next save."""
    messages = cut.messages
    assert messages is not None
    known = messages.known()  # split's bytes (immutable, no copy) or their lineage
    store._logs.put(sid, CachedLog(gen, messages.length, stored_digest, known, hasher))
