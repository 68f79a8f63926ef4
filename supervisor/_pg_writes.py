"""The PostgreSQL store's writes, on a connection: one save (``SaveWriter``), and a
delete or prune (``remove``).

A save is one call of the save function (``_pg_schema``), which checks the fence,
appends to the message log, upserts the checkpoint and prunes. With messages, it
names the log row it expects: the one this store instance remembers writing
(``_pg_logs.CachedLog``), or none for a new log. When the row is another (written
by another instance), the function writes nothing and the save reads the row,
locked, and tries again (at most ``_SAVE_ATTEMPTS`` times). An append that carries
a digit of the log's count then merges its chunks (``_log_chunks.merges``).

Without a remembered log, a save of up to ``_BLIND_LOG_BYTES`` of messages sends them as a
new log at once (a new session's first save: one round trip); a longer one reads the row
first, so that it sends only what the log does not hold yet (sending a long log whole,
to be refused as not the log expected, made every save of a long conversation whose log
this instance did not remember send all of it). A save whose rows PostgreSQL could not
take, or a load give back, is refused before anything is sent (``check_size``).

A delete or prune locks the session's log row first, so that it waits for a save in
flight and does not collect the log chunks that save's checkpoint uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from actors import Snapshot
from supervisor._log_cache import CachedLog
from supervisor._log_chunks import merges
from supervisor._message_log import SplitSnapshot, seal
from supervisor._pg_logs import LogPlan, extend_cached, new_log, plan_for_row
from supervisor._pg_statements import Statements
from supervisor._saved_at import micros
from supervisor.errors import OwnershipLost, SnapshotTooLarge, SupervisorError

if TYPE_CHECKING:
    import psycopg

__all__ = ["ROW_LIMIT", "FenceFields", "SaveWriter", "check_size", "remove"]

_SAVE_ATTEMPTS = 8  # times a save re-reads a message log that changed under it
_NO_LOG = (None, None, None, None)
_NONE_LOG = (None, None, None, None, None, None)
"""The expectation and append columns of a save without a message log."""
_BLIND_LOG_BYTES = 64 * 1024
"""Most message bytes a save without a remembered log sends before reading the log's row."""
ROW_LIMIT = 2**30 - 2**20
"""The largest snapshot (``SplitSnapshot.size``) the store takes: PostgreSQL builds no
protocol message, value or result row of 1 GiB or more (``MaxAllocSize``), and a save
sends, and a load gets back, the whole snapshot in one; 1 MiB is left for the rest of it."""
_SAVE_CURSOR = "_sessionvisor_save_cursor"
"""The attribute of a pooled connection holding its cursor for saves (``_save_cursor``)."""


class FenceFields(Protocol):
    """What a save reads of its fence: ``postgres_store.Fence`` (which imports this module,
    so it is not imported here)."""

    @property
    def node_id(self) -> str: ...

    @property
    def incarnation(self) -> int: ...

    @property
    def epoch(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SaveWriter:
    """Writes saves with the store's statements; ``keep_last``: the save function's (an
    SQL integer, or ``None`` to keep every checkpoint). Immutable, thread-safe."""

    sql: Statements
    keep_last: int | None

    def write(
        self,
        snapshot: Snapshot,
        cut: SplitSnapshot,
        cached: CachedLog | None,
        fence: FenceFields | None,
        conn: psycopg.Connection[tuple[Any, ...]],
    ) -> CachedLog | None:
        """One save's statement(s), on ``conn`` (in its batch's transaction, or alone);
        what to remember of the session's log, if it has one.

        Raises:
            OwnershipLost: the fence (or, without one, a node's ownership) refused it.
            SupervisorError: the log changed under it ``_SAVE_ATTEMPTS`` times.
        """
        sid = snapshot.session_id
        head = (
            sid,
            snapshot.checkpoint_id,
            None if fence is None else fence.node_id,
            None if fence is None else fence.incarnation,
            None if fence is None else fence.epoch,
            micros(snapshot.saved_at),
            snapshot.label,
            cut.size,
        )
        messages = cut.messages
        if messages is None:
            check = seal(cut.body, _NO_LOG)
            row = self._call(conn, (*head, cut.body, check, *_NO_LOG, *_NONE_LOG, self.keep_last))
            _check_fence(row, sid, fence)
            return None
        plan: LogPlan | None = None
        if cached is not None:
            plan = extend_cached(cut, cached)
        elif messages.length <= _BLIND_LOG_BYTES:  # else the row may hold most of it
            plan = new_log(cut, None)
        if plan is not None:
            written = self._write_log(conn, head, cut, plan, fence)
            if written is not None:
                return written
        for _ in range(_SAVE_ATTEMPTS):  # the log is not the one expected: read it, lock it
            with conn.transaction():
                plan = self._plan_from_row(conn, sid, cut)
                written = self._write_log(conn, head, cut, plan, fence)
            if written is not None:
                return written
        raise SupervisorError(
            f"the message log of session {sid!r} changed {_SAVE_ATTEMPTS} times while a save "
            "was being written: another process writes the session at the same time; a "
            "session must have one writer (run its hosts as nodes of a cluster)"
        )

    def _write_log(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        head: tuple[Any, ...],
        cut: SplitSnapshot,
        plan: LogPlan,
        fence: FenceFields | None,
    ) -> CachedLog | None:
        """Call the save function for a checkpoint with messages written as ``plan`` says;
        what to remember of the log, or ``None`` when the log was not the one expected."""
        messages = cut.messages
        assert messages is not None
        ref = (plan.gen, messages.length, cut.count, plan.digest)
        expect = plan.expect or (None, None, None)
        check = seal(cut.body, ref)
        params = (*head, cut.body, check, *ref, *expect, plan.append_at, plan.append)
        row = self._call(conn, (*params, plan.digest, self.keep_last))
        _check_fence(row, head[0], fence)
        if row[0] != 0:
            return None
        carried = merges(row[1]) if plan.append_at > 0 and plan.append else 0
        if carried:  # this append carries a digit of the log's count: its chunks merge
            self._merge(conn, (head[0], plan.gen, messages.length, carried + 1))
        known = messages.known()  # split's bytes (immutable, no copy) or their lineage
        return CachedLog(plan.gen, messages.length, plan.digest, known, plan.hasher)

    def _merge(self, conn: psycopg.Connection[tuple[Any, ...]], params: tuple[Any, ...]) -> None:
        """Merge the log's last chunks (``merge_log_chunks``), after the save's function.

        Alone (autocommit, no transaction open) the checkpoint is committed by then, and
        the merge only re-cuts bytes: a merge the server refuses on a live connection (a
        chunk locked past ``lock_timeout``, a very long log past ``statement_timeout``)
        leaves the chunks as they are, for a later append's merge, and the save returns
        (it used to raise ``StoreBusy``, "nothing was written", for a stored checkpoint).
        In a transaction (a batch, a save that read the log's row) its failure is the
        transaction's, rolled back whole, as before (a batch then runs each save alone).
        """
        import psycopg  # noqa: PLC0415 (present: the store that calls this opened)

        if not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute(self.sql.merge, params)
            return
        try:
            conn.execute(self.sql.merge, params)
        except psycopg.Error:
            if conn.broken or conn.closed:
                raise  # the merge's fate, not the save's, is unknown: the save is committed
            # Refused on a live connection: nothing merged; the checkpoint stays committed.

    def _call(
        self, conn: psycopg.Connection[tuple[Any, ...]], params: tuple[Any, ...]
    ) -> tuple[int, int, int]:
        row = _save_cursor(conn).execute(self.sql.save, params).fetchone()
        assert row is not None
        status, chunks, epoch = row
        return status, chunks, epoch

    def _plan_from_row(
        self, conn: psycopg.Connection[tuple[Any, ...]], sid: str, cut: SplitSnapshot
    ) -> LogPlan:
        """Plan against the session's log row as it is now, locked until the commit."""
        row = conn.execute(self.sql.log_row, (sid,), binary=True).fetchone()
        return plan_for_row(cut, row)


def check_size(session_id: str, size: int) -> None:
    """Refuse a snapshot of ``size`` bytes PostgreSQL could not store or give back whole.

    Raises:
        SnapshotTooLarge: ``size`` is over ``ROW_LIMIT``; the message says why.
    """
    if size <= ROW_LIMIT:
        return
    error = SnapshotTooLarge(session_id, size, ROW_LIMIT)
    error.args = (
        f"snapshot of session {session_id!r} is {size} bytes, over the {ROW_LIMIT} bytes "
        "the PostgreSQL store takes (PostgreSQL sends and builds no message or row of 1 GiB "
        "or more, and a load returns a checkpoint in one row); nothing was stored. Trim "
        "the conversation, or keep large data out of the session state (store it "
        "elsewhere and keep a reference to it)",
    )
    raise error


def _check_fence(row: tuple[int, int, int], sid: str, fence: FenceFields | None) -> None:
    """Raise ``OwnershipLost`` if the save function refused the save (status 1)."""
    if row[0] != 1:
        return
    if fence is None:
        raise OwnershipLost(
            sid,
            None,
            0,
            "a node of the cluster owns it, and a store used without a node's fence may "
            "not save it; save through that node's host",
        )
    raise OwnershipLost(
        sid,
        fence.node_id,
        fence.epoch,
        "the database names another owner or a newer epoch (another node claimed it, "
        "or it was released)",
    )


def _save_cursor(conn: psycopg.Connection[tuple[Any, ...]]) -> psycopg.Cursor[tuple[Any, ...]]:
    """The cursor the connection's save calls run on, made at its first save and kept on it.

    A cursor caches the dumpers of its parameters' types and the loaders of its
    result's: ``conn.execute`` makes a new cursor, and finds them again, every
    time (with the save's 21 parameters, a save's p50 was 0.03-0.07 ms longer). Used
    only while the connection is borrowed (by one thread), for a result of three
    numbers, so keeping it holds nothing big.
    """
    cursor: psycopg.Cursor[tuple[Any, ...]] | None = getattr(conn, _SAVE_CURSOR, None)
    if cursor is None:
        cursor = conn.cursor()
        setattr(conn, _SAVE_CURSOR, cursor)
    return cursor


def remove(
    conn: psycopg.Connection[tuple[Any, ...]],
    sql: Statements,
    sid: str,
    statement: bytes,
    params: tuple[Any, ...],
) -> int:
    """Delete checkpoints of ``sid`` with ``statement`` (a delete or prune of ``sql``), then
    the message-log rows no checkpoint uses any more, in one transaction; returns how many
    checkpoints went.

    The log's row is locked first: a save in flight holds it until it commits, so
    this waits for that save and then sees its checkpoint. Without the lock,
    ``collect_logs`` could miss the checkpoint and delete the log chunks it uses,
    leaving it unloadable. A session without a log row has no chunks to collect
    (saves write the two together; those a save in flight adds belong to its own
    checkpoint), so then nothing is collected.
    """
    with conn.transaction():
        has_log = conn.execute(sql.lock_log, (sid,)).fetchone() is not None
        removed: int = conn.execute(statement, params).rowcount
        if removed and has_log:
            conn.execute(sql.collect, (sid,))
    return removed
