"""The read commands on a store damaged mid-file: one line saying so, what to run and
what to restore, never SQLite's traceback."""

from __future__ import annotations

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
