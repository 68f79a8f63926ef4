"""What several PostgreSQL store tests look at on the server itself."""

from __future__ import annotations

import psycopg


def store_waits_on_a_lock(dsn: str) -> bool:
    """Whether a connection of a store (not the test's own) waits for a lock in the
    database of ``dsn``: the sign that a save or delete the test started is held where
    the test meant to hold it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'sessionvisor' AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0
