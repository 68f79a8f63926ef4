"""How ``ClusterEvents`` carries events between nodes: PostgreSQL LISTEN/NOTIFY or Redis Pub/Sub.

A transport moves text payloads (one JSON object per event, see ``_events``)
on one channel per cluster; it is never the authority on what happened: a
payload lost on the way is a gap a follower reports as missed.

* ``PgNotify`` (the default): ``pg_notify`` inside the publisher's transaction
  that raises the sessions' event marks, so no node hears of an event whose
  seq is not durable yet, and a claim (which waits on the same rows) orders
  every notice of an older owner before the new owner's. A payload must be
  shorter than 8000 bytes (PostgreSQL's limit): a larger event is sent as a
  marker without its data (``inline_limit``).
* ``RedisPubSub``: ``PUBLISH`` after that transaction committed; no size limit
  that matters (Redis allows 512 MB).

Both listen on a thread of the caller's (``listen``), reconnecting after an
error; whatever was published meanwhile is lost, and shows as a gap.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg

    from supervisor.postgres_store import PostgresCheckpointStore

__all__ = ["NOTIFY_LIMIT", "PgNotify", "RedisPubSub", "Transport", "channel_for", "transport_for"]

logger = logging.getLogger("supervisor.cluster")

NOTIFY_LIMIT = 8000
"""A NOTIFY payload must be shorter than this many bytes (PostgreSQL's own limit)."""

_RETRY = 0.5  # seconds between two attempts to listen again after an error
_POLL = 0.2  # seconds a listener waits for a payload before it checks whether to stop
_PING = 5.0  # seconds at most between two round trips on a quiet LISTEN connection


_DATABASE = "SELECT current_database()"
_SERVER = "SELECT system_identifier FROM pg_control_system()"


def channel_for(store: PostgresCheckpointStore) -> str:
    """The channel of the cluster whose tables ``store`` opens: one per database and schema,
    a lowercase identifier short enough for PostgreSQL (63 bytes).

    The database is named as the server knows it (its name, and the server's system
    identifier), not by the address this process reached it at: nodes that reach one
    database by different names (``localhost`` and ``127.0.0.1``, a DNS name and an IP, a
    connection pooler) must share one channel, or they never hear each other's events.

    Raises:
        StoreUnreachable: the database cannot be reached.
    """

    def identify(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
        import psycopg  # noqa: PLC0415 (the [postgres] extra, present once a store opened)

        row = conn.execute(_DATABASE).fetchone()
        database = "" if row is None else str(row[0])
        try:  # one server's databases share a name space; a Redis server may serve many
            with conn.transaction():
                server = conn.execute(_SERVER).fetchone()
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction):
            server = None  # revoked by a hosted service, or a server without it
        return f"{'' if server is None else server[0]}/{database}"

    database = store.run("identifying the database", identify)
    digest = hashlib.blake2b(f"{database}/{store.schema}".encode(), digest_size=8)
    return f"sessionvisor_events_{digest.hexdigest()}"


class Transport(Protocol):
    """One cluster's channel. Implementations are thread-safe: one publisher thread and one
    listener thread use it at once."""

    inline_limit: int | None
    """Payloads of this many bytes or more are not sent whole (``None``: no limit)."""

    problem: str | None
    """Why the last attempt to listen failed (``None`` once listening): what ``follow``
    reports when it cannot listen."""

    def in_transaction(
        self, conn: psycopg.Connection[tuple[Any, ...]], payloads: list[str]
    ) -> None:
        """Send ``payloads`` as part of the publisher's open transaction on ``conn``."""
        ...

    def after_commit(self, payloads: list[str]) -> None:
        """Send ``payloads`` once that transaction committed."""
        ...

    def listen(
        self, deliver: Callable[[str], None], ready: threading.Event, stopping: threading.Event
    ) -> None:
        """Call ``deliver(payload)`` for every payload on the channel until ``stopping`` is
        set, setting ``ready`` each time it (re)starts listening."""
        ...

    def close(self) -> None:
        """Release what the transport holds (after ``listen`` returned)."""
        ...


class PgNotify:
    """LISTEN/NOTIFY on the store's database. Thread-safe (see ``Transport``).

    Args:
        store: The cluster's store (its connection settings and schema).
    """

    inline_limit: int | None = NOTIFY_LIMIT

    def __init__(self, store: PostgresCheckpointStore) -> None:
        self._store = store
        self.channel = channel_for(store)
        self.problem: str | None = None

    def in_transaction(
        self, conn: psycopg.Connection[tuple[Any, ...]], payloads: list[str]
    ) -> None:
        if payloads:  # one statement for the batch
            conn.execute(
                "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", (self.channel, payloads)
            )

    def after_commit(self, payloads: list[str]) -> None:
        pass

    def listen(
        self, deliver: Callable[[str], None], ready: threading.Event, stopping: threading.Event
    ) -> None:
        import psycopg  # noqa: PLC0415 (the [postgres] extra, present once a store opened)

        while not stopping.is_set():
            try:
                with self._store.connect() as conn:
                    conn.execute(f"LISTEN {self.channel}".encode())
                    self.problem = None
                    ready.set()
                    self._hear(conn, deliver, stopping)
            except psycopg.Error as exc:
                ready.clear()
                self.problem = f"listening on PostgreSQL failed: {exc}"
                logger.warning("event fan-out: %s", self.problem)
                stopping.wait(_RETRY)

    def _hear(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        deliver: Callable[[str], None],
        stopping: threading.Event,
    ) -> None:
        """Deliver the notifications arriving on ``conn`` until ``stopping``; one ``SELECT 1``
        every ``min(_PING, silence_limit)`` seconds, which the server must answer within the
        connection's ``silence_limit`` (else ``psycopg.OperationalError``). Without it, a
        server gone silent without a reset (a partition, a hung server) left the listener
        waiting for notifications without end, its node deaf to the others' events and
        its followers told nothing was missed."""
        limit = getattr(conn, "silence_limit", None)
        every = _PING if limit is None else min(_PING, limit)
        due = time.monotonic() + every

        def hear(notice: psycopg.Notify) -> None:
            deliver(notice.payload)

        while not stopping.is_set():
            conn.silence_limit = None  # type: ignore[attr-defined]  # (nothing owed here)
            try:
                for notice in conn.notifies(timeout=_POLL):
                    deliver(notice.payload)
            finally:
                conn.silence_limit = limit  # type: ignore[attr-defined]
            if time.monotonic() >= due:
                # What arrives during the ping goes to ``deliver`` through a handler: psycopg
                # before 3.2 keeps no backlog for the next ``notifies``, and would lose it.
                conn.add_notify_handler(hear)
                try:
                    conn.execute("SELECT 1")
                finally:
                    conn.remove_notify_handler(hear)
                due = time.monotonic() + every

    def close(self) -> None:
        pass


class RedisPubSub:
    """Pub/Sub on a Redis server (the ``redis`` library, the ``[redis]`` extra). Thread-safe
    (see ``Transport``).

    Args:
        url: The server's ``redis://`` or ``rediss://`` URL.
        channel: The cluster's channel (``channel_for``).

    Raises:
        ImportError: the ``redis`` library is not installed (named, with the extra).
    """

    inline_limit: int | None = None

    def __init__(self, url: str, channel: str) -> None:
        try:
            import redis  # noqa: PLC0415 (optional extra)
        except ImportError as exc:
            raise ImportError(
                "NodeConfig(events='redis://...') needs the redis library: "
                "pip install 'sessionvisor[redis]'"
            ) from exc
        self._redis = redis
        self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self.channel = channel
        self.problem: str | None = None

    def in_transaction(
        self, conn: psycopg.Connection[tuple[Any, ...]], payloads: list[str]
    ) -> None:
        pass

    def after_commit(self, payloads: list[str]) -> None:
        if payloads:
            pipe = self._client.pipeline(transaction=False)
            for payload in payloads:
                pipe.publish(self.channel, payload)
            pipe.execute()

    def listen(
        self, deliver: Callable[[str], None], ready: threading.Event, stopping: threading.Event
    ) -> None:
        while not stopping.is_set():
            # ``pubsub`` is untyped before redis 8.2, typed from it: either passes mypy
            pubsub = self._client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
            try:
                pubsub.subscribe(self.channel)
                while not stopping.is_set():
                    message = pubsub.get_message(timeout=_POLL)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":  # confirmed: payloads flow from here
                        self.problem = None
                        ready.set()
                    elif message["type"] == "message":
                        deliver(message["data"].decode())
            except self._redis.RedisError as exc:
                ready.clear()
                self.problem = f"listening on Redis failed: {exc}"
                logger.warning("event fan-out: %s", self.problem)
                stopping.wait(_RETRY)
            finally:
                pubsub.close()

    def close(self) -> None:
        self._client.close()


def transport_for(store: PostgresCheckpointStore, events: str) -> Transport:
    """The transport ``NodeConfig.events`` names (``"postgres"`` or a Redis URL)."""
    if events == "postgres":
        return PgNotify(store)
    return RedisPubSub(events, channel_for(store))
