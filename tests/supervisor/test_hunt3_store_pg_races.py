"""``PostgresCheckpointStore``: a ``delete`` or ``prune`` that meets a save still in flight.

A save of the session is held open inside a transaction of the test's own (the
store's own ``_write`` on a connection the test commits), the delete or prune is
started meanwhile and waits for it; the checkpoint that save commits must load
afterwards, or be gone whole, never left pointing at deleted message-log chunks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from supervisor import PostgresCheckpointStore
from supervisor._message_log import split
from tests.supervisor.pg_helpers import store_waits_on_a_lock
from tests.supervisor.store_contract import snap


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as opened:
        yield opened


def _meanwhile_save(
    store: PostgresCheckpointStore, sid: str, turns: int, admin: Callable[[], int]
) -> int:
    """Run ``admin`` (a delete or prune) while a save of ``sid`` has written its rows but
    not committed them, commit that save once ``admin`` waits on a lock; what it returned."""
    snapshot = snap(sid, turns=turns)
    cached = store._logs.get(sid)
    cut = split(snapshot, None if cached is None else cached.known, parts=False)
    result: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(admin())
        except BaseException as exc:  # reported below
            errors.append(exc)

    worker = threading.Thread(target=run)
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        with conn.transaction():
            store._write(snapshot, cut, cached, None, conn)
            worker.start()
            deadline = time.monotonic() + 10
            while worker.is_alive() and not store_waits_on_a_lock(store.conninfo):
                assert time.monotonic() < deadline, "the delete never waited for the save"
                time.sleep(0.005)  # a bounded poll of the server
    worker.join(10)
    assert not worker.is_alive()
    assert errors == []
    return result[0]


def test_deleting_an_old_checkpoint_while_a_save_appends_keeps_the_new_one_loadable(
    store: PostgresCheckpointStore,
) -> None:
    first = snap("s", turns=1)
    store.save(first)
    removed = _meanwhile_save(store, "s", 2, lambda: store.delete("s", first.checkpoint_id))
    assert removed == 1
    [info] = store.list("s")
    loaded = store.load("s", info.checkpoint_id)  # its message log is whole
    assert loaded.state["messages"] == snap("s", turns=2).state["messages"]


@pytest.mark.parametrize("how", ["delete", "prune"])
def test_removing_every_checkpoint_while_a_save_appends_leaves_nothing_broken(
    store: PostgresCheckpointStore, how: str
) -> None:
    store.save(snap("s", turns=1))

    def remove_all() -> int:
        return store.delete("s") if how == "delete" else store.prune("s", keep_last=0)

    _meanwhile_save(store, "s", 2, remove_all)
    for info in store.list("s"):
        store.load("s", info.checkpoint_id)  # every checkpoint left loads
    later = snap("s", turns=3)
    store.save(later)  # and the session goes on
    assert store.load("s") == later
