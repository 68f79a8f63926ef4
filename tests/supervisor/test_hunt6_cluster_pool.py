"""Hunt 6: a PostgreSQL store whose every pooled connection stays busy says so
(``StoreBusy``: raise ``pool_size`` or lower the load), and a server that is down still
says ``StoreUnreachable``: the two send operators to different places.

The one connection of a ``pool_size=1`` store is kept busy by a save waiting on a
table lock the test holds (its ``transaction_timeout`` is long, so the server does not
cancel it first); the test waits until the server reports that save waiting.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from actors import Snapshot
from supervisor import PostgresCheckpointStore, StoreBusy, StoreUnreachable
from supervisor.cluster import ClusterNode, NodeConfig
from tests.actors.snapshot_helpers import session_state
from tests.pg_private import PrivateServer
from tests.supervisor.host_helpers import poll_until

BUSY = (
    r"all 1 connections of the store's pool were busy for 1 s .*nothing was written.*"
    r"raise pool_size or lower the load"
)


def _snap(sid: str, turns: int) -> Snapshot:
    return Snapshot.new(session_id=sid, state=session_state(turns, session_id=sid))


def _saves_waiting(store: PostgresCheckpointStore) -> int:
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'sessionvisor' AND wait_event_type = 'Lock'"
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_every_pooled_connection_busy_is_store_busy_saying_so(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresCheckpointStore(
        pg_dsn, schema=pg_schema, pool_size=1, connect_timeout=1, transaction_timeout=60
    )
    node = ClusterNode(store, NodeConfig(node_id="a", ttl=60.0, events=None))
    outcome: list[BaseException | None] = []
    first = _snap("s", 1)
    try:
        with psycopg.connect(store.conninfo) as locker:
            locker.execute(f'LOCK TABLE "{store.schema}".checkpoints IN ACCESS EXCLUSIVE MODE')

            def save() -> None:
                try:
                    store.save(first)
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            saver = threading.Thread(target=save)
            saver.start()
            try:
                assert poll_until(lambda: _saves_waiting(store) == 1), "the save never waited"
                with pytest.raises(StoreBusy, match=BUSY) as busy:
                    store.load("s")
                assert not isinstance(busy.value, StoreUnreachable)
                assert "check that the server runs" not in str(busy.value)
                # What a gateway routes by: the same answer, which it retries (503).
                with pytest.raises(StoreBusy, match=BUSY):
                    node.owner("s")
                with pytest.raises(StoreBusy, match=BUSY):
                    node.claim("t")
            finally:
                locker.rollback()
                saver.join()
        assert outcome == [None]  # the save that held the connection went through
        assert store.load("s") == first
        assert node.claim("t") == 1  # and the pool serves again
    finally:
        node.drain()
        store.close()


def test_a_stopped_server_is_still_store_unreachable(private_pg: PrivateServer) -> None:
    # The pool waits in vain for a connection there too: that is no busy pool.
    store = PostgresCheckpointStore(private_pg.dsn, pool_size=1, connect_timeout=1)
    try:
        store.save(_snap("s", 1))
        private_pg.stop("fast")
        with pytest.raises(StoreUnreachable, match="check that the server runs") as down:
            store.load("s")
        assert not isinstance(down.value, StoreBusy)
    finally:
        store.close()
