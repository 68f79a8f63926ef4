"""Hunt 8: the waits of a PostgreSQL store's operations are bounded.

A server that stops answering mid-statement (a network partition without a reset, a
hung server: here a TCP proxy in this process that stops forwarding) fails the
operation with ``StoreUnreachable`` once it stayed silent for ``2 * transaction_timeout
+ connect_timeout`` seconds, and the store serves again once the server answers. A
statement the server runs too long is cancelled by its ``statement_timeout`` (twice
``transaction_timeout``) as ``StoreBusy``. A save's wait for a group-commit lane and its
wait for a pooled connection share one ``connect_timeout``.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from actors import Snapshot
from supervisor import (
    CheckpointNotFound,
    PostgresCheckpointStore,
    StoreBusy,
    StoreUnreachable,
    _pg_group_commit,
)
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.host_helpers import poll_until

BOUND = 30.0  # far past every bound of these stores: only reached by a wait without limit


def _snap(sid: str, turns: int) -> Snapshot:
    return Snapshot.new(session_id=sid, state=session_state(turns, session_id=sid))


def _saved(store: PostgresCheckpointStore, snapshot: Snapshot) -> bool:
    try:
        store.save(snapshot)
    except StoreUnreachable:
        return False
    return True


class FreezableProxy:
    """A TCP proxy to a server, in this process; ``freeze()`` stops it forwarding anything
    (the server then looks silent to the client, its connections still open)."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stop = threading.Event()
        self._peers: dict[socket.socket, socket.socket] = {}
        self._thread = threading.Thread(target=self._pump, name="pg-proxy", daemon=True)
        self._thread.start()

    def freeze(self) -> None:
        self._forwarding.clear()

    def thaw(self) -> None:
        self._forwarding.set()

    def _pump(self) -> None:
        while not self._stop.is_set():
            watched = [self._listener, *(self._peers if self._forwarding.is_set() else ())]
            readable, _, _ = select.select(watched, [], [], 0.05)
            for sock in readable:
                if sock is self._listener:
                    client, _ = self._listener.accept()
                    server = socket.create_connection(self._target)
                    self._peers[client], self._peers[server] = server, client
                    continue
                peer = self._peers.get(sock)
                if peer is None:
                    continue
                data = sock.recv(65536)
                if data:
                    peer.sendall(data)
                else:
                    self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        peer = self._peers.pop(sock)
        self._peers.pop(peer, None)
        sock.close()
        peer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(BOUND)
        for sock in list(self._peers):
            if sock in self._peers:
                self._drop(sock)
        self._listener.close()


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[FreezableProxy]:
    parts = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    made = FreezableProxy(str(parts.get("host", "127.0.0.1")), int(str(parts.get("port", 5432))))
    yield made
    made.close()


def test_a_save_on_a_server_that_stops_answering_is_store_unreachable(
    pg_dsn: str, pg_schema: str, proxy: FreezableProxy
) -> None:
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=proxy.port)
    store = PostgresCheckpointStore(
        dsn, schema=pg_schema, pool_size=1, connect_timeout=1, transaction_timeout=0.5
    )
    first, second = _snap("s", 1), _snap("s", 2)
    try:
        store.save(first)
        proxy.freeze()
        with ThreadPoolExecutor(1) as pool:
            saving = pool.submit(store.save, second)
            with pytest.raises(StoreUnreachable, match=r"unreachable during a save") as lost:
                saving.result(timeout=BOUND)
        assert "did not answer for 2 s" in str(lost.value)
        assert "whether it was done is unknown" in str(lost.value)
        proxy.thaw()
        # The session goes on: saving it again is safe (once the pool has reconnected).
        assert poll_until(lambda: _saved(store, second), BOUND), "it never saved again"
        assert store.load("s") == second
    finally:
        proxy.thaw()
        store.close()


def test_a_statement_the_server_runs_too_long_is_cancelled_as_store_busy(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresCheckpointStore(pg_dsn, schema=pg_schema, transaction_timeout=0.5)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                store.run, "a slow statement", lambda conn: conn.execute("SELECT pg_sleep(20)")
            )
            with pytest.raises(StoreBusy, match=r"ran longer than 1 s") as busy:
                running.result(timeout=BOUND)
        assert not isinstance(busy.value, StoreUnreachable)
        assert store.run("a listing", lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
    finally:
        store.close()


class _Clock:
    """``time.monotonic`` that the test can move forward by ``ahead`` seconds."""

    def __init__(self) -> None:
        self.ahead = 0.0
        self._real = time.monotonic

    def __call__(self) -> float:
        return self._real() + self.ahead


def test_a_save_waits_for_a_lane_and_a_connection_within_one_connect_timeout(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only lane is held by a save waiting on a table lock; a second save queues for
    it. When the lock goes, the connection goes to a statement queued on the pool first
    and the lane to the queued save, whose budget is (by the test's clock) all but spent:
    it gives up at once as ``StoreBusy``, instead of waiting a whole new ``connect_timeout``
    for the connection."""
    clock = _Clock()
    monkeypatch.setattr(_pg_group_commit, "monotonic", clock, raising=False)
    store = PostgresCheckpointStore(
        pg_dsn, schema=pg_schema, pool_size=1, connect_timeout=60, transaction_timeout=60
    )
    gate = threading.Event()
    first, queued = _snap("a", 1), _snap("b", 1)
    try:
        with ThreadPoolExecutor(3) as pool:
            with psycopg.connect(store.conninfo) as locker:
                locker.execute(f'LOCK TABLE "{store.schema}".checkpoints IN ACCESS EXCLUSIVE MODE')
                try:
                    holder = pool.submit(store.save, first)
                    assert poll_until(lambda: store._pool.get_stats()["pool_available"] == 0)
                    behind = pool.submit(store.save, queued)
                    assert poll_until(lambda: len(store._commits._queued) == 1)
                    other = pool.submit(store.run, "a held connection", lambda _c: gate.wait(BOUND))
                    assert poll_until(lambda: store._pool.get_stats()["requests_waiting"] == 1)
                    clock.ahead = 59.5
                finally:
                    locker.rollback()
                try:
                    with pytest.raises(StoreBusy, match=r"all 1 connections .* busy for 60 s"):
                        behind.result(timeout=BOUND)
                finally:
                    gate.set()
                holder.result(timeout=BOUND)
                other.result(timeout=BOUND)
        assert store.load("a") == first
        with pytest.raises(CheckpointNotFound):
            store.load("b")
    finally:
        gate.set()
        store.close()


def test_store_connections_notice_a_dead_peer_unless_the_conninfo_says_otherwise(
    pg_dsn: str, pg_schema: str
) -> None:
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, keepalives_idle=7)
    store = PostgresCheckpointStore(dsn, schema=pg_schema, connect_timeout=2, transaction_timeout=1)
    try:
        pooled = store.run("a look at its settings", lambda conn: conn.info.get_parameters())
        with store.connect() as own:
            heartbeat = own.info.get_parameters()
    finally:
        store.close()
    for params in (pooled, heartbeat):
        assert params["keepalives"] == "1"
        assert params["tcp_user_timeout"] == "4000"  # ms: 2 * transaction_timeout + connect
        assert params["keepalives_idle"] == "7"  # the connection string's own
