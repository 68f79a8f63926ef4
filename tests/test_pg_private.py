"""``tests/pg_private.py``: a private server starts, restarts (a crash too), and leaves
nothing behind."""

from __future__ import annotations

import subprocess

import psycopg

from tests.pg_private import PrivateServer


def _left(data_dir: str) -> str:
    """The command lines of processes still running with ``data_dir`` in them."""
    found = subprocess.run(
        ["pgrep", "-a", "-f", data_dir], capture_output=True, text=True, check=False
    )
    return found.stdout.strip()


def test_a_private_server_keeps_committed_rows_across_restarts_and_cleans_up(
    private_pg: PrivateServer,
) -> None:
    assert private_pg.port != 5432
    with psycopg.connect(private_pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (n integer)")
        conn.execute("INSERT INTO kept VALUES (1)")
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
    private_pg.restart("immediate")  # a crash: recovery replays the committed insert
    private_pg.restart("fast")
    private_pg.stop()
    assert not private_pg.running()
    private_pg.start()
    with psycopg.connect(private_pg.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT n FROM kept").fetchall() == [(1,)]


def test_closing_stops_the_server_and_removes_its_directory(private_pg: PrivateServer) -> None:
    data_dir = str(private_pg.data_dir)
    assert _left(data_dir)
    private_pg.close()  # as the fixture does after the test (closing again does nothing)
    assert _left(data_dir) == ""
    assert not private_pg.directory.exists()
