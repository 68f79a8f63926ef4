"""Reading a SQLite store: a checkpoint's rows (``read``), then the snapshot they hold
(``decode``); the listings (``checkpoint_rows``, ``session_ids``).

``read`` runs inside the load's transaction and reads the checkpoint row, the
message-log chunks its prefix covers and the state parts it names; damage SQLite
meets in those pages is the checkpoint's (``SnapshotDecodeError``, naming the file),
so that a host falls back to an older checkpoint. ``decode`` runs outside the
store's lock: it opens the row codec's values, checks the seal, the log's digest and
each part's, and joins them into the snapshot saved.
"""

from __future__ import annotations

import sqlite3
from typing import Any, NamedTuple

from actors import MigrationRegistry, Snapshot, SnapshotDecodeError
from supervisor._message_log import assemble, check_identity, in_checkpoint, join
from supervisor._row_codec import RowCodec
from supervisor._sqlite_schema import damaged, is_damage
from supervisor._state_parts import checked, read_refs
from supervisor.errors import CheckpointNotFound

__all__ = ["StoredCheckpoint", "checkpoint_rows", "decode", "read", "session_ids"]

_ROW = "checkpoint_id, body, log_gen, log_bytes, log_count, log_digest, body_check, parts"


class StoredCheckpoint(NamedTuple):
    """A checkpoint's rows as ``read`` found them, still encoded."""

    checkpoint_id: str
    stored: list[Any]
    """The checkpoint row's columns after its id (``_ROW``)."""
    chunks: list[Any]
    """``(start, data)`` of the message-log chunks its prefix covers, in order."""
    parts: dict[bytes, object]
    """The stored state parts it names, by digest (checked by ``decode``)."""


def read(
    db: sqlite3.Connection, rows: RowCodec, path: str, sid: str, checkpoint_id: str | None
) -> StoredCheckpoint:
    """The rows of the session's checkpoint (``None``: its newest), read in the load's
    transaction on ``db`` (of the store at ``path``).

    Raises:
        CheckpointNotFound: the session has no such checkpoint.
        SnapshotDecodeError: SQLite found the pages it lies in damaged.
    """
    try:
        return _read(db, rows, sid, checkpoint_id)
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        which = "newest" if checkpoint_id is None else repr(checkpoint_id)
        raise SnapshotDecodeError(
            f"session {sid!r}: its {which} checkpoint lies in damaged pages: {damaged(path, exc)}"
        ) from exc


def _read(
    db: sqlite3.Connection, rows: RowCodec, sid: str, checkpoint_id: str | None
) -> StoredCheckpoint:
    if checkpoint_id is None:
        row = db.execute(
            f"SELECT {_ROW} FROM checkpoints WHERE session_id = ?"
            " ORDER BY checkpoint_id DESC LIMIT 1",
            (sid,),
        ).fetchone()
    else:
        row = db.execute(
            f"SELECT {_ROW} FROM checkpoints WHERE session_id = ? AND checkpoint_id = ?",
            (sid, checkpoint_id),
        ).fetchone()
    if row is None:
        raise CheckpointNotFound(sid, checkpoint_id)
    cid, *stored = row
    gen, length, refs = stored[1], stored[2], stored[6]
    chunks = []
    if gen is not None:
        chunks = db.execute(
            "SELECT start, data FROM message_chunks"
            " WHERE session_id = ? AND gen = ? AND start < ? ORDER BY start",
            (sid, gen, length),
        ).fetchall()
    rows.trust_keys(db, (stored[0], *(data for _, data in chunks)))
    return StoredCheckpoint(cid, stored, chunks, _read_parts(db, sid, refs))


def _read_parts(db: sqlite3.Connection, sid: str, refs: object) -> dict[bytes, object]:
    """The stored state parts a checkpoint's ``refs`` name, by digest (checked later)."""
    try:
        wanted = [digest for _, _, digest in read_refs(refs)]
    except SnapshotDecodeError:
        return {}  # load reports it, after the seal check
    found: dict[bytes, object] = {}
    for digest in wanted:
        row = db.execute(
            "SELECT data FROM state_parts WHERE session_id = ? AND digest = ?", (sid, digest)
        ).fetchone()
        if row is not None:
            found[digest] = row[0]
    return found


def decode(
    rows: RowCodec, sid: str, found: StoredCheckpoint, migrations: MigrationRegistry | None
) -> Snapshot:
    """The snapshot ``found`` holds, checked.

    Raises:
        SnapshotDecodeError: a value is damaged, edited, or under the wrong key (naming
            the session and checkpoint), or it holds another session's checkpoint.
    """
    cid, stored, chunks, found_parts = found
    gen, length, refs = stored[1], stored[2], stored[6]
    try:
        body, expected, vouched = rows.open_checkpoint(sid, cid, tuple(stored))
        messages = None
        if gen is not None:
            if not isinstance(length, int) or not isinstance(expected, bytes):
                raise SnapshotDecodeError("message log reference is damaged")
            opened = [(start, rows.open_chunk(sid, gen, start, data)) for start, data in chunks]
            messages = assemble(opened, length, expected)
        parts = [
            (kind, name, checked(kind, name, digest, found_parts.get(digest)))
            for kind, name, digest in read_refs(refs)
        ]
        snapshot = join(body, messages, stored[3], migrations, parts, checked=vouched)
        check_identity(snapshot, sid, cid)
    except SnapshotDecodeError as exc:
        raise in_checkpoint(exc, sid, cid) from None
    return snapshot


def checkpoint_rows(db: sqlite3.Connection, sid: str) -> list[tuple[str, int, str | None, int]]:
    """``(checkpoint_id, saved_at_us, label, size)`` of the session's checkpoints, newest
    first."""
    rows: list[tuple[str, int, str | None, int]] = db.execute(
        "SELECT checkpoint_id, saved_at_us, label, size FROM checkpoints"
        " WHERE session_id = ? ORDER BY checkpoint_id DESC",
        (sid,),
    ).fetchall()
    return rows


def session_ids(db: sqlite3.Connection) -> list[str]:
    """The sessions with at least one checkpoint, sorted."""
    rows = db.execute("SELECT DISTINCT session_id FROM checkpoints ORDER BY session_id").fetchall()
    return [sid for (sid,) in rows]
