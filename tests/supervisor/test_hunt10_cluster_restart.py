"""Hunt 10: a node restarted under its node id after its previous run was killed.

The killed run's lease stays live for its TTL. The restarted process used to get
``NodeIdInUse`` until then (a minute here), and its sessions waited as long for any
node. Now, when the lease's holder is provably gone (this machine, this PID
namespace, its PID no longer that process), it takes the id over at once, and its
sessions with it. A holder it cannot prove gone (alive, or on another machine) still
holds the id until its TTL lapses.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor import NodeIdInUse, PostgresCheckpointStore
from supervisor.cluster import ClusterNode, LeaseTable, NodeConfig
from supervisor.cluster._holder import gone, new_holder
from tests.supervisor.cluster_helpers import sql

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0
TTL = 60.0  # no lease lapses during a test

_KILLED_RUN = textwrap.dedent(
    """
    import os, sys
    from supervisor import PostgresCheckpointStore
    from supervisor.cluster import ClusterNode, NodeConfig

    store = PostgresCheckpointStore(sys.argv[1], schema=sys.argv[2])
    node = ClusterNode(store, NodeConfig(node_id="n", address="old", ttl=60.0, events=None))
    print(node.claim("s"), flush=True)
    os._exit(0)  # killed: no drain, its lease live for its TTL
    """
)


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    made = PostgresCheckpointStore(pg_dsn, schema=pg_schema)
    yield made
    made.close()


def _killed_run(dsn: str, schema: str) -> None:
    """Run node ``n`` in a process of its own that claims session ``s`` and dies."""
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_RUN, dsn, schema],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # it claimed s at epoch 1


def test_a_node_restarted_after_a_kill_takes_its_id_and_sessions_over_at_once(
    pg_dsn: str, store: PostgresCheckpointStore
) -> None:
    _killed_run(pg_dsn, store.schema)
    node = ClusterNode(store, NodeConfig(node_id="n", address="new", ttl=TTL, events=None))
    try:
        assert node.incarnation == 2
        assert node.claim("s") == 2  # the killed run's session, at once
        rows = sql(store, "SELECT incarnation, address FROM {s}.nodes WHERE node_id = 'n'")
        assert rows == [(2, "new")]
    finally:
        node.drain()


def test_a_live_holder_keeps_its_id(store: PostgresCheckpointStore, pg_dsn: str) -> None:
    live = ClusterNode(store, NodeConfig(node_id="n", address="live", ttl=TTL, events=None))
    other = PostgresCheckpointStore(pg_dsn, schema=store.schema)
    try:
        with pytest.raises(NodeIdInUse, match=r"node id 'n' is in use by a live process at 'live'"):
            ClusterNode(other, NodeConfig(node_id="n", address="second", ttl=TTL, events=None))
        assert live.renew() is True  # still its own
    finally:
        live.drain()
        other.close()


def test_a_holder_on_another_machine_keeps_its_id_until_its_ttl(
    pg_dsn: str, store: PostgresCheckpointStore
) -> None:
    _killed_run(pg_dsn, store.schema)
    # as if that run had been on another machine: nothing here can tell it ended
    sql(store, "UPDATE {s}.nodes SET holder = 'linux:another-boot:1-1:7:7#00' WHERE node_id = 'n'")
    with pytest.raises(NodeIdInUse, match=r"in use by a live process at 'old'"):
        ClusterNode(store, NodeConfig(node_id="n", address="new", ttl=TTL, events=None))
    sql(store, "UPDATE {s}.nodes SET heartbeat = heartbeat - interval '1 hour'")  # lapsed
    node = ClusterNode(store, NodeConfig(node_id="n", address="new", ttl=TTL, events=None))
    try:
        assert node.incarnation == 2
    finally:
        node.drain()


def test_a_registration_sent_again_finds_its_own_row(store: PostgresCheckpointStore) -> None:
    """``store.run`` sends a statement again when its connection broke, maybe after the
    first try committed: a registration sent twice is one registration, not a live
    holder of its own id (``NodeIdInUse`` at the start of a node)."""
    table = LeaseTable(store)
    token = new_holder()
    assert table.register("n", "here", TTL, token, gone) == 1
    assert table.register("n", "here", TTL, token, gone) == 1  # sent again: the same
    assert table.register("n", "there", TTL, new_holder(), gone) == ("here", TTL)
