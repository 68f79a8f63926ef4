"""The PostgreSQL server the tests use, and a fresh database per test run.

The server is the development machines' own: ``127.0.0.1:5432``, user
``postgres``, trust authentication (override the admin connection string with
``SESSIONVISOR_PG_ADMIN``). Where none answers, the tests that need it skip
with a message saying how to start one; with ``SESSIONVISOR_REQUIRE_SERVICES=1``
(set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

__all__ = [
    "ADMIN_DSN",
    "REQUIRE_SERVICES",
    "START_HINT",
    "fresh_database",
    "server_problem",
    "terminate_connections",
]

ADMIN_DSN = os.environ.get(
    "SESSIONVISOR_PG_ADMIN", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)
REQUIRE_SERVICES = os.environ.get("SESSIONVISOR_REQUIRE_SERVICES") == "1"
START_HINT = (
    "no PostgreSQL server answers at 127.0.0.1:5432 (user postgres); start it with "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, or point "
    "SESSIONVISOR_PG_ADMIN at another server"
)


def server_problem() -> str | None:
    """Why the test server cannot be used (with how to start it), or ``None`` if it can."""
    try:
        with psycopg.connect(ADMIN_DSN, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        return f"{START_HINT} ({exc})".replace("\n", " ")
    return None


@contextmanager
def fresh_database(prefix: str = "sv_test") -> Iterator[str]:
    """Create a uniquely named database, yield its connection string, drop it afterwards
    (closing whatever connections are left on it)."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = psycopg.conninfo.conninfo_to_dict(ADMIN_DSN)
    parts["dbname"] = name
    try:
        yield psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items()})
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def terminate_connections(dsn: str, application_name: str = "sessionvisor") -> int:
    """Terminate the server processes of the database's connections named
    ``application_name`` (as a server restart or an operator would); how many."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = %s AND pid <> pg_backend_pid()",
            (dbname, application_name),
        ).fetchone()
    return 0 if row is None else int(row[0])
