"""The data-directory commands read a store as they find it: they never create one in a
file that holds none, nor migrate one of another schema under the host serving it."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore

COMMANDS = [
    ["sessions", "list"],
    ["sessions", "show", "s1"],
    ["checkpoints", "list", "s1"],
    ["checkpoints", "show", "s1"],
    ["checkpoints", "export", "s1"],
    ["checkpoints", "prune", "--keep", "1"],
]


def _user_version(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _store_of_schema(data_dir: Path, version: int) -> Path:
    """A store with session ``s1`` whose file says it is of schema ``version``."""
    db = data_dir / "checkpoints.db"
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": []}))
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    return db


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_empty_file_is_not_turned_into_a_store(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "checkpoints.db"
    db.touch()
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == f"error: {str(db)!r} holds no store yet: no host has written there\n"
    assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints.db"]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_store_of_an_older_schema_is_not_migrated(tmp_path: Path, command: list[str]) -> None:
    current = SQLiteCheckpointStore.SCHEMA_VERSION
    db = _store_of_schema(tmp_path, current - 1)
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: the store {str(db)!r} has schema version {current - 1}, this sessionvisor "
        f"writes {current}: start a host of this version on {str(tmp_path)!r} to migrate it, "
        "or use the sessionvisor that wrote it\n"
    )
    # left as found: no -wal/-shm (looked at first: opening the file to read its version
    # would remove them)
    assert sorted(p.name for p in tmp_path.iterdir()) == [db.name, db.name + ".sessionvisor"]
    assert _user_version(db) == current - 1


def test_doctor_leaves_a_store_of_an_older_schema_as_it_found_it(tmp_path: Path) -> None:
    current = SQLiteCheckpointStore.SCHEMA_VERSION
    db = _store_of_schema(tmp_path, current - 1)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, ["doctor", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert f"has schema version {current - 1}, this sessionvisor writes {current}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no -wal/-shm left behind
    assert _user_version(db) == current - 1


def test_a_store_of_a_newer_schema_is_refused_as_the_store_refuses_it(tmp_path: Path) -> None:
    db = _store_of_schema(tmp_path, 99)
    result = CliRunner().invoke(main, ["sessions", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "has schema version 99, newer than the supported" in result.stderr
    assert "upgrade sessionvisor to open it" in result.stderr
    assert _user_version(db) == 99


def test_a_store_of_the_current_schema_is_read(tmp_path: Path) -> None:
    _store_of_schema(tmp_path, SQLiteCheckpointStore.SCHEMA_VERSION)
    result = CliRunner().invoke(main, ["sessions", "list", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert "s1" in result.stdout
