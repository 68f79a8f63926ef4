"""``PostgresCheckpointStore``: a save whose log-chunk merge fails after it was committed.

A save alone runs in autocommit mode: the save function commits the checkpoint, and
when its append carries a digit of the log's count (every 8th append) a second
statement merges the log's last chunks (``merge_log_chunks``), an optimisation that
only re-cuts bytes. When that merge failed on a live connection (it waited past
``lock_timeout`` for a chunk another transaction held, or ran past
``statement_timeout`` on a very long log) the save raised ``StoreBusy``, whose
message and contract say "nothing was written", yet the checkpoint was stored and
listed. The save is stored: it must return, its chunks left unmerged for a later merge.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from actors import Snapshot
from supervisor import PostgresCheckpointStore
from tests.actors.snapshot_helpers import session_state


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(
        pg_dsn, schema=pg_schema, keep_last=None, transaction_timeout=0.2
    ) as opened:
        yield opened


def test_a_save_whose_merge_cannot_run_is_stored_and_returns(
    store: PostgresCheckpointStore,
) -> None:
    saved = []
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        for turns in range(1, 11):  # the 8th append merges; the others need no chunk lock
            snapshot = Snapshot.new(session_id="s", state=session_state(turns, session_id="s"))
            with conn.transaction():  # another transaction holds the log's chunks meanwhile
                conn.execute(
                    store.in_schema(
                        "SELECT 1 FROM {s}.message_chunks WHERE session_id = 's' FOR UPDATE"
                    )
                )
                store.save(snapshot)
            saved.append(snapshot)
    listed = [info.checkpoint_id for info in store.list("s")]
    assert listed == [snapshot.checkpoint_id for snapshot in reversed(saved)]
    for snapshot in saved:
        assert store.load("s", snapshot.checkpoint_id) == snapshot
    later = Snapshot.new(session_id="s", state=session_state(11, session_id="s"))
    store.save(later)  # the log goes on, merged or not
    assert store.load("s") == later
