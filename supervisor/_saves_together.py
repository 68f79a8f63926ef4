"""The usual saves of one group-commit batch, written together (``GroupCommit``'s
``together``): three multi-row inserts and one read for the whole batch instead of four
to six statements per save.

Why: SQLite lets go of the interpreter lock around every statement. With thousands
of session threads wanting the lock, the leader of a batch waited for it after each
of its 6 x 64 statements, while other threads ran; in a burst of 3,000 turns the
first batch took 0.8 s and no turn could answer before it committed.

The usual save is taken here: a checkpoint with messages and no state parts, its
session's only save in the batch, and its log either new (no log and no older
generation yet) or extended from what this store instance wrote last (the
``_log_cache.CachedLog`` matches the log's row), and its new bytes not due to merge with
earlier chunks (``_log_chunks``: one append in eight is, and runs alone). A prune
to ``keep_last`` it needs costs a statement of its own, as on the full path. The rows
are exactly those ``SQLiteCheckpointStore._write`` writes for such a save. Every
other save runs alone on that full path, after these; if a statement here fails,
``GroupCommit`` undoes what was written together and runs every save of the batch
alone.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from actors._record import record
from supervisor._log_chunks import LOG_UPSERT, LogRows, log_rows, merges, value_limit
from supervisor._saved_at import micros

if TYPE_CHECKING:
    import sqlite3

    from actors import Snapshot
    from supervisor._message_log import SplitSnapshot
    from supervisor._row_codec import RowCodec

__all__ = [
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_UPSERT",
    "QueuedSave",
    "checkpoint_row",
    "write_together",
]


CHECKPOINT_COLUMNS = (
    "(session_id, checkpoint_id, saved_at_us, label, size, body, log_gen, log_bytes,"
    " log_count, log_digest, body_check, parts)"
)
CHECKPOINT_UPSERT = (
    " ON CONFLICT (session_id, checkpoint_id) DO UPDATE SET"
    " saved_at_us = excluded.saved_at_us, label = excluded.label,"
    " size = excluded.size, body = excluded.body, log_gen = excluded.log_gen,"
    " log_bytes = excluded.log_bytes, log_digest = excluded.log_digest,"
    " log_count = excluded.log_count, body_check = excluded.body_check,"
    " parts = excluded.parts"
)
_STATES = (
    "WITH batch (sid) AS (VALUES {})"
    " SELECT batch.sid, log.gen, log.length, log.digest, log.chunks,"
    " (SELECT COALESCE(MAX(gen), -1) + 1 FROM message_chunks WHERE session_id = batch.sid){}"
    " FROM batch LEFT JOIN message_logs AS log ON log.session_id = batch.sid"
)
_COUNT = ", (SELECT count(*) FROM checkpoints WHERE session_id = batch.sid)"
_SIZES = (64, 32, 16, 8, 4, 2, 1)
"""Rows per statement: a batch's rows go in pieces of these sizes, so that the statement
cache holds seven texts per statement, not one per batch size."""


class SavingStore(Protocol):
    """What this module uses of ``supervisor.sqlite_store.SQLiteCheckpointStore`` (which
    imports this module, so it is not imported here)."""

    keep_last: int | None
    _rows: RowCodec

    def _write(
        self, snapshot: Snapshot, cut: SplitSnapshot, cached: Any, refs: bytes | None,
        db: sqlite3.Connection,
    ) -> None: ...  # fmt: skip

    def _prune(
        self, db: sqlite3.Connection, sid: str, keep_last: int, saved_gen: int | None = None
    ) -> int: ...

    def _remember(
        self, sid: str, cut: SplitSnapshot, gen: int, stored_digest: bytes, hasher: Any
    ) -> None: ...

    def _cleaning(self, sid: str) -> AbstractContextManager[bool]: ...


@record
class QueuedSave:
    """One save waiting for its batch; called, it writes itself alone (the full path)."""

    store: SavingStore
    snapshot: Snapshot
    cut: SplitSnapshot
    cached: Any  # the store's ``CachedLog`` of the session when the save was queued, or None
    refs: bytes | None

    def __call__(self, db: sqlite3.Connection) -> None:
        self.store._write(self.snapshot, self.cut, self.cached, self.refs, db)


def checkpoint_row(
    rows: RowCodec,
    snapshot: Snapshot,
    cut: SplitSnapshot,
    log: tuple[Any, ...],
    refs: bytes | None,
) -> tuple[Any, ...]:
    """The checkpoints row of a save (``CHECKPOINT_COLUMNS``) whose log reference is
    ``log``: (generation, length, message count, SHA-256), all ``None`` without messages."""
    sid, cid = snapshot.session_id, snapshot.checkpoint_id
    body, log_digest, check = rows.checkpoint(sid, cid, cut.body, log, refs, checked=cut.checked)
    return (
        sid, cid, micros(snapshot.saved_at), snapshot.label, cut.size, body, *log[:3],
        log_digest, check, refs,
    )  # fmt: skip


@record
class _Planned:
    logged: LogRows
    checkpoint: tuple[Any, ...]
    prune: bool  # the session reached keep_last: prune after the insert


def write_together(
    store: SavingStore,
    db: sqlite3.Connection,
    writes: Sequence[Callable[[sqlite3.Connection], Any]],
) -> dict[int, None]:
    """Write the usual saves among ``writes`` (see the module docstring); the index of
    each one written. Called by the batch's leader, inside its transaction."""
    if not all(isinstance(write, QueuedSave) for write in writes):
        return {}
    saves: Sequence[QueuedSave] = writes  # type: ignore[assignment]  # checked just above
    times = Counter(save.snapshot.session_id for save in saves)
    chosen = {
        index: save
        for index, save in enumerate(saves)
        if save.cut.messages is not None
        and not save.cut.parts
        and times[save.snapshot.session_id] == 1
    }
    if not chosen:
        return {}
    states = _states(db, [save.snapshot.session_id for save in chosen.values()], store)
    largest = value_limit(db)
    planned = {}
    for index, save in chosen.items():
        plan = _plan(store, save, states[save.snapshot.session_id], largest)
        if plan is not None:
            planned[index] = plan
    plans = planned.values()
    logs = [plan.logged for plan in plans]
    _insert(db, "INSERT INTO message_chunks VALUES", [lr.chunk for lr in logs if lr.chunk])
    _insert(db, "INSERT INTO message_logs VALUES", [lr.log for lr in logs], LOG_UPSERT)
    _insert(
        db,
        f"INSERT INTO checkpoints {CHECKPOINT_COLUMNS} VALUES",
        [p.checkpoint for p in plans],
        CHECKPOINT_UPSERT,
    )
    keep_last = store.keep_last
    for plan in plans:
        if plan.prune and keep_last is not None:
            with store._cleaning(plan.logged.log[0]) as clean:
                if clean:
                    store._prune(db, plan.logged.log[0], keep_last, plan.logged.log[1])
    for index, plan in planned.items():
        save, (sid, gen, _, stored, _) = saves[index], plan.logged.log
        store._remember(sid, save.cut, gen, stored, plan.logged.hasher)
    return dict.fromkeys(planned)


def _states(
    db: sqlite3.Connection, sids: list[str], store: SavingStore
) -> dict[str, tuple[Any, ...]]:
    """Each session's log row, next free log generation and (with ``keep_last``) how many
    checkpoints it has: one read per piece of the batch."""
    count = _COUNT if store.keep_last is not None else ""
    states = {}
    for piece in _pieces(sids):
        values = ", ".join(["(?)"] * len(piece))
        for sid, *state in db.execute(_STATES.format(values, count), piece):
            states[sid] = tuple(state)
    return states


def _plan(
    store: SavingStore, save: QueuedSave, state: tuple[Any, ...], largest: int
) -> _Planned | None:
    """The rows of a usual save, or ``None`` for one that must run alone (also one whose
    new message bytes are longer than one value, ``largest``: they take several chunks)."""
    gen, length, stored_digest, appends, next_gen, *count = state
    prune = bool(count) and count[0] >= store.keep_last  # then this save goes past it
    cut, sid = save.cut, save.snapshot.session_id
    messages = cut.messages
    assert messages is not None  # chosen so
    if messages.length - (length or 0) > largest:
        return None
    if gen is None:
        if next_gen:  # an older generation is left to collect
            return None
        gen, length, appends, hasher = 0, 0, 0, hashlib.sha256()
    else:
        if messages.length > length and merges(appends + 1):
            return None  # its chunks merge: statements of its own
        cached = save.cached
        if (
            cached is None
            or not cut.extends
            or (cached.gen, cached.length, cached.digest) != (gen, length, stored_digest)
        ):
            return None
        hasher = cached.hasher.copy()
    logged = log_rows(store._rows, sid, messages, gen, length, appends, hasher, largest)
    ref = (gen, messages.length, cut.count, logged.digest)
    return _Planned(logged, checkpoint_row(store._rows, save.snapshot, cut, ref, save.refs), prune)


def _insert(db: sqlite3.Connection, head: str, rows: list[Any], tail: str = "") -> None:
    """``head`` with ``rows`` as its ``VALUES``, then ``tail``: one statement per piece."""
    if not rows:
        return
    marks = "(" + ", ".join(["?"] * len(rows[0])) + ")"
    for piece in _pieces(rows):
        values = [value for row in piece for value in row]
        db.execute(f"{head} {', '.join([marks] * len(piece))}{tail}", values)


def _pieces(items: list[Any]) -> list[list[Any]]:
    """``items`` cut in pieces of ``_SIZES`` (largest first)."""
    pieces, at = [], 0
    for size in _SIZES:
        while len(items) - at >= size:
            pieces.append(items[at : at + size])
            at += size
    return pieces
