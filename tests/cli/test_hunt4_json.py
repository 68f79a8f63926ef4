"""``--json`` prints strict JSON whatever a checkpoint holds: a NaN or an infinity in a
session's state is ``null`` (as JavaScript's ``JSON.stringify`` writes it), not the
``NaN`` / ``Infinity`` that strict parsers (``jq``, browsers, Go, Rust) refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore


def strict(text: str) -> object:
    """``text`` parsed as strict JSON (Python's parser takes ``NaN`` unless told not to)."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("command", [["checkpoints", "show"], ["checkpoints", "export"]])
def test_non_finite_numbers_are_null(tmp_path: Path, command: list[str]) -> None:
    metadata = {"score": float("nan"), "limits": [float("inf"), -float("inf"), 1.5]}
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": [], "metadata": metadata}))
    result = CliRunner().invoke(main, [*command, "s1", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = strict(result.stdout)
    assert isinstance(document, dict)
    found = document["state"]["metadata"] if "state" in document else document["metadata"]
    assert found == {"score": None, "limits": [None, None, 1.5]}
