"""Hunt 7: a save queued behind saves that hold every lane of a PostgreSQL store's group
commit (one per pooled connection) waits at most ``connect_timeout`` for one, then raises
the ``StoreBusy`` of a busy pool, unwritten, instead of waiting without limit.

The one lane of a ``pool_size=1`` store is held by a save waiting on a table lock the
test holds (``transaction_timeout`` is long, so the server does not cancel it first).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from actors import Snapshot
from supervisor import CheckpointNotFound, PostgresCheckpointStore, StoreBusy, StoreUnreachable
from tests.actors.snapshot_helpers import session_state
from tests.supervisor.host_helpers import poll_until

BUSY = (
    r"a save waited for a connection, but all 1 connections of the store's pool were busy "
    r"for 1 s .*nothing was written.*raise pool_size or lower the load"
)
BOUND = 30.0  # far past connect_timeout: only reached by a wait without limit


def _snap(sid: str, turns: int) -> Snapshot:
    return Snapshot.new(session_id=sid, state=session_state(turns, session_id=sid))


def _saves_waiting(store: PostgresCheckpointStore) -> int:
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'sessionvisor' AND wait_event_type = 'Lock'"
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_a_save_queued_behind_every_lane_is_store_busy(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresCheckpointStore(
        pg_dsn, schema=pg_schema, pool_size=1, connect_timeout=1, transaction_timeout=60
    )
    first, queued = _snap("s", 1), _snap("q", 1)
    try:
        with ThreadPoolExecutor(2) as pool:
            with psycopg.connect(store.conninfo) as locker:
                locker.execute(f'LOCK TABLE "{store.schema}".checkpoints IN ACCESS EXCLUSIVE MODE')
                try:
                    holder = pool.submit(store.save, first)
                    assert poll_until(lambda: _saves_waiting(store) == 1), "it never waited"
                    behind = pool.submit(store.save, queued)
                    with pytest.raises(StoreBusy, match=BUSY) as busy:
                        behind.result(timeout=BOUND)
                    assert not isinstance(busy.value, StoreUnreachable)
                finally:
                    locker.rollback()
            holder.result(timeout=BOUND)  # the save that held the lane went through
        assert store.load("s") == first
        with pytest.raises(CheckpointNotFound):  # the one that gave up left nothing behind
            store.load("q")
        store.save(queued)  # and the lane serves again
        assert store.load("q") == queued
    finally:
        store.close()
