"""``PostgresCheckpointStore``: a save the server picked as a deadlock's victim.

Saves of the same sessions from several threads (or processes) lock the sessions'
rows in different orders, and PostgreSQL breaks the cycle by rolling back one of the
transactions (SQLSTATE 40P01, "deadlock detected"). A batch of saves so rolled back was
run again; a save alone, or one run again alone, raised the driver's own
``psycopg.errors.DeadlockDetected`` to the caller: none of the store's documented
errors, though nothing was written and trying again is all it takes. The store must
try it once more, and if it deadlocks again raise a ``StoreBusy`` saying so.

The cycle is made here by the test's own transaction: it holds the session's
message-log row, the save takes the session's row ``FOR SHARE`` and waits for the log
row, then the test asks for the session's row ``FOR UPDATE``. The save waited first,
so its deadlock check runs first, finds the cycle and rolls the save back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from supervisor import PostgresCheckpointStore, StoreBusy
from supervisor._pg_failures import retrying
from tests.supervisor.host_helpers import WAIT
from tests.supervisor.pg_helpers import store_waits_on_a_lock
from tests.supervisor.store_contract import snap


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as opened:
        yield opened


def test_a_save_rolled_back_by_a_deadlock_is_tried_again_and_stored(
    store: PostgresCheckpointStore,
) -> None:
    first = snap("a", turns=1)
    store.save(first)
    later = snap("a", turns=2)
    outcome: list[BaseException | None] = []
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        # The session's row, owned by no node: saves without a fence take it FOR SHARE.
        conn.execute(
            store.in_schema(
                "INSERT INTO {s}.sessions (session_id, owner_node, owner_incarnation, epoch,"
                " state, claimed_at) VALUES ('a', NULL, NULL, 0, 'active', now())"
            )
        )

        def save() -> None:
            try:
                store.save(later)
            except BaseException as exc:  # reported below
                outcome.append(exc)
            else:
                outcome.append(None)

        worker = threading.Thread(target=save)
        try:
            with conn.transaction():
                conn.execute(
                    store.in_schema(
                        "UPDATE {s}.message_logs SET chunks = chunks WHERE session_id = 'a'"
                    )
                )
                worker.start()
                deadline = time.monotonic() + WAIT
                while not store_waits_on_a_lock(store.conninfo):
                    assert time.monotonic() < deadline, "the save never waited for the log row"
                    time.sleep(0.005)  # a bounded poll of the server
                # Closes the cycle; the save waited first, so the server rolls the save back.
                conn.execute(
                    store.in_schema("SELECT 1 FROM {s}.sessions WHERE session_id = 'a' FOR UPDATE")
                )
        except psycopg.errors.DeadlockDetected:
            pass  # this side came second to the check (a stalled machine): the save goes on
        worker.join(WAIT)
    assert not worker.is_alive()
    assert outcome == [None]
    assert store.load("a") == later
    assert [info.checkpoint_id for info in store.list("a")] == [
        later.checkpoint_id,
        first.checkpoint_id,
    ]


def test_a_second_deadlock_is_store_busy_saying_so(store: PostgresCheckpointStore) -> None:
    tries: list[int] = []

    def deadlocking() -> None:
        tries.append(1)
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    with pytest.raises(StoreBusy, match="deadlock") as caught:
        retrying(store, "a save", deadlocking, "a")
    assert len(tries) == 2
    assert "nothing was written" in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.errors.DeadlockDetected)
