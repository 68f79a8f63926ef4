"""``doctor`` never passes a directory the keys commands and ``serve`` refuse: a private
directory where ``gateway.secret`` or ``gateway.sqlite3`` should be is a finding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("name", ["gateway.secret", "gateway.sqlite3"])
def test_a_directory_in_place_of_a_gateway_file(tmp_path: Path, name: str) -> None:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": 1}))
    made = run("keys", "create", "--tenant", "acme", "--data-dir", str(tmp_path))
    assert made.exit_code == 0, made.output
    assert run("doctor", "--data-dir", str(tmp_path)).exit_code == 0
    path = tmp_path / name
    path.unlink()
    path.mkdir(mode=0o700)
    path.chmod(0o700)  # private: no mode finding hides what is wrong

    refused = run("keys", "list", "--data-dir", str(tmp_path))
    assert refused.exit_code == 1
    result = run("doctor", "--json", "--data-dir", str(tmp_path))
    assert result.exit_code == 1, result.output
    problems = json.loads(result.stdout)["problems"]
    assert [p for p in problems if p.startswith(f"{path} is not a file")], problems
    shutil.rmtree(path)
