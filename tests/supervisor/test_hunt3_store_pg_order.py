"""``PostgresCheckpointStore`` orders checkpoints by code point, whatever the collation.

"Newest" is the greatest ``checkpoint_id`` as Python compares them (``CheckpointStore``),
as the memory and SQLite stores order them. A database made with a linguistic
collation (``en_US.UTF-8``, common on managed servers) gives its text columns that
collation, under which ``"B"`` sorts after ``"a"``: ids other than the generated
lowercase hex ones (a snapshot carried over from elsewhere) then made another
checkpoint the newest, and a prune keep others.
"""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from supervisor import PostgresCheckpointStore
from supervisor._pg_schema import MIGRATIONS, migrate
from tests.supervisor.store_contract import snap


def test_a_store_of_a_linguistic_collation_orders_checkpoints_by_code_point(
    pg_dsn: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if (
            conn.execute("SELECT 1 FROM pg_collation WHERE collname = 'en-US-x-icu'").fetchone()
            is None
        ):
            pytest.skip("this PostgreSQL server was built without ICU collations")
        migrate(conn, pg_schema, MIGRATIONS[:4])  # the store as version 4 made it
        conn.execute(
            f'ALTER TABLE "{pg_schema}".checkpoints'
            ' ALTER COLUMN checkpoint_id TYPE text COLLATE "en-US-x-icu"'.encode()
        )
    ids = ["a", "B", "b", "_x", "Z1", "a-b", "ab", "é"]
    saved = {cid: dataclasses.replace(snap("s"), checkpoint_id=cid) for cid in ids}
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as store:
        for cid in ids:
            store.save(saved[cid])
        newest_first = sorted(ids, reverse=True)
        assert [info.checkpoint_id for info in store.list("s")] == newest_first
        assert store.load("s") == saved["é"]
        assert store.prune("s", keep_last=3) == len(ids) - 3
        assert [info.checkpoint_id for info in store.list("s")] == newest_first[:3]
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=2) as store:
        store.save(saved["B"])  # older than the kept ones: pruned by its own save
        assert [info.checkpoint_id for info in store.list("s")] == newest_first[:2]
