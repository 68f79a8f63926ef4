"""``--data-dir`` naming a file: "no data directory" is an error of exit status 1 on
one line, as the README lists it (it was click's three-line usage error, status 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main

COMMANDS = [
    ["sessions", "list"],
    ["sessions", "show", "s1"],
    ["checkpoints", "list", "s1"],
    ["checkpoints", "show", "s1"],
    ["checkpoints", "export", "s1"],
    ["checkpoints", "prune", "--keep", "1"],
    ["doctor"],
    ["keys", "list"],
    ["keys", "revoke", "k1"],
    ["keys", "create", "--tenant", "acme"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_file_is_no_data_directory(tmp_path: Path, command: list[str]) -> None:
    afile = tmp_path / "data"
    afile.write_bytes(b"not a directory")
    result = CliRunner().invoke(main, [*command, "--data-dir", str(afile)])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ")
    assert str(afile) in result.stderr
    assert "a file is there" in result.stderr
    assert result.stderr.count("\n") == 1
    assert afile.read_bytes() == b"not a directory"
