"""Hunt 5: the PostgreSQL store and a cluster node on a server that refuses writes.

A read-only server is what a connection string naming a standby (or a primary
being demoted in a failover) reaches. It is simulated on the test's own database
with ``default_transaction_read_only``, which every new connection takes; the
store's connections are ended (``pg_terminate_backend``) so that they reconnect.
"""

from __future__ import annotations

import psycopg
import pytest

from actors import Snapshot
from supervisor import PostgresCheckpointStore, StoreUnreachable
from supervisor.cluster import ClusterNode, NodeConfig
from tests.actors.snapshot_helpers import session_state
from tests.pg_server import ADMIN_DSN, terminate_connections

READ_ONLY = r"the server refuses writes \(read-only: a standby\?\).*target_session_attrs"


def _set_read_only(dsn: str, on: bool) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    setting = (
        "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    )
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" {setting}'.encode())
    terminate_connections(dsn)


def _snap(sid: str, turns: int) -> Snapshot:
    return Snapshot.new(session_id=sid, state=session_state(turns, session_id=sid))


def test_a_read_only_server_is_a_typed_error_saying_what_to_do_and_writes_resume_after(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as store:
        first = _snap("s", 1)
        store.save(first)
        _set_read_only(pg_dsn, True)
        try:
            with pytest.raises(StoreUnreachable, match=READ_ONLY):
                store.save(_snap("s", 2))
            with pytest.raises(StoreUnreachable, match=READ_ONLY):
                PostgresCheckpointStore(pg_dsn, schema=f"{pg_schema}_new")
            assert store.load("s") == first  # reads go on; nothing was written
        finally:
            _set_read_only(pg_dsn, False)
        second = _snap("s", 2)
        store.save(second)  # on a new connection: the server takes writes again
        assert store.load("s") == second


def test_a_node_on_a_read_only_server_claims_nothing_and_drains_without_raising(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as store:
        node = ClusterNode(store, NodeConfig(node_id="a", ttl=60.0, events=None))
        node.claim("mine")
        _set_read_only(pg_dsn, True)
        try:
            with pytest.raises(StoreUnreachable, match=READ_ONLY):
                node.claim("other")
            assert node.renew() is False  # the heartbeat cannot write either
            node.drain()  # logged, not raised: the TTL frees its sessions
        finally:
            _set_read_only(pg_dsn, False)
        assert node.leases() == {}
