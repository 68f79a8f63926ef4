"""The text output of odd session ids and times: a table row per session whatever its id
holds (a line break, a tab, a terminal escape sequence, wide CJK characters), columns
aligned as a terminal shows them, and a checkpoint's time written alike in every command
and in both outputs."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from click.testing import CliRunner, Result

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore

ODD = ("a\nb", "tab\there", "\x1b[31mred", "日本語", "plain")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def store_of(data_dir: Path, sessions: tuple[str, ...]) -> Path:
    with SQLiteCheckpointStore(data_dir / "checkpoints.db") as store:
        for sid in sessions:
            state = {"messages": [], "turns": 1, "metadata": {"tenant_id": "acme"}}
            store.save(Snapshot.new(session_id=sid, state=state))
    return data_dir


def columns(text: str) -> int:
    """Terminal columns: wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_ids_with_control_characters_stay_on_their_row_escaped(tmp_path: Path) -> None:
    data = store_of(tmp_path, ODD)
    result = run("sessions", "list", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + len(ODD)
    assert "\x1b" not in result.stdout
    assert "\t" not in result.stdout
    assert sorted(line.split("  ")[0].rstrip() for line in lines[1:]) == sorted(
        ["a\\nb", "tab\\there", "\\x1b[31mred", "日本語", "plain"]
    )
    shown = run("sessions", "show", "a\nb", "--data-dir", str(data))  # passed back as is
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0] == "session_id: a\\nb"
    as_json = run("sessions", "list", "--json", "--data-dir", str(data))
    assert {s["session_id"] for s in json.loads(as_json.stdout)} == set(ODD)


def test_columns_align_with_wide_characters(tmp_path: Path) -> None:
    data = store_of(tmp_path, ("日本語", "plain", "x" * 7))
    result = run("sessions", "list", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    starts = {columns(line[: line.index("acme")]) for line in result.stdout.splitlines()[1:]}
    header = result.stdout.splitlines()[0]
    assert starts == {header.index("TENANT")}


def test_a_checkpoint_time_reads_the_same_everywhere(tmp_path: Path) -> None:
    data = store_of(tmp_path, ("s1",))
    listed = json.loads(run("checkpoints", "list", "s1", "--json", "--data-dir", str(data)).stdout)
    saved_at = listed[0]["saved_at"]
    assert "T" in saved_at
    shown = json.loads(run("checkpoints", "show", "s1", "--json", "--data-dir", str(data)).stdout)
    assert shown["saved_at"] == saved_at
    text = run("checkpoints", "show", "s1", "--data-dir", str(data)).stdout
    assert f"saved_at: {saved_at}" in text.splitlines()
    session = json.loads(run("sessions", "show", "s1", "--json", "--data-dir", str(data)).stdout)
    assert session["saved_at"] == saved_at
