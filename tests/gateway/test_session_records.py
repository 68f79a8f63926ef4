"""The key stores' record of gateway sessions: ``reserve_session`` (the per-tenant limit's
one atomic count-and-record) and ``tenant_sessions``, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.keys import ApiKeys, KeyStore, Reservation
from tests.gateway.cluster_nodes import WAIT


@pytest.fixture(params=["sqlite", "postgres"])
def keys(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApiKeys]:
    if request.param == "sqlite":
        store = KeyStore(tmp_path)
        try:
            yield store
        finally:
            store.close()
        return
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only here)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415

    dsn: str = request.getfixturevalue("pg_dsn")
    schema: str = request.getfixturevalue("pg_schema")
    checkpoints = PostgresCheckpointStore(dsn, schema=schema)
    try:
        yield PostgresKeyStore(checkpoints, tmp_path)
    finally:
        checkpoints.close()


def test_reserve_counts_the_tenants_other_sessions_and_records_below_the_limit(
    keys: ApiKeys,
) -> None:
    assert keys.reserve_session("acme/a", "acme", "echo", '{"k": "v"}', 2) == Reservation(
        0, admitted=True, new=True
    )
    assert keys.reserve_session("other/a", "other", "echo", "{}", 1).admitted  # per tenant
    assert keys.reserve_session("acme/b", "acme", "echo", "{}", 2) == Reservation(
        1, admitted=True, new=True
    )
    assert keys.reserve_session("acme/c", "acme", "echo", "{}", 2) == Reservation(
        2, admitted=False, new=False
    )
    assert keys.session_row("acme/c") is None  # refused: nothing recorded
    # an id recorded already: itself not counted, and its record is left as it was
    assert keys.reserve_session("acme/a", "acme", "other", "{}", 2) == Reservation(
        1, admitted=True, new=False
    )
    row = keys.session_row("acme/a")
    assert row is not None
    assert (row.template, row.metadata_json) == ("echo", '{"k": "v"}')
    listed = keys.tenant_sessions("acme")
    assert [(r.session_id, r.template, r.metadata_json) for r in listed] == [
        ("acme/a", "echo", '{"k": "v"}'),
        ("acme/b", "echo", "{}"),
    ]
    keys.forget_session("acme/a")
    assert keys.reserve_session("acme/c", "acme", "echo", "{}", 2).admitted


def test_concurrent_reservations_at_the_limit_admit_exactly_the_limit(keys: ApiKeys) -> None:
    limit, callers = 3, 8
    barrier = threading.Barrier(callers)
    outcomes: list[Reservation] = []

    def reserve(index: int) -> None:
        barrier.wait(WAIT)
        outcomes.append(keys.reserve_session(f"acme/s{index}", "acme", "echo", "{}", limit))

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert sum(o.admitted for o in outcomes) == limit
    assert len(keys.tenant_sessions("acme")) == limit
