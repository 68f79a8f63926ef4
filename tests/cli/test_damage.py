"""The read commands on a store damaged mid-file: one line saying so, what to run and
what to restore, never SQLite's traceback."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore


def damaged_store(data_dir: Path) -> None:
    """A store in ``data_dir`` of 20 sessions whose third page is garbage (its header
    and schema, on the first pages, intact: it opens, and its reads then fail)."""
    db = data_dir / "checkpoints.db"
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        for i in range(20):
            for turns in range(3):
                state = {"messages": [], "turns": turns, "pad": "x" * 3000}
                store.save(Snapshot.new(session_id=f"s{i}", state=state))
    with db.open("r+b") as out:
        out.seek(8192)
        out.write(b"\xde\xad" * 2048)


@pytest.mark.parametrize(
    "command",
    [["sessions", "list"], ["checkpoints", "list", "s1"], ["checkpoints", "prune", "--keep", "1"]],
    ids=" ".join,
)
def test_a_damaged_store_is_one_line(tmp_path: Path, command: list[str]) -> None:
    damaged_store(tmp_path)
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: the store checkpoints.db in {str(tmp_path)!r} is damaged (database disk "
        f"image is malformed): run 'sessionvisor doctor --data-dir {tmp_path}' to see what is "
        "wrong, then stop the host and restore the file (and its -wal file) from a backup\n"
    )


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_damaged_checkpoint_is_one_line_naming_it(tmp_path: Path, command: str) -> None:
    """A checkpoint whose stored body fails its checksum (the store holds it, but cannot
    read it): ``show`` and ``export`` say so in one line, not with a traceback."""
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db) as store:
        snapshot = Snapshot.new(session_id="s1", state={"messages": [], "turns": 1})
        store.save(snapshot)
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        (body,) = conn.execute("SELECT body FROM checkpoints").fetchone()
        conn.execute("UPDATE checkpoints SET body = ?", (body + b"\x00",))
    result = CliRunner().invoke(main, ["checkpoints", command, "s1", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("error: cannot decode snapshot: checkpoint ")
    assert snapshot.checkpoint_id in result.stderr
    assert result.stderr.count("\n") == 1


def test_sessions_are_described_by_their_newest_readable_checkpoint(tmp_path: Path) -> None:
    """A damaged newest checkpoint does not hide the session, nor the others: it is
    described as a host would resume it, from the newest checkpoint that reads."""
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db) as store:
        for sid in ("s1", "s2"):
            for turns in (1, 2):
                store.save(Snapshot.new(session_id=sid, state={"messages": [], "turns": turns}))
        newest = store.list("s1")[0].checkpoint_id
        older = store.list("s1")[1].checkpoint_id
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (newest,)
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?", (body + b"\x00", newest)
        )
    result = CliRunner().invoke(main, ["sessions", "list", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    found = {s["session_id"]: s for s in json.loads(result.stdout)}
    assert set(found) == {"s1", "s2"}
    assert (found["s1"]["turns"], found["s1"]["newest_checkpoint"]) == (1, older)
    assert (found["s1"]["damaged"], found["s1"]["checkpoints"]) == (1, 2)
    assert (found["s2"]["turns"], found["s2"]["damaged"]) == (2, 0)
    shown = CliRunner().invoke(main, ["sessions", "show", "s1", "--data-dir", str(tmp_path)])
    assert shown.exit_code == 0
    assert "damaged: 1" in shown.stdout
    listed = CliRunner().invoke(main, ["sessions", "list", "--data-dir", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    header, *rows = (line.split() for line in listed.stdout.splitlines())
    damaged = {row[0]: row[header.index("DAMAGED")] for row in rows}
    assert damaged == {"s1": "1", "s2": "0"}
