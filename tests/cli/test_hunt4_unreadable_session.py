"""``sessions list`` with a session none of whose checkpoints can be read: the others
are still listed, and that one is too, with every checkpoint counted as damaged (the
whole listing was one error about that session)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore


def store_with_unreadable(data_dir: Path) -> str:
    """Sessions ``s1``..``s3`` of one checkpoint each, ``s2``'s damaged; its id."""
    with SQLiteCheckpointStore(data_dir / "checkpoints.db") as store:
        for sid in ("s1", "s2", "s3"):
            store.save(Snapshot.new(session_id=sid, state={"messages": [], "turns": 1}))
        damaged = store.list("s2")[0].checkpoint_id
    with closing(sqlite3.connect(data_dir / "checkpoints.db", isolation_level=None)) as conn:
        (body,) = conn.execute("SELECT body FROM checkpoints WHERE session_id = 's2'").fetchone()
        conn.execute("UPDATE checkpoints SET body = ? WHERE session_id = 's2'", (body + b"\0",))
    return damaged


def test_the_other_sessions_are_listed(tmp_path: Path) -> None:
    damaged = store_with_unreadable(tmp_path)
    result = CliRunner().invoke(main, ["sessions", "list", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    found = {s["session_id"]: s for s in json.loads(result.stdout)}
    assert list(found) == ["s1", "s2", "s3"]
    assert (found["s1"]["turns"], found["s1"]["damaged"]) == (1, 0)
    unreadable = found["s2"]
    assert (unreadable["checkpoints"], unreadable["damaged"]) == (1, 1)
    assert unreadable["newest_checkpoint"] == damaged
    assert (unreadable["turns"], unreadable["model"], unreadable["total_tokens"]) == (None,) * 3
    assert set(unreadable) == set(found["s1"])

    table = CliRunner().invoke(main, ["sessions", "list", "--data-dir", str(tmp_path)])
    assert table.exit_code == 0, table.output
    header, *rows = (line.split() for line in table.stdout.splitlines())
    assert [(row[0], row[header.index("DAMAGED")]) for row in rows] == [
        ("s1", "0"),
        ("s2", "1"),
        ("s3", "0"),
    ]


def test_show_of_it_is_still_the_error_naming_its_newest(tmp_path: Path) -> None:
    damaged = store_with_unreadable(tmp_path)
    result = CliRunner().invoke(main, ["sessions", "show", "s2", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot decode snapshot: checkpoint {damaged!r} ")
