"""A checkpoint store with no room left (a full disk): the turns whose saves it refuses
fail with ``StoreFull``, in every runtime and every form of the call; nothing of them is
stored, the sessions go on, and once there is room the same sends succeed.

A full disk is simulated as SQLite's own tests do: ``PRAGMA max_page_count`` caps the
database at its current size, so the next save that needs a page fails with
``SQLITE_FULL``, exactly as a write meeting ``ENOSPC`` does.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor import SQLiteCheckpointStore, StoreFull
from tests.supervisor.host_helpers import WAIT, HostFactory, pairs, template

LARGE = "x" * 64_000  # needs many more pages than a capped database has left


def _cap_at_current_size(store: SQLiteCheckpointStore) -> sqlite3.Connection:
    conn = store._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return conn


def test_a_full_store_fails_the_turn_with_store_full_and_the_sessions_go_on(
    make_host: HostFactory, tmp_path: Path
) -> None:
    path = tmp_path / "checkpoints.db"
    store = SQLiteCheckpointStore(path)
    host = make_host(store=store)
    full = host.start_session(template(), session_id="full")
    other = host.start_session(template(), session_id="other")
    host.send(full, "first")
    host.send(other, "first")
    conn = _cap_at_current_size(store)

    with pytest.raises(StoreFull) as caught:
        host.send(full, LARGE)
    pending = host.futures.send(other, LARGE)
    refused = pending.exception(WAIT)

    assert str(caught.value).startswith(f"checkpoint store {str(path)!r} is full (")
    assert "free space on its disk" in str(caught.value)
    assert isinstance(refused, StoreFull)
    for sid in (full, other):  # the turns are rolled back, and nothing of them was stored
        assert pairs(host.history(sid)) == [("first", "echo: first")]
        assert [m.content for m in store.load(sid).messages()] == ["first", "echo: first"]
        assert host.session_info(sid).status == "active"

    conn.execute("PRAGMA max_page_count = 1073741823")  # room again
    for sid in (full, other):
        assert host.send(sid, LARGE).content == f"echo: {LARGE}"
        assert pairs(host.history(sid)) == [("first", "echo: first"), (LARGE, f"echo: {LARGE}")]
        assert [m.content for m in store.load(sid).messages()][-1] == f"echo: {LARGE}"
    host.shutdown()
    store.close()
