"""``PostgresCheckpointStore``: checkpoints in PostgreSQL, shared by the nodes of a cluster.

Needs the ``postgres`` extra (psycopg 3 and psycopg-pool), imported when a
store is opened, so ``import supervisor`` works without them.
"""

from __future__ import annotations

import builtins
import functools
import math
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from time import monotonic
from typing import TYPE_CHECKING, Any, TypeVar

from actors import MigrationRegistry, Snapshot, SnapshotDecodeError
from supervisor._log_chunks import merges
from supervisor._message_log import (
    SplitSnapshot,
    assemble,
    check_identity,
    in_checkpoint,
    join,
    seal,
    split,
    verify,
)
from supervisor._pg_group_commit import PoolCommit
from supervisor._pg_logs import (
    CachedLog,
    LogCache,
    LogPlan,
    extend_cached,
    new_log,
    plan_for_row,
)
from supervisor._pg_schema import check_schema_name, migrate, qualify
from supervisor._saved_at import from_micros, micros
from supervisor.checkpoint_store import (
    DEFAULT_KEEP_LAST,
    CheckpointInfo,
    ClosingContext,
    check_keep_last,
    check_max_snapshot_bytes,
    encodable,
)
from supervisor.errors import (
    CheckpointNotFound,
    OwnershipLost,
    SnapshotTooLarge,
    StoreBusy,
    StoreFull,
    StoreUnreachable,
    SupervisorError,
)

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["MAX_POOL_SIZE", "Fence", "PostgresCheckpointStore", "check_text", "storable_text"]

T = TypeVar("T")

MAX_POOL_SIZE = 1000
"""The largest ``pool_size``: more connections than any server's ``max_connections``
sensibly allows (each is a server process)."""
_LOG_CACHE_BYTES = 64 * 1024 * 1024
_SAVE_ATTEMPTS = 8  # times a save re-reads a message log that changed under it
_NO_LOG = (None, None, None, None)
_NONE_LOG = (None, None, None, None, None, None)
"""The expectation and append columns of a save without a message log."""
# SQLSTATEs of a connection that is gone: class 08, and the server shutting it down.
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")
_INT4_MAX = 2**31 - 1
_INT8_MAX = 2**63 - 1
_TOO_LARGE = "54000"
"""SQLSTATE ``program_limit_exceeded``; with "index row" in its message, a key too long
for a btree index entry (about 2,700 bytes after compression): a session id of thousands
of bytes."""
_DISK_FULL = "53100"
"""SQLSTATE ``disk_full``: the server could not extend a file; the transaction is rolled back."""
_READ_ONLY = "25006"
"""SQLSTATE ``read_only_sql_transaction``: the server takes no writes (a standby, a primary
being demoted, ``default_transaction_read_only``); nothing was written."""
_SAVE_CURSOR = "_sessionvisor_save_cursor"
"""The attribute of a pooled connection holding its cursor for saves (``_save_cursor``)."""
_QUERY_CANCELED = "57014"
_CANCELLED_WAITING = frozenset({"55P03", _QUERY_CANCELED})
"""SQLSTATEs of a statement the server cancelled while it waited: after ``lock_timeout``
(lock not available), or by a timeout or ``pg_cancel_backend`` (query canceled).
Its transaction rolled back: nothing was written."""

_SAVE = (
    "SELECT out_status, out_chunks, out_epoch FROM {s}.save_checkpoint("
    "%s::text, %s::text, %s::text, %s::bigint, %s::bigint, %s::bigint, %s::text, %s::integer,"
    " %b::bytea, %b::bytea, %s::integer, %s::integer, %s::integer, %b::bytea,"
    " %s::integer, %s::integer, %b::bytea, %s::integer, %b::bytea, %b::bytea, %s::integer)"
)
_LOG_ROW = "SELECT gen, length, digest FROM {s}.message_logs WHERE session_id = %s FOR UPDATE"
_MERGE = "SELECT {s}.merge_log_chunks(%s::text, %s::integer, %s::integer, %s::integer)"
_LOAD = (
    "SELECT c.checkpoint_id, c.body, c.log_gen, c.log_bytes, c.log_count, c.log_digest,"
    " c.body_check, m.starts, m.datas"
    " FROM (SELECT * FROM {s}.checkpoints WHERE session_id = %s{where}"
    " ORDER BY epoch DESC, checkpoint_id DESC LIMIT 1) c"
    " LEFT JOIN LATERAL (SELECT array_agg(start ORDER BY start) AS starts,"
    " array_agg(data ORDER BY start) AS datas FROM {s}.message_chunks"
    " WHERE session_id = c.session_id AND gen = c.log_gen AND start < c.log_bytes) m ON true"
)
_LIST = (
    "SELECT checkpoint_id, saved_at_us, label, size FROM {s}.checkpoints"
    " WHERE session_id = %s ORDER BY epoch DESC, checkpoint_id DESC"
)
_SESSIONS = (
    'SELECT session_id FROM {s}.checkpoints GROUP BY session_id ORDER BY session_id COLLATE "C"'
)
"""Sorted by code point (bytes), as ``sorted`` and the other stores do, whatever the
database's collation (``en_US.UTF-8`` would put ``"a"`` before ``"B"``)."""
_DELETE_ALL = (
    "WITH mark AS (DELETE FROM {s}.event_marks WHERE session_id = %s)"
    " DELETE FROM {s}.checkpoints WHERE session_id = %s"
)
"""Every checkpoint of the session, and its event mark (see ``delete``)."""
_DELETE_ONE = "DELETE FROM {s}.checkpoints WHERE session_id = %s AND checkpoint_id = %s"
_PRUNE = (
    "DELETE FROM {s}.checkpoints WHERE session_id = %s AND checkpoint_id IN"
    " (SELECT checkpoint_id FROM {s}.checkpoints WHERE session_id = %s"
    " ORDER BY epoch DESC, checkpoint_id DESC OFFSET %s)"
)
_COLLECT = "SELECT {s}.collect_logs(%s)"
_LOCK_LOG = "SELECT 1 FROM {s}.message_logs WHERE session_id = %s FOR UPDATE"
"""First in a delete or prune (see ``_remove``): lock the session's message-log row."""


def _check_pool_size(pool_size: object) -> None:
    """Refuse a ``pool_size`` that is not an int from 1 to ``MAX_POOL_SIZE``.

    Raises:
        ValueError: it is not; the message says what suits.
    """
    if isinstance(pool_size, bool) or not isinstance(pool_size, int):
        raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
    if not 1 <= pool_size <= MAX_POOL_SIZE:
        # More than the server's max_connections (100 by default) could never open.
        raise ValueError(
            f"pool_size must be an int >= 1 and at most {MAX_POOL_SIZE}, got {pool_size!r}: "
            "the connections this store may open at once, which the server's "
            "max_connections (100 by default) bounds for all its clients together; a few "
            "per node suit most clusters (saves share transactions)"
        )


class _PoolUse:
    """What the borrowers of a store's pool saw (``PostgresCheckpointStore._borrow``):
    connections lent out now, and connections given back so far, unbroken (the server
    answered) or broken (it, or the network, failed). Thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._lent = 0
        self._answered = 0
        self._broke = 0

    def returns(self) -> tuple[int, int]:
        """The counts of connections given back so far: ``(unbroken, broken)``."""
        with self._lock:
            return self._answered, self._broke

    def busy_since(self, before: tuple[int, int]) -> bool:
        """Whether a wait for a connection that began at ``before`` (``returns()``) and
        timed out found the pool busy: no connection came back broken since, and either
        every one is lent out now or one came back unbroken (and went to another
        borrower queued first)."""
        with self._lock:
            if self._broke != before[1]:
                return False
            return self._answered != before[0] or self._lent >= self.size

    def lend(self) -> None:
        """A connection was lent out."""
        with self._lock:
            self._lent += 1

    def given_back(self, *, broken: bool) -> None:
        """A lent connection comes back (``broken``: unusable)."""
        with self._lock:
            self._lent -= 1
            if broken:
                self._broke += 1
            else:
                self._answered += 1


class _PoolExhausted(Exception):
    """Raised by ``_borrow`` for a wait on a pool whose connections were all busy (its
    cause: the driver's ``PoolTimeout``); ``_retrying`` turns it into ``_PoolBusy``,
    naming the operation."""

    def __init__(self, size: int, waited: float) -> None:
        super().__init__(size, waited)
        self.size = size
        self.waited = waited


def _lanes_busy(size: int, waited: float) -> _PoolExhausted:
    """A save's wait for a group-commit lane (each holds a pooled connection) ran out:
    as a wait on the pool itself, which ``_retrying`` makes a ``_PoolBusy``."""
    exc = _PoolExhausted(size, waited)
    exc.__cause__ = TimeoutError(f"the saves queued ahead held every connection for {waited:g} s")
    return exc


class _PoolBusy(StoreBusy):
    """``StoreBusy`` for a wait on the store's own pool: every pooled connection stayed in
    use for the whole wait while the server answered (see ``_borrow``). Its own message:
    ``StoreBusy``'s speaks of a server-side lock, which is not what held it up."""

    def __init__(self, where: str, action: str, size: int, waited: float, error: BaseException):
        SupervisorError.__init__(
            self,
            f"checkpoint database {where}: {action} waited for a connection, but all {size} "
            f"connections of the store's pool were busy for {waited:g} s ({error}); nothing "
            "was written. Retry it; if this persists, raise pool_size or lower the load",
        )
        self.where = where
        self.action = action


class _RanTooLong(StoreBusy):
    """``StoreBusy`` for a statement the server cancelled after ``statement_timeout`` (the
    store's: twice ``transaction_timeout``): its own message, as ``StoreBusy``'s speaks of
    a lock, which may not be what held it up."""

    def __init__(self, where: str, action: str, limit: float, error: BaseException):
        SupervisorError.__init__(
            self,
            f"checkpoint database {where} cancelled {action}: it ran longer than {limit:g} s "
            f"(the store's statement_timeout, twice transaction_timeout; {error}); nothing "
            "was written. Retry it; if this persists, look for what slows the server "
            "(pg_stat_activity), or raise transaction_timeout",
        )
        self.where = where
        self.action = action


def _heard_within(
    conn: psycopg.Connection[Any], gen: Generator[Any, Any, T], limit: float, lost: type[Exception]
) -> Generator[Any, Any, T]:
    """``gen`` (a wait generator of psycopg, run by ``conn.wait``), failing once ``conn``'s
    socket has stayed silent for ``limit`` seconds: neither readable nor writable, while the
    server owes an answer. psycopg's waits resume their generator with "nothing ready" every
    0.1 s, which is when the time is checked. A live server answers sooner (it cancels a
    statement after ``statement_timeout``, which ``limit`` exceeds); a silent one (a
    network partition without a reset, a hung server) would be waited for without end.
    The connection is then closed (broken: the statement's fate is unknown) and ``lost``
    raised, which the store turns into ``StoreUnreachable``."""
    deadline = monotonic() + limit
    try:
        state = next(gen)
        while True:
            ready = yield state
            if ready:
                deadline = monotonic() + limit
            elif monotonic() >= deadline:
                gen.close()
                conn.pgconn.finish()
                raise lost(
                    f"the server did not answer for {limit:g} s, so the connection was closed: "
                    "whether it was done is unknown (a network partition or a hung server?)"
                )
            state = gen.send(ready)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


@functools.cache
def _connection_class() -> type[psycopg.Connection[tuple[Any, ...]]]:
    """psycopg's ``Connection`` whose waits for the server are bounded (``_heard_within``)
    when its ``silence_limit`` is set: every connection of the store's (``connect``, and
    the pool's)."""
    import psycopg  # noqa: PLC0415 (present: a store opened, see _driver)

    class _StoreConnection(psycopg.Connection[tuple[Any, ...]]):
        silence_limit: float | None = None

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            limit = self.silence_limit
            if limit is not None:
                gen = _heard_within(self, gen, limit, psycopg.OperationalError)
            return super().wait(gen, *args, **kwargs)

    _StoreConnection.__qualname__ = "_StoreConnection"
    return _StoreConnection


def _tcp_defaults(psycopg: Any, conninfo: str, silence: float) -> dict[str, Any]:
    """libpq's TCP settings that let the kernel notice a dead peer within about ``silence``
    seconds (keepalives on an idle connection, ``tcp_user_timeout`` on data the peer never
    acknowledges), leaving those the connection string sets."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    step = max(1, math.ceil(silence / 4))
    defaults = {
        "keepalives": 1,
        "keepalives_idle": step,
        "keepalives_interval": step,
        "keepalives_count": 3,
        "tcp_user_timeout": max(1, math.ceil(silence * 1000)),
    }
    if psycopg.pq.version() < 120000:  # libpq before 12 has no tcp_user_timeout
        del defaults["tcp_user_timeout"]
    return {name: value for name, value in defaults.items() if name not in given}


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


def _driver() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, imported on first use.

    Raises:
        ImportError: the ``postgres`` extra is not installed (the message says how).
    """
    try:
        import psycopg  # noqa: PLC0415 (an optional dependency, loaded when a store opens)
        import psycopg_pool  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(
            f"PostgresCheckpointStore needs psycopg 3 and psycopg-pool ({exc}); install them "
            "with pip install 'sessionvisor[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


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
        _check_pool_size(pool_size)
        for name, value in (
            ("connect_timeout", connect_timeout),
            ("transaction_timeout", transaction_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        driver, pool_driver = _driver()
        _check_conninfo(driver, conninfo)
        self._psycopg = driver
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
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
            "application_name": "sessionvisor",
            "options": (
                f"-c idle_in_transaction_session_timeout={timeout_ms} -c lock_timeout={timeout_ms}"
                f" -c statement_timeout={2 * timeout_ms}"
            ),
            **_tcp_defaults(driver, conninfo, self._silence_limit),
        }
        self.conninfo = conninfo
        self.where = _describe(driver, conninfo)
        self._closed = False
        try:
            with self.connect() as conn:
                self.where = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
                conn.execute("SET statement_timeout = 0")  # a migration may rewrite big tables
                migrate(conn, self.schema)
        except driver.OperationalError as exc:
            raise StoreUnreachable(self.where, "opening the store", exc) from exc
        except driver.Error as exc:
            if exc.sqlstate != _READ_ONLY:
                raise
            raise StoreUnreachable(self.where, _read_only("opening the store"), exc) from exc
        self._pool_timeout: type[Exception] = pool_driver.PoolTimeout
        self._use = _PoolUse(pool_size)
        self._pool: psycopg_pool.ConnectionPool[Any] = pool_driver.ConnectionPool(
            conninfo,
            connection_class=_connection_class(),
            configure=self._configure,
            min_size=1,
            max_size=pool_size,
            kwargs=self._connect_kwargs,
            open=False,
            name=f"sessionvisor-{self.schema}",
            timeout=connect_timeout,
        )
        self._pool.open()
        self._commits = PoolCommit(
            pool_size,
            self._borrow,
            driver.Error,
            lane_wait=connect_timeout,
            busy=functools.partial(_lanes_busy, pool_size),
        )
        q = functools.partial(qualify, schema=self.schema)
        self._q_save = q(_SAVE)
        self._q_merge = q(_MERGE)
        self._q_log_row = q(_LOG_ROW)
        self._q_latest = q(_LOAD.replace("{where}", ""))
        self._q_one = q(_LOAD.replace("{where}", " AND checkpoint_id = %s"))
        self._q_list = q(_LIST)
        self._q_sessions = q(_SESSIONS)
        self._q_delete_all = q(_DELETE_ALL)
        self._q_delete_one = q(_DELETE_ONE)
        self._q_prune = q(_PRUNE)
        self._q_collect = q(_COLLECT)
        self._q_lock_log = q(_LOCK_LOG)

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
        connections' are (``silence_limit``; see ``_heard_within``): on a server gone
        silent without a reset (a partition, a hung server, a connection a middlebox
        dropped) a heartbeat used to wait without end, its thread stuck and the node
        fenced, where a new connection would have been answered. A listener, whose waits
        for notifications owe no answer, sets the connection's ``silence_limit`` to
        ``None`` around them.

        Raises:
            psycopg.OperationalError: it cannot be made.
        """
        conn: psycopg.Connection[tuple[Any, ...]] = _connection_class().connect(
            self.conninfo, **self._connect_kwargs
        )
        self._configure(conn)
        return conn

    def _configure(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Bound a new pooled connection's waits for the server (``_heard_within``)."""
        conn.silence_limit = self._silence_limit  # type: ignore[attr-defined]

    @contextmanager
    def _borrow(
        self, timeout: float | None = None
    ) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection, for the ``with`` block, waited for at most ``timeout`` seconds
        (``None``: ``connect_timeout``; a save's group commit passes what is left of it).

        The pool raises ``PoolTimeout`` when no connection came within its wait: either
        every connection was busy, or none could be made (the server down or restarting:
        the pool's connections broke and new ones fail). Which one is told by what the
        borrowers saw during the wait, not by the pool's statistics (which count
        connections still being made as there): busy when no connection came back broken
        and either all ``pool_size`` are lent out now or one came back unbroken (the
        server answered; it went to a borrower queued first). Busy raises
        ``_PoolExhausted``, which ``_retrying`` makes a ``StoreBusy`` naming the
        operation (at once, nothing written); otherwise the ``PoolTimeout`` goes on and
        becomes ``StoreUnreachable``.

        Raises:
            _PoolExhausted: every connection of the pool stayed in use for the whole wait.
            psycopg_pool.PoolTimeout: no connection could be had (the server unreachable).
            ValueError: the store is closed.
        """
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        use = self._use
        before = use.returns()
        # getconn/putconn rather than connection(): its ``with conn`` would only commit an
        # autocommit connection (a no-op); putconn rolls back a transaction left open.
        try:
            conn = self._pool.getconn(timeout)
        except self._pool_timeout as exc:
            if use.busy_since(before):
                raise _PoolExhausted(use.size, self._pool.timeout) from exc
            raise
        use.lend()
        try:
            yield conn
        finally:
            use.given_back(broken=conn.broken or conn.closed)
            self._pool.putconn(conn)

    def _findable(self, session_id: object, checkpoint_id: object = None) -> bool:
        """Whether a row of these ids could have been stored (``storable_text``): a read of
        one that could not finds nothing without asking the server.

        Raises:
            ValueError: the store is closed (as a query would).
        """
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        return _may_exist(session_id, checkpoint_id)

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
        return self._retrying(action, lambda: self._once(work), session_id)

    def _once(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        with self._borrow() as conn:
            return work(conn)

    def _retrying(
        self,
        action: str,
        attempt: Callable[[], T],
        session_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> T:
        """``attempt()``, once more if the connection broke; the driver's errors as the
        store's (``session_id``, ``checkpoint_id``: the ids the attempt writes, if any)."""
        psycopg = self._psycopg
        first: BaseException | None = None  # what broke the first try's connection
        for tries in (1, 2):
            try:
                return attempt()
            except _PoolExhausted as exc:  # the server answers: no retry, no pool check
                cause = exc.__cause__ or exc
                if tries == 2:  # after a broken connection: what the first try did is unknown
                    raise StoreUnreachable(self.where, action, _both(first, cause)) from cause
                raise _PoolBusy(self.where, action, exc.size, exc.waited, cause) from cause
            except psycopg.OperationalError as exc:
                if self._closed:
                    raise ValueError(f"{self!r} is closed") from exc
                state = exc.sqlstate or ""
                if state == _QUERY_CANCELED and "statement timeout" in str(exc):
                    raise _RanTooLong(self.where, action, self._statement_timeout, exc) from exc
                if state in _CANCELLED_WAITING:
                    raise StoreBusy(self.where, action, exc) from exc
                if state == _DISK_FULL:
                    raise StoreFull(self.where, exc) from exc
                if state == _TOO_LARGE and session_id is not None and "index row" in str(exc):
                    raise _too_long_id(session_id, exc, checkpoint_id) from exc
                lost = not state or state.startswith(_CONNECTION_LOST)
                if not lost:
                    raise
                self._pool.check()  # replace the pool's other broken connections now
                if tries == 2:
                    raise StoreUnreachable(self.where, action, _both(first, exc)) from exc
                first = exc
            except psycopg.Error as exc:  # (not an OperationalError: those are above)
                if exc.sqlstate != _READ_ONLY:
                    raise
                if self._closed:
                    raise ValueError(f"{self!r} is closed") from exc
                # Every pooled connection may be on that server: new ones may reach a
                # writable one (a conninfo of several hosts with target_session_attrs).
                self._pool.drain()
                if tries == 2:
                    raise StoreUnreachable(self.where, _read_only(action), exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

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
                busy; nothing was stored, and saving it again is safe.
            StoreFull: the server's disk is full; nothing was stored.
            SnapshotTooLarge, actors.SnapshotEncodeError: as for every store.
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
        # CheckpointInfo times are UTC; a moment UTC cannot hold raises here, storing nothing
        saved_at = snapshot.saved_at.astimezone(UTC)
        write = functools.partial(self._write, snapshot, cut, cached, fence)
        try:
            entry = self._retrying(
                "a save", lambda: self._commits.run(write), sid, snapshot.checkpoint_id
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
            row = self._call(conn, (*head, cut.body, check, *_NO_LOG, *_NONE_LOG, self._keep_last))
            self._check_fence(row, sid, fence)
            return None
        plan = extend_cached(cut, cached) if cached is not None else new_log(cut, None)
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
        fence: Fence | None,
    ) -> CachedLog | None:
        """Call the save function for a checkpoint with messages written as ``plan`` says;
        what to remember of the log, or ``None`` when the log was not the one expected."""
        messages = cut.messages
        assert messages is not None
        ref = (plan.gen, messages.length, cut.count, plan.digest)
        expect = plan.expect or (None, None, None)
        check = seal(cut.body, ref)
        params = (*head, cut.body, check, *ref, *expect, plan.append_at, plan.append)
        row = self._call(conn, (*params, plan.digest, self._keep_last))
        self._check_fence(row, head[0], fence)
        if row[0] != 0:
            return None
        carried = merges(row[1]) if plan.append_at > 0 and plan.append else 0
        if carried:  # this append carries a digit of the log's count: its chunks merge
            merge = (head[0], plan.gen, messages.length, carried + 1)
            conn.execute(self._q_merge, merge)
        known = messages.known()  # split's bytes (immutable, no copy) or their lineage
        return CachedLog(plan.gen, messages.length, plan.digest, known, plan.hasher)

    def _call(
        self, conn: psycopg.Connection[tuple[Any, ...]], params: tuple[Any, ...]
    ) -> tuple[int, int, int]:
        row = _save_cursor(conn).execute(self._q_save, params).fetchone()
        assert row is not None
        status, chunks, epoch = row
        return status, chunks, epoch

    @staticmethod
    def _check_fence(row: tuple[int, int, int], sid: str, fence: Fence | None) -> None:
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

    def _plan_from_row(
        self, conn: psycopg.Connection[tuple[Any, ...]], sid: str, cut: SplitSnapshot
    ) -> LogPlan:
        """Plan against the session's log row as it is now, locked until the commit."""
        row = conn.execute(self._q_log_row, (sid,), binary=True).fetchone()
        return plan_for_row(cut, row)

    # --- read -----------------------------------------------------------------------------

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The checkpoint, or the session's newest (see ``CheckpointStore.load``)."""
        if not self._findable(session_id, checkpoint_id):
            raise CheckpointNotFound(session_id, checkpoint_id)  # no save could store it
        query = self._q_latest if checkpoint_id is None else self._q_one
        params = (session_id,) if checkpoint_id is None else (session_id, checkpoint_id)
        row = self.run("a load", lambda conn: conn.execute(query, params, binary=True).fetchone())
        if row is None:
            raise CheckpointNotFound(session_id, checkpoint_id)
        cid, body, gen, length, count, digest, check, starts, datas = row
        try:
            verify(check, body, (gen, length, count, digest))
            messages = None
            if gen is not None:
                if not isinstance(length, int) or not isinstance(digest, bytes):
                    raise SnapshotDecodeError("message log reference is damaged")
                chunks = list(zip(starts or (), datas or (), strict=True))
                messages = assemble(chunks, length, digest)
            snapshot = join(body, messages, count, self._migrations)
            check_identity(snapshot, session_id, cid)
        except SnapshotDecodeError as exc:
            raise in_checkpoint(exc, session_id, cid) from None
        return snapshot

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first by ``(epoch, checkpoint_id)``."""
        if not self._findable(session_id):
            return []
        rows = self.run(
            "a listing", lambda conn: conn.execute(self._q_list, (session_id,)).fetchall()
        )
        return [
            CheckpointInfo(session_id, cid, from_micros(us), label, size)
            for cid, us, label, size in rows
        ]

    def sessions(self) -> builtins.list[str]:
        """Sessions with at least one checkpoint, sorted."""
        rows = self.run("a listing", lambda conn: conn.execute(self._q_sessions).fetchall())
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
            statement, params = self._q_delete_all, (session_id, session_id)
        else:
            statement, params = self._q_delete_one, (session_id, checkpoint_id)
        removed = self.run(
            "a delete", lambda conn: self._remove(conn, session_id, statement, params)
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
            "a prune", lambda conn: self._remove(conn, session_id, self._q_prune, params)
        )

    def _remove(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        sid: str,
        statement: bytes,
        params: tuple[Any, ...],
    ) -> int:
        """Delete checkpoints of ``sid`` with ``statement``, then the message-log rows no
        checkpoint uses any more, in one transaction; returns how many checkpoints went.

        The log's row is locked first: a save in flight holds it until it commits, so
        this waits for that save and then sees its checkpoint. Without the lock,
        ``collect_logs`` could miss the checkpoint and delete the log chunks it uses,
        leaving it unloadable. A session without a log row has no chunks to collect
        (saves write the two together; those a save in flight adds belong to its own
        checkpoint), so then nothing is collected.
        """
        with conn.transaction():
            has_log = conn.execute(self._q_lock_log, (sid,)).fetchone() is not None
            removed: int = conn.execute(statement, params).rowcount
            if removed and has_log:
                conn.execute(self._q_collect, (sid,))
        return removed

    def close(self) -> None:
        """Close every connection of the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        self._logs.clear()


def storable_text(value: object) -> bool:
    """Whether ``value`` is a ``str`` a PostgreSQL ``text`` column can hold (no NUL
    character, no lone surrogate, which UTF-8 cannot encode): an id that is not can have
    no row, so a read of it finds nothing."""
    return isinstance(value, str) and "\x00" not in value and encodable(value)


def _may_exist(session_id: object, checkpoint_id: object = None) -> bool:
    """Whether a row of these ids could have been stored (``storable_text``)."""
    return storable_text(session_id) and (checkpoint_id is None or storable_text(checkpoint_id))


def check_text(name: str, value: object) -> str:
    """``value`` if a PostgreSQL ``text`` column can store it.

    Raises:
        TypeError: not a ``str``.
        ValueError: it holds a NUL character, which PostgreSQL text cannot store (the
            SQLite and memory stores can: such an id cannot move to PostgreSQL).
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    at = value.find("\x00")
    if at >= 0:
        raise ValueError(
            f"{name} {value[:80]!r} holds a NUL character ('\\x00') at index {at}, which "
            "PostgreSQL text cannot store; use an id without it (e.g. replace it, or "
            "hex-encode such ids)"
        )
    return value


def _both(first: BaseException | None, last: BaseException) -> BaseException:
    """The error of a retry, naming the first try's too when it differs (it tells whether
    that try's work may have been done): what ``StoreUnreachable`` quotes."""
    if first is None or str(first) == str(last):
        return last
    return type(last)(f"{last}; the first try: {first}")


def _read_only(action: str) -> str:
    """``action`` as ``StoreUnreachable`` names it when the server refused it as read-only."""
    return (
        f"{action}: the server refuses writes (read-only: a standby?); point the connection "
        "string at the primary, e.g. list every host with target_session_attrs=read-write"
    )


def _too_long_id(
    session_id: str, exc: BaseException, checkpoint_id: str | None = None
) -> ValueError:
    """The error for an id PostgreSQL refused as too long for an index entry (SQLSTATE
    54000, ``exc``): which id (the longer of the session id and ``checkpoint_id``, which
    share the checkpoints' key), what was wrong and what to do. Nothing was written."""
    name, value = "session", session_id
    if checkpoint_id is not None and len(checkpoint_id.encode()) > len(session_id.encode()):
        name, value = "checkpoint", checkpoint_id
    size = len(value.encode())
    return ValueError(
        f"{name} id {value[:60]!r}... ({size} bytes) is too long for the PostgreSQL "
        f"store's indexes ({exc}); nothing was stored. Use {name} ids of at most 2,000 bytes "
        "(e.g. a hash of a longer name)"
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


def _check_conninfo(psycopg: Any, conninfo: object) -> None:
    """Refuse what is not a connection string before anything connects.

    The driver's own message is not repeated: it quotes the string, which may hold a
    password.

    Raises:
        TypeError: ``conninfo`` is not a ``str``.
        ValueError: the driver cannot parse it.
    """
    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, got {type(conninfo).__name__}")
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise ValueError(
            "conninfo is not a PostgreSQL connection string: give a URI "
            "(postgresql://user@host:5432/dbname) or key=value pairs "
            "(host=... dbname=...), or '' for the PG* environment variables"
        ) from None


def _describe(psycopg: Any, conninfo: str) -> str:
    """``host:port/dbname`` of a connection string, without its password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(invalid connection string)"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


for _cls in (PostgresCheckpointStore, Fence):
    _cls.__module__ = "supervisor"
