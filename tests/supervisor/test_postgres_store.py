"""``PostgresCheckpointStore``: the store contract, and what only this store does.

Needs the PostgreSQL server of ``tests/pg_server.py`` (skipped without one).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from actors import Snapshot, SnapshotDecodeError
from supervisor import (
    CheckpointNotFound,
    CheckpointStore,
    Fence,
    OwnershipLost,
    PostgresCheckpointStore,
    StoreBusy,
    StoreFull,
    StoreUnreachable,
    SupervisorError,
)
from supervisor._pg_schema import MIGRATIONS, migrate
from tests.actors.snapshot_helpers import session_state
from tests.pg_private import PrivateServer, ShutdownMode
from tests.pg_server import terminate_connections
from tests.supervisor.store_contract import CheckpointStoreContract, MakeStore, snap


class TestPostgresContract(CheckpointStoreContract):
    """The contract on a store of the test's own schema."""

    @pytest.fixture
    def make_store(self, pg_dsn: str, pg_schema: str) -> Iterator[MakeStore]:
        opened: list[CheckpointStore] = []

        def make(**kwargs: Any) -> CheckpointStore:
            store = PostgresCheckpointStore(pg_dsn, schema=pg_schema, **kwargs)
            opened.append(store)
            return store

        yield make
        for store in opened:
            store.close()


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as opened:
        yield opened


def _sql(store: PostgresCheckpointStore, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run ``text`` (``{s}``: the store's schema) on a connection of its own; its rows."""
    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        cur = conn.execute(text.replace("{s}", f'"{store.schema}"').encode(), params)
        return cur.fetchall() if cur.description else []


def _own(store: PostgresCheckpointStore, sid: str, node: str, incarnation: int, epoch: int) -> None:
    _sql(
        store,
        "INSERT INTO {s}.sessions VALUES (%s, %s, %s, %s, 'active', now())"
        " ON CONFLICT (session_id) DO UPDATE SET owner_node = EXCLUDED.owner_node,"
        " owner_incarnation = EXCLUDED.owner_incarnation, epoch = EXCLUDED.epoch",
        (sid, node, incarnation, epoch),
    )


def test_messages_are_stored_once(store: PostgresCheckpointStore) -> None:
    saved = [
        Snapshot.new(session_id="s", state=session_state(t, session_id="s")) for t in range(60)
    ]
    for s in saved:
        store.save(s)
    log_bytes = _sql(store, "SELECT sum(length(data)) FROM {s}.message_chunks")[0][0]
    last = len(saved[-1].serialize())
    assert log_bytes < last  # the whole history once, not once per checkpoint
    (bodies,) = _sql(store, "SELECT sum(length(body)) FROM {s}.checkpoints")[0]
    assert bodies < 60 * 600  # each checkpoint's own part is small
    for s in saved[::7]:
        assert store.load("s", s.checkpoint_id) == s


def test_the_log_chunks_merge_as_a_base_8_count_of_appends_carries(
    store: PostgresCheckpointStore,
) -> None:
    saved = [
        Snapshot.new(session_id="s", state=session_state(t, session_id="s")) for t in range(1, 75)
    ]
    for s in saved:
        store.save(s)
    chunks = _sql(
        store,
        "SELECT start, length(data) FROM {s}.message_chunks WHERE session_id = 's' ORDER BY start",
    )
    assert len(chunks) == 1 + 1 + 2  # 74 appends: 112 in base 8
    assert all(start + size == after for (start, size), (after, _) in itertools.pairwise(chunks))
    assert all(store.load("s", s.checkpoint_id) == s for s in saved)
    (length,) = _sql(store, "SELECT length FROM {s}.message_logs WHERE session_id = 's'")[0]
    merge = "SELECT {s}.merge_log_chunks('s', 0, %s, 8)"
    assert _sql(store, merge, (length - 1,)) == [(0,)]  # not the log's length: left alone
    _sql(store, "DELETE FROM {s}.message_chunks WHERE session_id = 's' AND start = %s",
         (chunks[2][0],))  # fmt: skip
    assert _sql(store, merge, (length,)) == [(0,)]  # a gap: left alone
    assert _sql(store, "SELECT count(*) FROM {s}.message_chunks")[0][0] == len(chunks) - 1


def test_another_instance_writing_the_session_is_noticed(
    store: PostgresCheckpointStore, pg_dsn: str
) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=store.schema, keep_last=None) as other:
        saved = []
        for turn in range(12):
            writer = store if turn % 3 else other
            s = Snapshot.new(session_id="s", state=session_state(turn, session_id="s"))
            writer.save(s)
            saved.append(s)
        for s in saved:
            assert other.load("s", s.checkpoint_id) == s


def test_concurrent_saves_share_commits(store: PostgresCheckpointStore) -> None:
    go = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            go.wait(5)
            for turn in range(15):
                store.save(snap(f"w{worker}", turns=turn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert all(len(store.list(f"w{w}")) == 15 for w in range(8))
    assert store.commits <= 8 * 15


def test_a_damaged_row_fails_alone(store: PostgresCheckpointStore) -> None:
    first, second = snap(turns=1), snap(turns=2)
    store.save(first)
    store.save(second)
    _sql(
        store,
        "UPDATE {s}.checkpoints SET body = body || '\\x00'::bytea WHERE checkpoint_id = %s",
        (second.checkpoint_id,),
    )
    with pytest.raises(SnapshotDecodeError, match=r"checksum mismatch") as info:
        store.load("sess-1")
    assert second.checkpoint_id in str(info.value)
    assert store.load("sess-1", first.checkpoint_id) == first


def test_fenced_save_needs_the_owner_and_epoch(store: PostgresCheckpointStore) -> None:
    _own(store, "s", "node-a", 1, 3)
    kept = Snapshot.new(session_id="s", state=session_state(1, session_id="s"))
    store.save(kept, fence=Fence("node-a", 1, 3))
    for fence in (Fence("node-a", 1, 2), Fence("node-a", 2, 3), Fence("node-b", 1, 3), None):
        refused = Snapshot.new(session_id="s", state=session_state(2, session_id="s"))
        with pytest.raises(OwnershipLost, match="no longer owned") as info:
            store.save(refused, fence=fence)
        assert info.value.session_id == "s"
    assert [i.checkpoint_id for i in store.list("s")] == [kept.checkpoint_id]
    assert store.load("s") == kept


def test_newest_is_ordered_by_epoch_before_checkpoint_id(store: PostgresCheckpointStore) -> None:
    _own(store, "s", "node-a", 1, 1)
    late = snap("s", turns=3)  # made last: the greatest checkpoint id
    early = snap("s", turns=1)
    object.__setattr__(early, "checkpoint_id", "0" * 32)  # an older clock's id
    store.save(late, fence=Fence("node-a", 1, 1))
    _own(store, "s", "node-b", 1, 2)  # node-b claimed it
    store.save(early, fence=Fence("node-b", 1, 2))
    assert store.load("s") == early
    assert [i.checkpoint_id for i in store.list("s")] == [early.checkpoint_id, late.checkpoint_id]


def test_schema_is_made_once_by_stores_opening_together(pg_dsn: str, pg_schema: str) -> None:
    opened: list[PostgresCheckpointStore] = []
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def open_one() -> None:
        try:
            go.wait(5)
            opened.append(PostgresCheckpointStore(pg_dsn, schema=pg_schema, pool_size=1))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert errors == []
        opened[0].save(snap())
        assert opened[3].load("sess-1").session_id == "sess-1"
    finally:
        for one in opened:
            one.close()


def test_migrations_run_in_order_and_a_newer_schema_is_refused(pg_dsn: str, pg_schema: str) -> None:
    newest = MIGRATIONS[-1][0]
    later = (*MIGRATIONS, (newest + 1, ("ALTER TABLE {s}.meta ADD COLUMN note text",)))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert migrate(conn, pg_schema) == 0
        assert migrate(conn, pg_schema, later) == newest  # only the last step ran
        assert migrate(conn, pg_schema, later) == newest + 1
    match = f"version {newest + 1}, newer than the supported {newest}"
    with pytest.raises(SupervisorError, match=match):
        PostgresCheckpointStore(pg_dsn, schema=pg_schema)


def _bound(store: PostgresCheckpointStore, sid: str) -> int:
    """The session's ``message_logs.saves``: the bound on its checkpoints pruning trusts."""
    rows = _sql(store, "SELECT saves FROM {s}.message_logs WHERE session_id = %s", (sid,))
    return int(rows[0][0])


def test_a_version_2_database_is_migrated_and_keeps_pruning(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    v2 = MIGRATIONS[:2]
    assert v2[-1][0] == 2
    with monkeypatch.context() as patched:  # a store of the code before version 3
        patched.setattr(
            "supervisor.postgres_store.migrate",
            lambda conn, schema: migrate(conn, schema, v2),
        )
        with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=3) as old:
            for turns in range(1, 6):
                old.save(snap("s", turns=turns))
            assert len(old.list("s")) == 3
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=3) as store:
        rows = _sql(store, "SELECT value FROM {s}.meta WHERE name = 'schema_version'")
        assert rows == [(str(MIGRATIONS[-1][0]),)]
        assert _bound(store, "s") == 3  # counted by the migration
        saved = [snap("s", turns=turns) for turns in range(6, 9)]
        for one in saved:
            store.save(one)
            assert len(store.list("s")) == 3
        assert [info.checkpoint_id for info in store.list("s")] == [
            one.checkpoint_id for one in reversed(saved)
        ]
        assert store.load("s") == saved[-1]


def test_a_save_prunes_when_the_session_may_hold_more_than_keep_last(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=3) as store:
        first = [snap("s", turns=turns) for turns in range(1, 4)]
        for one in first:
            store.save(one)
        assert _bound(store, "s") == 3
        store.delete("s", first[0].checkpoint_id)
        store.delete("s", first[1].checkpoint_id)  # 1 kept; the bound stays 3
        store.save(snap("s", turns=4))  # the bound says 4: a prune finds nothing, counts
        assert _bound(store, "s") == 2
        store.save(Snapshot.new(session_id="s", state={"session_id": "s", "messages": []}))
        assert _bound(store, "s") == 3  # a save without messages counts too
        newest = snap("s", turns=5)
        store.save(newest)
        assert _bound(store, "s") == 4
        assert len(store.list("s")) == 3
        store.save(newest)  # saved again (idempotent): one row; the bound said 5, so it counted
        assert len(store.list("s")) == 3
        assert _bound(store, "s") == 3
        for turns in range(6, 10):
            store.save(snap("s", turns=turns))
            assert len(store.list("s")) == 3
        assert store.load("s").state["messages"] == snap("s", turns=9).state["messages"]


def test_an_unreachable_server_is_a_clear_error() -> None:
    with pytest.raises(StoreUnreachable, match=r"127\.0\.0\.1:1/x unreachable during opening"):
        PostgresCheckpointStore("host=127.0.0.1 port=1 dbname=x user=x", connect_timeout=2)


@pytest.mark.parametrize(
    "conninfo", ["not a dsn", "host=h password='s3cret", "postgresql://u:s3cret@[::1/db"]
)
def test_a_malformed_connection_string_is_a_value_error_that_does_not_quote_it(
    conninfo: str,
) -> None:
    with pytest.raises(ValueError, match="conninfo is not a PostgreSQL connection string") as err:
        PostgresCheckpointStore(conninfo)
    assert "s3cret" not in str(err.value)
    assert "not a dsn" not in str(err.value)


def test_a_connection_string_that_is_not_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="conninfo must be a str, got bytes"):
        PostgresCheckpointStore(b"host=127.0.0.1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": "Bad-Name"}, "schema must be a lowercase SQL identifier"),
        ({"pool_size": 0}, "pool_size must be an int >= 1"),
        ({"transaction_timeout": 0}, "transaction_timeout must be > 0"),
        ({"max_snapshot_bytes": 0}, "max_snapshot_bytes must be >= 1"),
    ],
)
def test_invalid_options_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PostgresCheckpointStore("host=127.0.0.1", **kwargs)


def test_saves_survive_terminated_connections_or_fail_clearly_and_retry_idempotently(
    pg_dsn: str, pg_schema: str
) -> None:
    store = PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None, pool_size=4)
    stop = threading.Event()
    terminated: list[int] = []
    outcomes: dict[str, int] = {"saved": 0, "unreachable": 0}
    saved: dict[str, list[Snapshot]] = {}
    errors: list[BaseException] = []
    messages: set[str] = set()
    lock = threading.Lock()

    def kill_connections() -> None:
        while not stop.wait(0.015):  # paces the terminations; nothing waits on this
            terminated.append(terminate_connections(pg_dsn))

    def save_turns(sid: str) -> None:
        try:
            for turn in range(25):
                snapshot = Snapshot.new(session_id=sid, state=session_state(turn, session_id=sid))
                while True:
                    try:
                        store.save(snapshot)
                    except StoreUnreachable as exc:
                        with lock:
                            outcomes["unreachable"] += 1
                            messages.add(str(exc).split(" (", 1)[0])
                        continue  # the same snapshot again: a save is idempotent
                    with lock:
                        outcomes["saved"] += 1
                    break
                saved.setdefault(sid, []).append(snapshot)
        except BaseException as exc:  # reported below
            errors.append(exc)

    killer = threading.Thread(target=kill_connections)
    savers = [threading.Thread(target=save_turns, args=(f"c{i}",)) for i in range(4)]
    killer.start()
    for thread in savers:
        thread.start()
    for thread in savers:
        thread.join(120)
    stop.set()
    killer.join(10)
    try:
        assert errors == []
        assert sum(terminated) > 0
        assert outcomes["saved"] == 100
        assert messages <= {f"checkpoint database {store.where} unreachable during a save"}
        for sid, snapshots in saved.items():
            assert [i.checkpoint_id for i in store.list(sid)] == [
                s.checkpoint_id for s in reversed(snapshots)
            ]
            for snapshot in snapshots:
                assert store.load(sid, snapshot.checkpoint_id) == snapshot
    finally:
        store.close()


class _Saves:
    """Savers' shared record of a restart test: how many saves returned, what failed, and
    which threads are inside ``save`` right now. Thread-safe."""

    def __init__(self) -> None:
        self.progress = threading.Condition()
        self.returned = 0
        self.inside = 0
        self.unreachable: list[StoreUnreachable] = []
        self.other_errors: list[BaseException] = []
        self.returned_at: list[float] = []
        self.longest = 0.0

    def wait_returned(self, count: int, timeout: float = 30) -> None:
        with self.progress:
            reached = self.progress.wait_for(lambda: self.returned >= count, timeout)
        assert reached, f"only {self.returned} of {count} saves returned within {timeout} s"


def _in_lock_wait(server_dsn: str) -> int:
    """Store connections waiting for a lock (a save blocked inside the server)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'sessionvisor' AND wait_event_type = 'Lock'"
        ).fetchone()
    return 0 if row is None else int(row[0])


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_saves_across_server_restarts_return_or_fail_clearly_and_retry_idempotently(
    private_pg: PrivateServer, mode: ShutdownMode
) -> None:
    """Issue 17: PostgreSQL restarted (``fast``: sessions ended; ``immediate``: a crash
    and recovery) while saves are in flight: with every saver blocked inside the server
    on a table lock, while they run freely, and stopped until every saver had a save
    fail. Each save returns or raises ``StoreUnreachable`` naming the database; the same
    snapshot saved again is stored once; the same store instance goes on saving."""
    store = PostgresCheckpointStore(
        private_pg.dsn, keep_last=None, pool_size=4, connect_timeout=2, transaction_timeout=5
    )
    record = _Saves()
    stop = threading.Event()
    saved: dict[str, list[Snapshot]] = {}
    threads = 4

    def save_turns(sid: str) -> None:
        try:
            for turn in itertools.count():
                if stop.is_set():
                    return
                snapshot = Snapshot.new(session_id=sid, state=session_state(turn, session_id=sid))
                for _attempt in range(10):
                    with record.progress:
                        record.inside += 1
                        record.progress.notify_all()
                    started = time.monotonic()
                    try:
                        store.save(snapshot)
                    except StoreUnreachable as exc:
                        with record.progress:
                            record.unreachable.append(exc)
                        continue  # the same snapshot again: a save is idempotent
                    finally:
                        took = time.monotonic() - started
                        with record.progress:
                            record.inside -= 1
                            record.longest = max(record.longest, took)
                    with record.progress:
                        record.returned += 1
                        record.returned_at.append(time.monotonic())
                        record.progress.notify_all()
                    break
                else:
                    raise AssertionError(f"{sid} turn {turn}: 10 saves failed in a row")
                saved.setdefault(sid, []).append(snapshot)
        except BaseException as exc:  # reported below
            with record.progress:
                record.other_errors.append(exc)
                record.progress.notify_all()

    savers = [threading.Thread(target=save_turns, args=(f"r{i}",)) for i in range(threads)]
    restarts: list[tuple[str, float, float]] = []  # (how, pg_ctl began, pg_ctl returned)
    try:
        for thread in savers:
            thread.start()
        record.wait_returned(20)
        # 1: every saver inside a save, at least one of them blocked in the server
        gate = psycopg.connect(private_pg.dsn)  # the restart ends its transaction
        try:
            gate.execute(f'LOCK TABLE "{store.schema}".checkpoints IN EXCLUSIVE MODE')
            with record.progress:
                assert record.progress.wait_for(lambda: record.inside == threads, 10)
            deadline = time.monotonic() + 10
            while _in_lock_wait(private_pg.dsn) == 0:  # a bounded poll of the server's view
                assert time.monotonic() < deadline, "no save blocked on the gate's lock"
                time.sleep(0.005)
            began = time.monotonic()
            private_pg.restart(mode)
            restarts.append(("gated", began, time.monotonic()))
        finally:
            gate.close()
        # 2: while the savers run freely, once 20 more saves returned after the first
        record.wait_returned(record.returned + 20)
        began = time.monotonic()
        private_pg.restart(mode)
        restarts.append(("free", began, time.monotonic()))
        record.wait_returned(record.returned + 20)
        # 3: down for longer than a save retries: saves fail, and are retried once it is up
        began = time.monotonic()
        private_pg.stop(mode)
        with record.progress:
            assert record.progress.wait_for(lambda: len(record.unreachable) >= threads, 30)
        private_pg.start()
        restarts.append(("outage", began, time.monotonic()))
        record.wait_returned(record.returned + 20)
    finally:
        stop.set()
        for thread in savers:
            thread.join(60)
    try:
        assert not any(t.is_alive() for t in savers), "a saver hung"
        assert record.other_errors == []
        for exc in record.unreachable:
            assert exc.where == store.where == f"127.0.0.1:{private_pg.port}/postgres"
            assert str(exc).startswith(
                f"checkpoint database {store.where} unreachable during a save ("
            ), str(exc)
        for how, _began, ended in restarts:  # the same store saved again after each
            assert any(t > ended for t in record.returned_at), how
        for sid, snapshots in saved.items():
            assert [i.checkpoint_id for i in store.list(sid)] == [
                s.checkpoint_id for s in reversed(snapshots)
            ]
            for snapshot in snapshots:
                assert store.load(sid, snapshot.checkpoint_id) == snapshot
        recoveries = [
            round(min(t for t in record.returned_at if t > ended) - ended, 3)
            for _how, _began, ended in restarts
        ]
        print(
            f"{mode}: {record.returned} saves returned, {len(record.unreachable)} failed"
            f" ({sorted({str(e).split(' (', 1)[1][:60] for e in record.unreachable})}),"
            f" pg_ctl restarts {[round(e - b, 3) for _h, b, e in restarts]} s,"
            f" first save after each {recoveries} s, longest save {record.longest:.3f} s"
        )
    finally:
        store.close()


def test_a_save_kept_waiting_on_a_lock_is_store_busy_and_writes_nothing(
    pg_dsn: str, pg_schema: str
) -> None:
    with PostgresCheckpointStore(
        pg_dsn, schema=pg_schema, keep_last=None, transaction_timeout=0.2
    ) as store:
        first = snap("s", 1)
        store.save(first)
        waiting = snap("s", 2)
        with psycopg.connect(store.conninfo) as holder:  # a transaction holding the table
            holder.execute(f'LOCK TABLE "{store.schema}".checkpoints IN EXCLUSIVE MODE')
            with pytest.raises(StoreBusy) as caught:
                store.save(waiting)
            holder.rollback()

        assert caught.value.where == store.where
        assert str(caught.value).startswith(
            f"checkpoint database {store.where} cancelled a save: it waited too long for a "
            "lock another connection holds ("
        )
        assert isinstance(caught.value, TimeoutError)
        assert [i.checkpoint_id for i in store.list("s")] == [first.checkpoint_id]
        store.save(waiting)  # the same snapshot again, once the lock is gone
        assert store.load("s") == waiting


def test_in_schema_runs_statements_on_tables_kept_beside_the_stores(
    store: PostgresCheckpointStore, pg_schema: str
) -> None:
    assert (
        store.in_schema("SELECT 1 FROM {s}.extra") == f'SELECT 1 FROM "{pg_schema}".extra'.encode()
    )

    def roundtrip(conn: Any) -> list[tuple[Any, ...]]:
        conn.execute(store.in_schema("CREATE TABLE IF NOT EXISTS {s}.extra (n integer)"))
        conn.execute(store.in_schema("DELETE FROM {s}.extra"))
        conn.execute(store.in_schema("INSERT INTO {s}.extra VALUES (7)"))
        return list(conn.execute(store.in_schema("SELECT n FROM {s}.extra")).fetchall())

    assert store.run("a test table", roundtrip) == [(7,)]


def test_ids_postgresql_cannot_store_are_clear_errors_and_reads_find_nothing(
    store: PostgresCheckpointStore,
) -> None:
    # PostgreSQL text holds no NUL (the other stores do): a typed error naming the field,
    # not the driver's DataError, and nothing stored.
    with pytest.raises(ValueError, match=r"session_id 'a\\x00b' holds a NUL character"):
        store.save(snap("a\x00b"))
    with pytest.raises(ValueError, match=r"label 'x\\x00' holds a NUL character"):
        store.save(snap("s1", label="x\x00"))
    assert store.sessions() == []
    # Such an id has no row: reads find nothing, as for any unknown id.
    with pytest.raises(CheckpointNotFound):
        store.load("a\x00b")
    with pytest.raises(CheckpointNotFound):
        store.load("s1", "c\x00")
    assert store.list("a\x00b") == []
    assert store.delete("a\x00b") == 0
    assert store.prune("a\x00b", 0) == 0
    # An id too long for the tables' indexes: a ValueError saying so, nothing stored.
    long_id = os.urandom(1600).hex()  # 3,200 bytes that do not compress
    with pytest.raises(ValueError, match=r"\(3200 bytes\) is too long for the PostgreSQL"):
        store.save(snap(long_id))
    assert store.sessions() == []
    saved = snap("s1")
    store.save(saved)  # the store goes on
    assert store.load("s1") == saved


def test_sessions_are_sorted_as_python_sorts_them_whatever_the_collation(
    store: PostgresCheckpointStore,
) -> None:
    # A database made with a linguistic collation (en_US.UTF-8, common on managed servers)
    # gives its text columns that collation: here, the ICU one, set on the column.
    if not _sql(store, "SELECT 1 FROM pg_collation WHERE collname = 'en-US-x-icu'"):
        pytest.skip("this PostgreSQL server was built without ICU collations")
    _sql(
        store, 'ALTER TABLE {s}.checkpoints ALTER COLUMN session_id TYPE text COLLATE "en-US-x-icu"'
    )
    ids = ["b", "B", "a", "A", "_x", "a-b", "ab", "é"]
    for sid in ids:
        store.save(snap(sid))
    assert store.sessions() == sorted(ids)


def test_a_save_on_a_full_disk_is_store_full_and_writes_nothing(
    store: PostgresCheckpointStore,
) -> None:
    first = snap("s", 1)
    store.save(first)
    # The server's answer to a write it has no disk for, raised where a write would need room.
    _sql(
        store,
        "CREATE FUNCTION {s}.no_room() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN RAISE EXCEPTION 'could not extend file: No space left on device'"
        " USING ERRCODE = 'disk_full'; END$$",
    )
    _sql(
        store,
        "CREATE TRIGGER no_room BEFORE INSERT ON {s}.checkpoints"
        " FOR EACH ROW EXECUTE FUNCTION {s}.no_room()",
    )
    second = snap("s", 2)

    with pytest.raises(StoreFull) as caught:
        store.save(second)

    assert caught.value.where == store.where
    assert str(caught.value).startswith(
        f"checkpoint store {store.where} is full (could not extend file: No space left on "
        "device): nothing of this write was stored, and what it held before is intact"
    )
    assert isinstance(caught.value.__cause__, psycopg.errors.DiskFull)
    assert [i.checkpoint_id for i in store.list("s")] == [first.checkpoint_id]
    assert store.load("s") == first
    _sql(store, "DROP TRIGGER no_room ON {s}.checkpoints")
    store.save(second)  # room again: the same snapshot saves
    assert store.load("s") == second
