"""How a save appends to its session's message log in SQLite, and when chunks merge.

A log generation is stored as chunks (``message_chunks`` rows keyed by their
byte offset). Every save that adds messages appends one chunk of the new bytes.
So that a long session's log neither grows to thousands of rows (a load reads
them all) nor gets rewritten whole again and again (what a save would then cost
would grow with the conversation), the chunks merge as the digits of a base-8
counter carry: the log row counts the saves that appended to its generation
(``message_logs.chunks``), and the append numbered ``k`` merges with the
``7 * t`` chunks before it, where ``8 ** t`` is the highest power of 8 that
divides ``k``. A generation of ``k`` appends then has as many chunks as the
digit sum of ``k`` in base 8 (at most 7 per power of 8: 15 for 20,000
appends), and each byte is rewritten once per power of 8 the log has passed
(at most 4 times by 20,000 appends; the stores before this one rewrote the
whole log every 32 appends, so each byte hundreds of times). Seven appends in
eight merge nothing.

A merge reads the chunks it takes back from the database (inside the save's
transaction, so they are what the log row describes) instead of joining the
session's whole history in memory. Chunks that cannot be read back whole
raise ``LogUnreadable`` before anything is written, and the session's saves go
on in a new generation of the messages they hold, so that its new checkpoints
do not depend on the damaged log: at once when the chunks read but do not
decode, from its next save when SQLite found their pages malformed (it then
refuses the transaction's writes, so that save fails). Older checkpoints of
the generation keep loading: a load reads the chunks that start before its
length and cuts the last one (``_message_log.assemble``). A store written
before this counted chunks, not appends, in that column; read as a count of
appends it only makes the first merges take fewer or more chunks than the
counter says, and any run of trailing chunks may merge.

SQLite stores no value longer than its length limit (``SQLITE_LIMIT_LENGTH``, 10**9
bytes by default; ``value_limit``). A merge takes only as many of its chunks, newest
first, as fit in one value with the new bytes (none, when they alone fill it), and new
bytes longer than a value are stored as several chunks; so a session whose log grows past
the limit goes on saving (a merge that would have exceeded it failed that save, and every
later one, which tried the same merge again).

The PostgreSQL store follows the same rule (``merges``), merging on the server
(``merge_log_chunks``, its schema version 4) after a save whose append carries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from actors import SnapshotDecodeError
from actors._record import record
from supervisor._sqlite_schema import is_damage
from supervisor.errors import EncryptionKeyError

if TYPE_CHECKING:
    from supervisor._message_log import MessageBytes
    from supervisor._row_codec import RowCodec

__all__ = [
    "FANOUT",
    "LOG_UPSERT",
    "LogRows",
    "LogUnreadable",
    "log_rows",
    "merges",
    "value_limit",
    "write_log",
]

FANOUT = 8
"""The base of the counter by which a log's chunks merge (see the module docstring)."""

LOG_UPSERT = (
    " ON CONFLICT (session_id) DO UPDATE SET gen = excluded.gen, length = excluded.length,"
    " digest = excluded.digest, chunks = excluded.chunks"
)


_VALUE_SLACK = 1024
"""Bytes kept free under SQLite's length limit for what an envelope adds to a chunk."""


def value_limit(db: sqlite3.Connection) -> int:
    """The most message bytes one chunk of ``db`` may hold: SQLite's length limit on the
    connection, less room for an encryption envelope."""
    return max(1, db.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) - _VALUE_SLACK)


class LogUnreadable(Exception):
    """The chunks a save was to merge with cannot be read back whole (see the module
    docstring); nothing was written. Private: the save starts a new generation.

    ``damage`` is SQLite's error when it found their pages malformed (it then refuses
    the transaction's writes), ``None`` when they read but did not decode.
    """

    def __init__(self, problem: str, damage: sqlite3.DatabaseError | None = None) -> None:
        super().__init__(problem)
        self.damage = damage


def merges(appends: int) -> int:
    """How many chunks before it the append numbered ``appends`` (from 1) merges with."""
    carried = 0
    while appends > 0 and appends % FANOUT == 0:
        appends //= FANOUT
        carried += FANOUT - 1
    return carried


@record
class LogRows:
    """What a save writes to its session's message log, on either path."""

    merge: int  # chunks before the new bytes that go into one chunk with them (0: none)
    chunk: tuple[Any, ...] | None  # the message_chunks row of the new bytes, if any (its
    # stored data None when they are due to merge or longer than one value: ``write_log``
    # stores them either way)
    added: bytes | memoryview  # the new bytes (what a merge appends to the chunks it reads)
    log: tuple[Any, ...]  # the message_logs row: (session, gen, length, stored digest, appends)
    digest: bytes  # SHA-256 of the whole log
    hasher: Any  # its state after the whole log, for the next save


def log_rows(  # noqa: PLR0917 (private; both callers pass every part)
    rows: RowCodec,
    sid: str,
    messages: MessageBytes,
    gen: int,
    length: int,
    appends: int,
    hasher: Any,
    largest: int,
) -> LogRows:
    """The log rows of a save whose messages extend generation ``gen`` of the log:
    ``length`` bytes so far, written by ``appends`` appends, with ``hasher`` at the state
    after those bytes (a new generation: 0, 0 and an empty SHA-256); ``largest``: the
    connection's ``value_limit``."""
    size = messages.length
    added = messages.after(length)
    hasher.update(added)
    chunk, merge = None, 0
    if size > length:
        appends += 1
        merge = merges(appends)
        alone = not merge and len(added) <= largest
        data = rows.chunk(sid, gen, length, bytes(added)) if alone else None
        chunk = (sid, gen, length, data)
    digest = hasher.digest()
    log = (sid, gen, size, rows.log_digest(sid, gen, size, digest), appends)
    return LogRows(merge, chunk, added, log, digest, hasher)


def write_log(db: sqlite3.Connection, rows: RowCodec, planned: LogRows, largest: int) -> None:
    """Write one save's ``LogRows`` (a save alone: a merge, or new bytes longer than one
    value, ``largest`` bytes, take statements of their own).

    Raises:
        LogUnreadable: the chunks to merge cannot be read back; nothing was written.
    """
    chunk = planned.chunk
    if chunk is not None:
        if chunk[3] is not None:
            db.execute("INSERT INTO message_chunks VALUES (?, ?, ?, ?)", chunk)
        else:
            db.executemany(
                "INSERT INTO message_chunks VALUES (?, ?, ?, ?)",
                _new_chunks(db, rows, planned, largest),
            )
    db.execute(f"INSERT INTO message_logs VALUES (?, ?, ?, ?, ?){LOG_UPSERT}", planned.log)


def _new_chunks(
    db: sqlite3.Connection, rows: RowCodec, planned: LogRows, largest: int
) -> list[tuple[Any, ...]]:
    """The chunk rows of the new bytes: one merged with as many of the ``planned.merge``
    chunks before them as fit in ``largest`` bytes (those are deleted), or, when none do,
    the new bytes alone in pieces of at most ``largest`` bytes.

    Raises:
        LogUnreadable: the chunks to merge cannot be read back whole (nothing deleted):
            the damaged log stays as damaged as it was, for the loads that meet it.
    """
    assert planned.chunk is not None
    sid, gen, start = planned.chunk[:3]
    added = planned.added
    room = largest - len(added)
    taken = _fitting(db, sid, gen, start, planned.merge, room) if planned.merge else 0
    if taken:
        return [_merged(db, rows, planned, taken)]
    return [
        (sid, gen, start + at, rows.chunk(sid, gen, start + at, bytes(added[at : at + largest])))
        for at in range(0, len(added), largest)
    ]


def _fitting(  # noqa: PLR0917 (private; one caller)
    db: sqlite3.Connection, sid: str, gen: int, end: int, merge: int, room: int
) -> int:
    """How many of the ``merge`` chunks before byte ``end``, newest first, hold ``room``
    bytes at most together (a chunk's size is where the next one starts, less its own
    start: no data is read).

    Raises:
        LogUnreadable: there are none (the log lost them) or SQLite finds their pages
            damaged.
    """
    if room <= 0:
        return 0
    try:
        starts = db.execute(
            "SELECT start FROM message_chunks WHERE session_id = ? AND gen = ?"
            " AND start < ? ORDER BY start DESC LIMIT ?",
            (sid, gen, end, merge),
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        raise LogUnreadable(f"message log {gen} of session {sid!r}: {exc}", exc) from exc
    if not starts or not all(isinstance(start, int) for (start,) in starts):
        raise LogUnreadable(f"message log {gen} of session {sid!r} has damaged chunks")
    taken = 0
    for (start,) in starts:
        if end - start > room:
            break
        room -= end - start
        end = start
        taken += 1
    return taken


def _merged(
    db: sqlite3.Connection, rows: RowCodec, planned: LogRows, taken: int
) -> tuple[Any, ...]:
    """Delete the ``taken`` chunks before the new bytes and return the row of one chunk
    holding them and the new bytes.

    Raises:
        LogUnreadable: those chunks cannot be read back whole (nothing deleted).
    """
    assert planned.chunk is not None
    sid, gen, start = planned.chunk[:3]
    try:
        found = db.execute(
            "SELECT start, data FROM message_chunks WHERE session_id = ? AND gen = ?"
            " AND start < ? ORDER BY start DESC LIMIT ?",
            (sid, gen, start, taken),
        ).fetchall()
        pieces = _contiguous(db, rows, sid, gen, start, found[::-1])
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        raise LogUnreadable(f"message log {gen} of session {sid!r}: {exc}", exc) from exc
    if pieces is None:
        raise LogUnreadable(f"message log {gen} of session {sid!r} has damaged chunks")
    first = found[-1][0]
    db.execute(
        "DELETE FROM message_chunks WHERE session_id = ? AND gen = ? AND start >= ? AND start < ?",
        (sid, gen, first, start),
    )
    data = b"".join([*pieces, planned.added])
    return (sid, gen, first, rows.chunk(sid, gen, first, data))


def _contiguous(  # noqa: PLR0917 (private; one caller)
    db: sqlite3.Connection,
    rows: RowCodec,
    sid: str,
    gen: int,
    end: int,
    found: Sequence[tuple[int, Any]],
) -> list[bytes] | None:
    """The opened bytes of ``found`` (oldest first) if they cover up to ``end`` without a gap."""
    if not found:
        return None
    pieces, offset = [], found[0][0]
    for start, stored in found:
        try:
            rows.trust_keys(db, (stored,))  # as a load does: a key recorded since we opened
            data = rows.open_chunk(sid, gen, start, stored)
        except (SnapshotDecodeError, EncryptionKeyError):
            return None
        if start != offset or not isinstance(data, bytes):
            return None
        pieces.append(data)
        offset += len(data)
    return pieces if offset == end else None
