"""Hunt 10: a cluster node's own connections (its heartbeat's, its event listener's) are
bounded against a server gone silent, as the store's pooled ones are.

The server is made silent by a TCP proxy in this process that stops forwarding (a
network partition without a reset, a hung server): the client's kernel sees nothing
wrong, so only a client-side bound ends the wait. Before, a heartbeat blocked its thread
without end (the node fenced, never renewing again), and a listener waited for
notifications without end, its followers told nothing about the events they missed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from supervisor import PostgresCheckpointStore
from supervisor.cluster import ClusterNode, NodeConfig
from supervisor.cluster._transports import PgNotify
from tests.supervisor.host_helpers import poll_until
from tests.supervisor.test_hunt8_pg_silent_server import FreezableProxy

BOUND = 15.0  # far past every bound here (2 s of silence, 1 s to connect, 2 s between pings)


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[FreezableProxy]:
    parts = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    made = FreezableProxy(str(parts.get("host", "127.0.0.1")), int(str(parts.get("port", 5432))))
    yield made
    made.close()


@pytest.fixture
def store(pg_dsn: str, pg_schema: str, proxy: FreezableProxy) -> Iterator[PostgresCheckpointStore]:
    """A store reaching the server through ``proxy``: silent after 2 s (0.5 * 2 + 1)."""
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=proxy.port)
    made = PostgresCheckpointStore(
        dsn, schema=pg_schema, pool_size=1, connect_timeout=1, transaction_timeout=0.5
    )
    yield made
    proxy.thaw()
    made.close()


def test_a_heartbeat_on_a_silent_server_fails_within_the_bound_and_renews_after(
    store: PostgresCheckpointStore, proxy: FreezableProxy
) -> None:
    node = ClusterNode(store, NodeConfig(node_id="n", ttl=60.0, events=None))
    pool = ThreadPoolExecutor(1)
    try:
        assert node.renew() is True
        proxy.freeze()
        beat = pool.submit(node.renew)
        assert beat.result(timeout=BOUND) is False  # not renewed, and the thread is free
        proxy.thaw()
        assert node.renew() is True  # on a new connection: the node serves again
        assert node.fenced is None
    finally:
        proxy.thaw()  # (a heartbeat stuck without the bound ends once the server answers)
        pool.shutdown(wait=True)
        node.drain()


def test_a_listener_on_a_silent_server_notices_and_listens_again(
    store: PostgresCheckpointStore, proxy: FreezableProxy
) -> None:
    transport = PgNotify(store)
    heard: list[str] = []
    ready, stopping = threading.Event(), threading.Event()
    listener = threading.Thread(target=transport.listen, args=(heard.append, ready, stopping))
    listener.start()
    try:
        assert ready.wait(BOUND)
        proxy.freeze()
        assert poll_until(lambda: not ready.is_set(), BOUND), "the listener never noticed"
        assert transport.problem is not None
        assert transport.problem.startswith("listening on PostgreSQL failed")
        proxy.thaw()
        assert ready.wait(BOUND), "the listener did not listen again"
        store.run(
            "a notification",
            lambda conn: conn.execute("SELECT pg_notify(%s, 'back')", (transport.channel,)),
        )
        assert poll_until(lambda: heard == ["back"], BOUND), heard
    finally:
        proxy.thaw()
        stopping.set()
        listener.join(BOUND)
    assert not listener.is_alive()
