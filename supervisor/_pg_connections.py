"""How the PostgreSQL store connects: the optional driver, the options it is given, and
connections that stop waiting on a server gone silent.

psycopg is imported only when a store opens (``driver``), so ``import supervisor``
works without the ``postgres`` extra. Every store connection (its own ``connect``
and the pool's) is a ``connection_class()`` whose waits for the server give up
after ``silence_limit`` seconds without a sound (``heard_within``), and carries
libpq's TCP keepalives (``tcp_defaults``) unless the connection string sets them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Generator
from time import monotonic
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MAX_POOL_SIZE",
    "check_conninfo",
    "check_options",
    "connect_options",
    "connection_class",
    "describe",
    "driver",
    "heard_within",
    "tcp_defaults",
]

T = TypeVar("T")

MAX_POOL_SIZE = 1000
"""The largest ``pool_size``: more connections than any server's ``max_connections``
sensibly allows (each is a server process)."""


def check_options(pool_size: object, connect_timeout: float, transaction_timeout: float) -> None:
    """Refuse a ``pool_size`` that is not an int from 1 to ``MAX_POOL_SIZE``, and a timeout
    that is not above 0 seconds.

    Raises:
        ValueError: one is not; the message says what suits.
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
    for name, value in (
        ("connect_timeout", connect_timeout),
        ("transaction_timeout", transaction_timeout),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}")


def driver() -> tuple[Any, Any]:
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


def check_conninfo(psycopg: Any, conninfo: object) -> None:
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


def describe(psycopg: Any, conninfo: str) -> str:
    """``host:port/dbname`` of a connection string, without its password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(invalid connection string)"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def connect_options(
    psycopg: Any, conninfo: str, *, connect_timeout: float, timeout_ms: int, silence: float
) -> dict[str, Any]:
    """The keyword arguments of every store connection: autocommit, the store's server-side
    timeouts (``idle_in_transaction_session_timeout`` and ``lock_timeout`` of
    ``timeout_ms``, ``statement_timeout`` of twice that) and ``tcp_defaults``."""
    return {
        "autocommit": True,
        "connect_timeout": max(1, round(connect_timeout)),
        "application_name": "sessionvisor",
        "options": (
            f"-c idle_in_transaction_session_timeout={timeout_ms} -c lock_timeout={timeout_ms}"
            f" -c statement_timeout={2 * timeout_ms}"
        ),
        **tcp_defaults(psycopg, conninfo, silence),
    }


def tcp_defaults(psycopg: Any, conninfo: str, silence: float) -> dict[str, Any]:
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


def heard_within(
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
def connection_class() -> type[psycopg.Connection[tuple[Any, ...]]]:
    """psycopg's ``Connection`` whose waits for the server are bounded (``heard_within``)
    when its ``silence_limit`` is set: every connection of the store's (``connect``, and
    the pool's)."""
    import psycopg  # noqa: PLC0415 (present: a store opened, see driver)

    class _StoreConnection(psycopg.Connection[tuple[Any, ...]]):
        silence_limit: float | None = None

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            limit = self.silence_limit
            if limit is not None:
                gen = heard_within(self, gen, limit, psycopg.OperationalError)
            return super().wait(gen, *args, **kwargs)

    _StoreConnection.__qualname__ = "_StoreConnection"
    return _StoreConnection
