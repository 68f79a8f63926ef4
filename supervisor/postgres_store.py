"""``PostgresCheckpointStore``: checkpoints in PostgreSQL, shared by the nodes of a cluster.

Needs the ``postgres`` extra (psycopg 3 and psycopg-pool), imported when a
store is opened, so ``import supervisor`` works without them.

The store's parts: ``_pg_connections`` (the driver, connection options, waits
bounded on a silent server), ``_pg_pool`` (the pool, borrowing from it),
``_pg_failures`` (the driver's errors as the store's, the one retry),
``_pg_statements`` (its SQL), ``_pg_writes`` (a save's statements, a delete's),
``_pg_reads`` (a loaded row decoded), ``_pg_text`` (ids text can hold), ``_pg_logs``
(what a save appends to the message log), ``_pg_group_commit`` (saves sharing a
transaction) and ``_pg_schema`` (tables, the save function, migrations).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

from actors import MigrationRegistry, Snapshot
from supervisor._log_cache import CachedLog, LogCache
from supervisor._message_log import SplitSnapshot, split
from supervisor._pg_connections import (
    MAX_POOL_SIZE,
    check_conninfo,
    check_options,
    connect_options,
    connection_class,
    describe,
    driver,
)
from supervisor._pg_failures import reported_at_opening, retrying
from supervisor._pg_group_commit import PoolCommit
from supervisor._pg_pool import PoolUse, borrowed, lanes_busy, open_pool
from supervisor._pg_reads import checkpoint_infos, decode
from supervisor._pg_schema import check_schema_name, migrate, qualify
from supervisor._pg_statements import Statements
from supervisor._pg_text import check_text, may_exist, storable_text
from supervisor._pg_writes import SaveWriter, check_size, remove
from supervisor.checkpoint_store import (
    DEFAULT_KEEP_LAST,
    CheckpointInfo,
    ClosingContext,
    check_keep_last,
    check_max_snapshot_bytes,
)
from supervisor.errors import CheckpointNotFound, SnapshotTooLarge

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["MAX_POOL_SIZE", "Fence", "PostgresCheckpointStore", "check_text", "storable_text"]

T = TypeVar("T")

_LOG_CACHE_BYTES = 64 * 1024 * 1024
_INT4_MAX = 2**31 - 1
_INT8_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Fence:
    """The ownership a save must still hold: saved only if the session's row says this
    node (this incarnation of it) owns it at this epoch. Immutable, thread-safe.

    Attributes:
        node_id: The owning node.
        incarnation: Which registration of that node id (a restarted node is a new one).
        epoch: The session's epoch, as the node's claim returned it.
    """

    node_id: str
    incarnation: int
    epoch: int


class PostgresCheckpointStore(ClosingContext):
    """A ``CheckpointStore`` in a PostgreSQL database, shared by processes and machines.

    Durability: a ``save`` that returned is committed (with the server's
    default ``synchronous_commit = on``, flushed to its WAL).

    Storage grows linearly with a conversation, as in the SQLite store: a
    session's messages are stored once, in an append-only log (its chunks merge
    as the SQLite store's do), and each checkpoint stores its snapshot without the
    messages plus "the first N bytes of the log" and their SHA-256; each row
    is sealed with a BLAKE2b checksum verified on ``load`` (a damaged row
    raises ``SnapshotDecodeError`` naming it). ``keep_last`` (default 100)
    bounds the checkpoints kept per session.

    Speed: a save is one round trip (a PL/pgSQL function does the fence check,
    the log append and the upsert, and prunes when the session may hold more
    than ``keep_last`` checkpoints). The instance remembers the
    log it last wrote per session (64 MiB in all) so that a save sends only
    the new messages; the function checks that the log is still that one, and
    a save finding it changed (written by another instance) reads it first.
    Saves that arrive together share one transaction (group commit:
    ``_pg_group_commit``); ``commits`` counts the transactions.

    Ownership: the same database holds the cluster's ``nodes`` and
    ``sessions`` tables (see ``supervisor.cluster``). A save with a ``fence``
    is stored only if the session's row still names that node, incarnation
    and epoch, checked in the same statement under a row lock that claims
    wait for; else ``OwnershipLost`` and nothing is stored. A save without a
    fence (a host that is not a node, a tool) is refused in the same way for
    a session a node owns. "Newest" is ordered by ``(epoch, checkpoint_id)``:
    a checkpoint of a later owner is newer than any of an earlier one, so a
    stale owner's fast clock cannot make its checkpoint the latest. Within
    one epoch there is one writer, whose checkpoint ids increase.
    ``delete`` and ``prune`` are not fenced (they are administration).
    ``member`` names the node (id and incarnation) that runs on this store, once it
    registered: code sharing the store (the gateway's key store) tells its own node's
    sessions from the other nodes' by it.

    Not supported here (unlike the SQLite store): encryption at rest.

    Failures: a server that cannot be reached, or a connection that breaks
    during an operation, raises ``StoreUnreachable`` after one retry on a
    fresh connection; a save that raised it may or may not be stored, and
    saving the same snapshot again is safe (idempotent). Store connections
    run with ``idle_in_transaction_session_timeout`` and ``lock_timeout`` of
    ``transaction_timeout`` seconds, so a frozen process cannot hold a
    session's row (and so its failover) longer than that; an operation that
    waits that long for a lock is cancelled and raises ``StoreBusy`` (nothing
    written; retrying is safe). So does a statement the server ran longer than its
    ``statement_timeout`` of twice ``transaction_timeout``, and an operation that waited
    ``connect_timeout`` seconds in all for a pooled connection (a save: for a turn on
    one, queued behind other saves, and then for the connection) while all
    ``pool_size`` stayed busy with others (the message says so: raise ``pool_size`` or
    lower the load). A pooled connection on which the server stays silent for
    ``2 * transaction_timeout + connect_timeout`` seconds while it owes an answer (a
    network partition without a reset, a hung server) is closed, and the operation
    raises ``StoreUnreachable`` as for a broken connection; unless the connection
    string sets them, libpq's TCP keepalives and ``tcp_user_timeout`` are set to notice
    a dead peer within about that time on every store connection. A server that
    refuses writes (a standby, or a primary being demoted in a failover) raises
    ``StoreUnreachable`` saying so, after every pooled connection was replaced and
    the operation tried once more (nothing written; a connection string listing
    several hosts with ``target_session_attrs=read-write`` then reaches the new
    primary).

    Thread-safe: a pool of connections (up to ``pool_size``) is shared by all
    threads; encoding and decoding run outside it. Do not share one instance
    across ``fork``. The schema is created, or migrated, when the store opens
    (under an advisory lock, so nodes starting together are safe).

    Args:
        conninfo: A libpq connection string or URI (``postgresql://user@host/db``);
            empty: libpq's defaults and ``PG*`` environment variables.
        schema: The PostgreSQL schema holding the store's tables (created if missing).
        max_snapshot_bytes: Refuse (``SnapshotTooLarge``, nothing stored) snapshots
            whose ``serialize()`` size is larger; ``None``: no limit.
        keep_last: After each save keep the session's newest ``keep_last``
            checkpoints; ``None`` keeps all.
        migrations: Upgrades checkpoints of older snapshot schema versions on ``load``.
        pool_size: Most connections open at once (and group-commit batches in flight), from
            1 to ``MAX_POOL_SIZE`` (1000).
        connect_timeout: Seconds to wait for a connection.
        transaction_timeout: See "Failures" above.

    Raises:
        StoreUnreachable: no connection could be made.
        SupervisorError: the schema is newer than this code supports.
        ImportError: psycopg or psycopg-pool is not installed.
    """

    member: tuple[str, int] | None = None
    """``(node_id, incarnation)`` of the cluster node running on this store (set by
    ``ClusterNode`` when it registers), or ``None``."""

    def __init__(
        self,
        conninfo: str = "",
        *,
        schema: str = "sessionvisor",
        max_snapshot_bytes: int | None = None,
        keep_last: int | None = DEFAULT_KEEP_LAST,
        migrations: MigrationRegistry | None = None,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        transaction_timeout: float = 5.0,
    ) -> None:
        check_max_snapshot_bytes(max_snapshot_bytes)
        check_options(pool_size, connect_timeout, transaction_timeout)
        pg_driver, pool_driver = driver()
        check_conninfo(pg_driver, conninfo)
        self._psycopg = pg_driver
        self.schema = check_schema_name(schema)
        self.max_snapshot_bytes = max_snapshot_bytes
        self.keep_last = check_keep_last(keep_last, allow_none=True)
        # The save function's keep_last is an SQL integer: a larger one keeps every
        # checkpoint a session can hold anyway, as the largest integer does.
        self._keep_last = None if self.keep_last is None else min(self.keep_last, _INT4_MAX)
        self._migrations = migrations
        self._logs = LogCache(_LOG_CACHE_BYTES)
        timeout_ms = max(1, int(transaction_timeout * 1000))
        # Room for one lock wait (lock_timeout) and the work after it: a live server ends
        # every statement within this; the client waits for an answer a connect_timeout more.
        self._statement_timeout = 2 * timeout_ms / 1000
        self._silence_limit = self._statement_timeout + connect_timeout
        self._connect_kwargs = connect_options(
            pg_driver,
            conninfo,
            connect_timeout=connect_timeout,
            timeout_ms=timeout_ms,
            silence=self._silence_limit,
        )
        self.conninfo = conninfo
        self.where = describe(pg_driver, conninfo)
        self._closed = False
        with reported_at_opening(self), self.connect() as conn:
            self.where = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
            conn.execute("SET statement_timeout = 0")  # a migration may rewrite big tables
            migrate(conn, self.schema)
        self._pool_timeout: type[Exception] = pool_driver.PoolTimeout
        self._use = PoolUse(pool_size)
        self._pool: psycopg_pool.ConnectionPool[Any] = open_pool(
            pool_driver, conninfo, self._connect_kwargs, self._configure,
            size=pool_size, timeout=connect_timeout, name=f"sessionvisor-{self.schema}",
        )  # fmt: skip
        self._commits = PoolCommit(
            pool_size,
            self._borrow,
            pg_driver.Error,
            lane_wait=connect_timeout,
            busy=functools.partial(lanes_busy, pool_size),
        )
        self._sql = Statements.in_schema(self.schema)
        self._writer = SaveWriter(self._sql, self._keep_last)

    def __repr__(self) -> str:
        return f"PostgresCheckpointStore({self.where!r}, schema={self.schema!r})"

    def in_schema(self, statement: str) -> bytes:
        """``statement`` with each ``{s}`` replaced by this store's quoted schema, as the bytes
        psycopg sends: for code that keeps tables of its own beside the store's (the
        gateway's keys), e.g. ``store.in_schema("SELECT * FROM {s}.my_table")``."""
        return qualify(statement, self.schema)

    @property
    def commits(self) -> int:
        """Transactions this instance's saves committed (saves divided by commits is the
        batching group commit achieved). Thread-safe."""
        return self._commits.commits

    # --- connections ----------------------------------------------------------------------

    @property
    def silence_limit(self) -> float:
        """Seconds a store connection waits on a server that owes an answer and stays silent
        before it is closed (``2 * transaction_timeout + connect_timeout``)."""
        return self._silence_limit

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A new connection of its own (autocommit, the store's timeouts), outside the pool:
        for a node's heartbeat, which must not wait behind saves, and its event fan-out.
        The caller closes it. Its waits for the server are bounded as the pooled
        connections' are (``silence_limit``; see ``_pg_connections.heard_within``): on a
        server gone silent without a reset (a partition, a hung server, a connection a
        middlebox dropped) a heartbeat used to wait without end, its thread stuck and the
        node fenced, where a new connection would have been answered. A listener, whose
        waits for notifications owe no answer, sets the connection's ``silence_limit`` to
        ``None`` around them.

        Raises:
            psycopg.OperationalError: it cannot be made.
        """
        conn: psycopg.Connection[tuple[Any, ...]] = connection_class().connect(
            self.conninfo, **self._connect_kwargs
        )
        self._configure(conn)
        return conn

    def _configure(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Bound a new pooled connection's waits for the server (``_pg_connections``)."""
        conn.silence_limit = self._silence_limit  # type: ignore[attr-defined]

    _borrow = borrowed
    """``_borrow(timeout=None)``: a pooled connection for a ``with`` block (``_pg_pool``)."""

    def _findable(self, session_id: object, checkpoint_id: object = None) -> bool:
        """Whether a row of these ids could have been stored (``storable_text``): a read of
        one that could not finds nothing without asking the server.

        Raises:
            ValueError: the store is closed (as a query would).
        """
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        return may_exist(session_id, checkpoint_id)

    def run(
        self,
        action: str,
        work: Callable[[psycopg.Connection[tuple[Any, ...]]], T],
        session_id: str | None = None,
    ) -> T:
        """Run ``work`` on a pooled autocommit connection; once more on a fresh one if the
        connection broke (``work`` must be idempotent). For the cluster layer's statements.

        Raises:
            StoreUnreachable: the connection broke twice, or none could be had, or the
                server refuses writes (read-only).
            StoreBusy: it waited too long for a lock, or for a pooled connection while
                every one was busy (nothing written).
            ValueError: the store is closed; or ``work`` writes ``session_id`` and it is
                too long for the tables' indexes.
        """
        return retrying(self, action, lambda: self._once(work), session_id)

    def _once(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        with self._borrow() as conn:
            return work(conn)

    # --- save -----------------------------------------------------------------------------

    def save(self, snapshot: Snapshot, *, fence: Fence | None = None) -> CheckpointInfo:
        """Store ``snapshot``; committed when it returns (see ``CheckpointStore.save``).

        Args:
            fence: Store it only if the session is still owned as this says (a
                node's host passes its lease); ``None``: only if no node owns it.

        Raises:
            OwnershipLost: the fence (or, without one, a node's ownership) refused it;
                nothing was stored.
            StoreUnreachable: the connection failed twice (broken, or the server silent
                past ``2 * transaction_timeout + connect_timeout``); whether it was stored is
                unknown, and saving it again is safe. Or the server refuses writes
                (read-only, said so): nothing was stored.
            StoreBusy: it waited past ``transaction_timeout`` for a lock another
                connection held, or ran past ``statement_timeout``, or waited
                ``connect_timeout`` for a lane and a pooled connection while every one was
                busy; nothing was stored, and saving it again is safe. Or the server rolled
                it back twice to break a deadlock (saves of the same session from several
                threads or processes at once; it is tried once more first).
            StoreFull: the server's disk is full; nothing was stored.
            SnapshotTooLarge, actors.SnapshotEncodeError: as for every store; and a
                snapshot of about 1 GiB or more (``_pg_writes.ROW_LIMIT``), which
                PostgreSQL can neither take in one message nor give back in one row.
            ValueError: PostgreSQL cannot store its session id, checkpoint id or label (a
                NUL character in it, or a session or checkpoint id of thousands of bytes);
                nothing was stored.
        """
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"save() needs a Snapshot, got {type(snapshot).__name__}")
        if fence is not None and not isinstance(fence, Fence):
            raise TypeError(f"fence must be a Fence or None, got {type(fence).__name__}")
        sid = snapshot.session_id
        check_text("session_id", sid)
        check_text("checkpoint_id", snapshot.checkpoint_id)
        if snapshot.label is not None:
            check_text("label", snapshot.label)
        cached = self._logs.get(sid)
        # Large states stay in the body: this store has no shared state parts (yet).
        cut = split(snapshot, None if cached is None else cached.known, parts=False)
        if self.max_snapshot_bytes is not None and cut.size > self.max_snapshot_bytes:
            raise SnapshotTooLarge(sid, cut.size, self.max_snapshot_bytes)
        check_size(sid, cut.size)  # what PostgreSQL cannot take: refused before it is sent
        # CheckpointInfo times are UTC; a moment UTC cannot hold raises here, storing nothing
        saved_at = snapshot.saved_at.astimezone(UTC)
        write = functools.partial(self._write, snapshot, cut, cached, fence)
        try:
            entry = retrying(
                self, "a save", lambda: self._commits.run(write), sid, snapshot.checkpoint_id
            )
        except BaseException:
            self._logs.drop(sid)
            raise
        if entry is not None:
            self._logs.put(sid, entry)
        return CheckpointInfo(sid, snapshot.checkpoint_id, saved_at, snapshot.label, cut.size)

    def _write(
        self,
        snapshot: Snapshot,
        cut: SplitSnapshot,
        cached: CachedLog | None,
        fence: Fence | None,
        conn: psycopg.Connection[tuple[Any, ...]],
    ) -> CachedLog | None:
        """One save's statement(s), on ``conn`` (in its batch's transaction, or alone)."""
        return self._writer.write(snapshot, cut, cached, fence, conn)

    # --- read -----------------------------------------------------------------------------

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The checkpoint, or the session's newest (see ``CheckpointStore.load``)."""
        if not self._findable(session_id, checkpoint_id):
            raise CheckpointNotFound(session_id, checkpoint_id)  # no save could store it
        query = self._sql.latest if checkpoint_id is None else self._sql.one
        params = (session_id,) if checkpoint_id is None else (session_id, checkpoint_id)
        row = self.run("a load", lambda conn: conn.execute(query, params, binary=True).fetchone())
        if row is None:
            raise CheckpointNotFound(session_id, checkpoint_id)
        return decode(row, session_id, self._migrations)

    def check_session_id(self, session_id: str) -> None:
        """Refuse an id PostgreSQL text cannot hold (a NUL character): the host asks before
        a session of it starts, which would otherwise fail its every save.

        Raises:
            ValueError: it holds a NUL character (the message says where).
        """
        check_text("session_id", session_id)

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first by ``(epoch, checkpoint_id)``."""
        if not self._findable(session_id):
            return []
        rows = self.run(
            "a listing", lambda conn: conn.execute(self._sql.listing, (session_id,)).fetchall()
        )
        return checkpoint_infos(session_id, rows)

    def sessions(self) -> builtins.list[str]:
        """Sessions with at least one checkpoint, sorted."""
        rows = self.run("a listing", lambda conn: conn.execute(self._sql.sessions).fetchall())
        return [sid for (sid,) in rows]

    # --- delete ---------------------------------------------------------------------------

    def delete(self, session_id: str, checkpoint_id: str | None = None) -> int:
        """Remove one or all of the session's checkpoints; returns how many (not fenced).

        Removing all of them also drops the session's event mark (the cluster's
        ``event_marks`` row): its life is over, and a session created anew under its id
        numbers its events from its own, not above the old life's (a new owner used to
        number on above that mark, and a follower was told of events missed that never
        were). A live owner that goes on publishing raises a new mark from its own."""
        if not self._findable(session_id, checkpoint_id):
            return 0
        params: tuple[str, ...]
        if checkpoint_id is None:
            statement, params = self._sql.delete_all, (session_id, session_id)
        else:
            statement, params = self._sql.delete_one, (session_id, checkpoint_id)
        removed = self.run(
            "a delete", lambda conn: remove(conn, self._sql, session_id, statement, params)
        )
        if checkpoint_id is None:
            self._logs.drop(session_id)
        return removed

    def prune(self, session_id: str, keep_last: int) -> int:
        """Keep the ``keep_last`` newest checkpoints of the session; returns how many went."""
        keep = check_keep_last(keep_last, allow_none=False)
        if not self._findable(session_id):
            return 0
        assert keep is not None
        keep = min(keep, _INT8_MAX)  # OFFSET is a bigint; no session holds more anyway

        params = (session_id, session_id, keep)
        return self.run(
            "a prune", lambda conn: remove(conn, self._sql, session_id, self._sql.prune, params)
        )

    def close(self) -> None:
        """Close every connection of the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        self._logs.clear()


for _cls in (PostgresCheckpointStore, Fence):
    _cls.__module__ = "supervisor"
