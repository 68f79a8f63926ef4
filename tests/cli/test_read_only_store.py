"""The reading commands open the store ``read_only=True``: a store without its marker file
(written before markers existed, or the marker removed) stays without one."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore

READS = [
    ["sessions", "list"],
    ["sessions", "show", "s1"],
    ["checkpoints", "list", "s1"],
    ["checkpoints", "show", "s1"],
    ["checkpoints", "export", "s1"],
    ["doctor"],
]


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_a_missing_marker_file_stays_missing(tmp_path: Path, command: list[str]) -> None:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": 1}))
    (tmp_path / "checkpoints.db.sessionvisor").unlink()
    before = contents(tmp_path)
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert contents(tmp_path) == before
    assert not (tmp_path / "checkpoints.db.sessionvisor").exists()
