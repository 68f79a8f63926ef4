"""Shared fixtures: every test must leave no actor and no thread behind."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator

import pykka
import pytest

from tests import pg_private
from tests.pg_private import PrivateServer

JOIN_TIMEOUT = 5.0


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves threads running after it.

    Actors still running at the end are stopped first (like pykka's own test
    suite does), so one forgetful test cannot cascade into the next; but any
    thread that then fails to exit within the bound is reported as a leak.
    """
    before = set(threading.enumerate())
    yield
    pykka.ActorRegistry.stop_all(timeout=JOIN_TIMEOUT)
    for thread in _new_threads(before):
        thread.join(JOIN_TIMEOUT)
    leaked = _new_threads(before)
    assert not leaked, f"test leaked threads: {[t.name for t in leaked]}"


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """Connection string of a database created for this test run (dropped at its end).

    Skips the test when no PostgreSQL server answers (failing instead under
    ``SESSIONVISOR_REQUIRE_SERVICES=1``), with how to start one.
    """
    problem: str | None
    try:
        from tests import pg_server  # noqa: PLC0415 (psycopg is needed only here)
    except ImportError as exc:
        problem = f"psycopg is not installed ({exc}); pip install -e '.[dev]'"
    else:
        problem = pg_server.server_problem()
    if problem is not None:
        if os.environ.get("SESSIONVISOR_REQUIRE_SERVICES") == "1":
            pytest.fail(f"SESSIONVISOR_REQUIRE_SERVICES=1, but {problem}", pytrace=False)
        pytest.skip(problem)
    with pg_server.fresh_database() as dsn:
        yield dsn


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    """A PostgreSQL server of the test's own (``tests/pg_private.py``), for tests that
    restart or crash it; stopped, and its directory removed, after the test.

    Skips where it cannot be started (failing instead under
    ``SESSIONVISOR_REQUIRE_SERVICES=1``), with what to install.
    """
    problem = pg_private.private_server_problem()
    if problem is not None:
        if os.environ.get("SESSIONVISOR_REQUIRE_SERVICES") == "1":
            pytest.fail(f"SESSIONVISOR_REQUIRE_SERVICES=1, but {problem}", pytrace=False)
        pytest.skip(problem)
    with pg_private.private_server() as server:
        yield server


_schemas = itertools.count()


@pytest.fixture
def pg_schema(pg_dsn: str) -> str:
    """A schema name no other test of this run uses, for a store of this test's own."""
    return f"t{next(_schemas)}"
