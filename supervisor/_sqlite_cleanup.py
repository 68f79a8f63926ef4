"""Removing a SQLite store's checkpoints, and then what only they used.

A checkpoint uses one generation of its session's message log and the state parts
its ``parts`` name. Once checkpoints go (``delete_rows``, ``prune``), the log
generations no retained checkpoint uses (but the current one) and the state parts
whose ``newest`` user is older than every retained checkpoint are deleted too
(``collect``, ``collect_after_delete``); a session left with no checkpoint loses its
whole log and every part. All run inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3

__all__ = ["collect", "collect_after_delete", "delete_rows", "prune_rows"]

_PRUNE = (
    "DELETE FROM checkpoints WHERE session_id = ?1 AND checkpoint_id IN"
    " (SELECT checkpoint_id FROM checkpoints WHERE session_id = ?1"
    " ORDER BY checkpoint_id DESC LIMIT -1 OFFSET ?2)"
)
_DROP_UNUSED_PARTS = (
    "DELETE FROM state_parts WHERE session_id = ?1 AND newest <"
    " (SELECT MIN(checkpoint_id) FROM checkpoints WHERE session_id = ?1)"
)
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
"""Whether this SQLite has ``DELETE ... RETURNING`` (a prune then says what it removed)."""


def collect(db: sqlite3.Connection, sid: str) -> None:
    """Delete the log generations no checkpoint uses, except the current one."""
    db.execute(
        "DELETE FROM message_chunks WHERE session_id = ?1"
        " AND gen <> (SELECT gen FROM message_logs WHERE session_id = ?1)"
        " AND gen NOT IN (SELECT log_gen FROM checkpoints"
        " WHERE session_id = ?1 AND log_gen IS NOT NULL)",
        (sid,),
    )


def collect_after_delete(db: sqlite3.Connection, sid: str) -> None:
    """As ``collect``, and drop the state parts no retained checkpoint uses; drop the
    whole log and every part once the session has no checkpoint left."""
    if db.execute("SELECT 1 FROM checkpoints WHERE session_id = ?", (sid,)).fetchone() is None:
        db.execute("DELETE FROM message_chunks WHERE session_id = ?", (sid,))
        db.execute("DELETE FROM message_logs WHERE session_id = ?", (sid,))
        db.execute("DELETE FROM state_parts WHERE session_id = ?", (sid,))
    else:
        collect(db, sid)
        db.execute(_DROP_UNUSED_PARTS, (sid,))


def delete_rows(db: sqlite3.Connection, sid: str, checkpoint_id: str | None) -> int:
    """Delete one checkpoint of the session (``None``: all of them), then what only they
    used; returns how many checkpoints went."""
    if checkpoint_id is None:
        removed = db.execute("DELETE FROM checkpoints WHERE session_id = ?", (sid,)).rowcount
    else:
        removed = db.execute(
            "DELETE FROM checkpoints WHERE session_id = ? AND checkpoint_id = ?",
            (sid, checkpoint_id),
        ).rowcount
    collect_after_delete(db, sid)
    return removed


def prune_rows(
    db: sqlite3.Connection, sid: str, keep_last: int, saved_gen: int | None = None
) -> int:
    """Delete all but the session's ``keep_last`` newest checkpoints, then what only they
    used. ``saved_gen``: the log generation of the checkpoint just saved in this
    transaction (so the session has one, and that is its current log), if it has one.

    After a save, only what the removed rows name can have become unused: an older
    log generation, or state parts (a part's ``newest`` checkpoint uses it). So the
    usual prune of a save (one checkpoint of the current log, without parts) is one
    statement, not four.
    """
    if not _RETURNING:  # SQLite before 3.35: count, then collect in full
        count: int = db.execute(_PRUNE, (sid, keep_last)).rowcount
        if count:
            collect_after_delete(db, sid)
        return count
    removed = db.execute(f"{_PRUNE} RETURNING log_gen, parts", (sid, keep_last)).fetchall()
    if not removed:
        return 0
    if saved_gen is None:
        collect_after_delete(db, sid)
        return len(removed)
    if any(gen is not None and gen != saved_gen for gen, _ in removed):
        collect(db, sid)
    if any(parts is not None for _, parts in removed):
        db.execute(_DROP_UNUSED_PARTS, (sid,))
    return len(removed)
