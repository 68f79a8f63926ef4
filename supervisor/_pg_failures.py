"""The PostgreSQL driver's errors as the store's, and the one retry on a fresh connection.

``retrying`` runs an operation of ``PostgresCheckpointStore`` and reads the SQLSTATE
of what failed: a connection that is gone (tried once more on a fresh one, then
``StoreUnreachable``), a lock or statement the server cancelled (``StoreBusy``:
nothing written), a full disk (``StoreFull``), a server that refuses writes
(every pooled connection replaced, tried once more, then ``StoreUnreachable`` saying
so), an id too long for an index entry (``ValueError``), a pool that stayed busy
(``PoolBusy``), a transaction the server rolled back to break a deadlock (tried once
more, then ``Deadlocked``). ``reported_at_opening`` does the same for a store that opens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from supervisor._pg_pool import PoolExhausted
from supervisor.errors import StoreBusy, StoreFull, StoreUnreachable, SupervisorError

if TYPE_CHECKING:
    import psycopg_pool

__all__ = [
    "READ_ONLY",
    "Deadlocked",
    "PoolBusy",
    "RanTooLong",
    "RetryingStore",
    "refused_read_only",
    "reported_at_opening",
    "retrying",
]

T = TypeVar("T")

# SQLSTATEs of a connection that is gone: class 08, and the server shutting it down.
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")
_TOO_LARGE = "54000"
"""SQLSTATE ``program_limit_exceeded``; with "index row" in its message, a key too long
for a btree index entry (about 2,700 bytes after compression): a session id of thousands
of bytes."""
_DISK_FULL = "53100"
"""SQLSTATE ``disk_full``: the server could not extend a file; the transaction is rolled back."""
READ_ONLY = "25006"
"""SQLSTATE ``read_only_sql_transaction``: the server takes no writes (a standby, a primary
being demoted, ``default_transaction_read_only``); nothing was written."""
_ROLLED_BACK = frozenset({"40P01", "40001"})
"""SQLSTATEs of a transaction the server rolled back for another's sake: a deadlock's
victim (saves of the same sessions from several threads or processes lock their rows in
different orders), or a serialization failure. Nothing was written, and the same work
done again is expected to succeed: tried once more (a save is idempotent, and so must
the cluster's work be), then ``Deadlocked``."""
_QUERY_CANCELED = "57014"
_CANCELLED_WAITING = frozenset({"55P03", _QUERY_CANCELED})
"""SQLSTATEs of a statement the server cancelled while it waited: after ``lock_timeout``
(lock not available), or by a timeout or ``pg_cancel_backend`` (query canceled).
Its transaction rolled back: nothing was written."""


class PoolBusy(StoreBusy):
    """``StoreBusy`` for a wait on the store's own pool: every pooled connection stayed in
    use for the whole wait while the server answered (see ``_pg_pool.borrowed``). Its own
    message: ``StoreBusy``'s speaks of a server-side lock, which is not what held it up."""

    def __init__(self, where: str, action: str, size: int, waited: float, error: BaseException):
        SupervisorError.__init__(
            self,
            f"checkpoint database {where}: {action} waited for a connection, but all {size} "
            f"connections of the store's pool were busy for {waited:g} s ({error}); nothing "
            "was written. Retry it; if this persists, raise pool_size or lower the load",
        )
        self.where = where
        self.action = action


class RanTooLong(StoreBusy):
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


class Deadlocked(StoreBusy):
    """``StoreBusy`` for an operation the server rolled back twice to break a deadlock (or
    for a serialization failure): its own message, as ``StoreBusy``'s speaks of a lock
    waited for too long, which is not what happened."""

    def __init__(self, where: str, action: str, error: BaseException):
        SupervisorError.__init__(
            self,
            f"checkpoint database {where} rolled back {action} twice to break a deadlock "
            f"with other transactions ({error}); nothing was written. Retry it; if this "
            "persists, look for writers of the same sessions at the same time (a session "
            "should have one writer)",
        )
        self.where = where
        self.action = action


class RetryingStore(Protocol):
    """What ``retrying`` uses of ``PostgresCheckpointStore``."""

    where: str
    _psycopg: Any
    _closed: bool
    _statement_timeout: float
    _pool: psycopg_pool.ConnectionPool[Any]


def retrying(
    store: RetryingStore,
    action: str,
    attempt: Callable[[], T],
    session_id: str | None = None,
    checkpoint_id: str | None = None,
) -> T:
    """``attempt()``, once more if the connection broke; the driver's errors as the
    store's (``session_id``, ``checkpoint_id``: the ids the attempt writes, if any)."""
    psycopg = store._psycopg
    first: BaseException | None = None  # what broke the first try's connection
    rolled_back = False  # the first try was rolled back by the server (_ROLLED_BACK)
    for tries in (1, 2):
        try:
            return attempt()
        except PoolExhausted as exc:  # the server answers: no retry, no pool check
            cause = exc.__cause__ or exc
            if tries == 2 and not rolled_back:  # after a broken connection: its fate unknown
                raise StoreUnreachable(store.where, action, _both(first, cause)) from cause
            raise PoolBusy(store.where, action, exc.size, exc.waited, cause) from cause
        except psycopg.OperationalError as exc:
            if store._closed:
                raise ValueError(f"{store!r} is closed") from exc
            state = exc.sqlstate or ""
            if state in _ROLLED_BACK:  # nothing written: once more, on the same terms
                if tries == 2 and first is not None:  # the first try's fate is unknown
                    raise StoreUnreachable(store.where, action, _both(first, exc)) from exc
                if tries == 2:
                    raise Deadlocked(store.where, action, exc) from exc
                rolled_back = True
                continue
            if state == _QUERY_CANCELED and "statement timeout" in str(exc):
                raise RanTooLong(store.where, action, store._statement_timeout, exc) from exc
            if state in _CANCELLED_WAITING:
                raise StoreBusy(store.where, action, exc) from exc
            if state == _DISK_FULL:
                raise StoreFull(store.where, exc) from exc
            if state == _TOO_LARGE and session_id is not None and "index row" in str(exc):
                raise _too_long_id(session_id, exc, checkpoint_id) from exc
            lost = not state or state.startswith(_CONNECTION_LOST)
            if not lost:
                raise
            store._pool.check()  # replace the pool's other broken connections now
            if tries == 2:
                raise StoreUnreachable(store.where, action, _both(first, exc)) from exc
            first = exc
        except psycopg.Error as exc:  # (not an OperationalError: those are above)
            if exc.sqlstate != READ_ONLY:
                raise
            if store._closed:
                raise ValueError(f"{store!r} is closed") from exc
            # Every pooled connection may be on that server: new ones may reach a
            # writable one (a conninfo of several hosts with target_session_attrs).
            store._pool.drain()
            if tries == 2:
                raise StoreUnreachable(store.where, refused_read_only(action), exc) from exc
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def reported_at_opening(store: RetryingStore) -> Iterator[None]:
    """The driver's errors while ``store`` opens (connects, creates or migrates its schema)
    as ``StoreUnreachable`` naming ``store.where`` as it is then: a server that cannot be
    reached, or one that refuses writes (which the schema needs).

    Raises:
        StoreUnreachable: either.
    """
    psycopg = store._psycopg
    try:
        yield
    except psycopg.OperationalError as exc:
        raise StoreUnreachable(store.where, "opening the store", exc) from exc
    except psycopg.Error as exc:
        if exc.sqlstate != READ_ONLY:
            raise
        raise StoreUnreachable(store.where, refused_read_only("opening the store"), exc) from exc


def refused_read_only(action: str) -> str:
    """``action`` as ``StoreUnreachable`` names it when the server refused it as read-only."""
    return (
        f"{action}: the server refuses writes (read-only: a standby?); point the connection "
        "string at the primary, e.g. list every host with target_session_attrs=read-write"
    )


def _both(first: BaseException | None, last: BaseException) -> BaseException:
    """The error of a retry, naming the first try's too when it differs (it tells whether
    that try's work may have been done): what ``StoreUnreachable`` quotes."""
    if first is None or str(first) == str(last):
        return last
    return type(last)(f"{last}; the first try: {first}")


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
