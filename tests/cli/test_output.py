"""What the text output of the inspection commands looks like to people: values
rendered as ``key=value`` lists, never Python's reprs; and ``export --json``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from actors import Snapshot, Usage
from cli import main
from supervisor import SQLiteCheckpointStore


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def stored(data_dir: Path) -> Path:
    """A store in ``data_dir`` with session ``s`` (tenant acme, usage 10 in, 5 out)."""
    usage = Usage(input_tokens=10, output_tokens=5).to_dict()
    state = {"messages": [], "turns": 1, "usage": usage, "metadata": {"tenant_id": "acme"}}
    with SQLiteCheckpointStore(data_dir / "checkpoints.db") as store:
        store.save(Snapshot.new(session_id="s", state=state))
    return data_dir


def fields(result: Result) -> dict[str, str]:
    assert result.exit_code == 0, result.output
    return dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)


def test_text_output_has_no_python_reprs(tmp_path: Path) -> None:
    data = str(stored(tmp_path))
    usage = "input_tokens=10, output_tokens=5, cached_input_tokens=0, reasoning_tokens=0"
    session = fields(run("sessions", "show", "s", "--data-dir", data))
    assert session["usage"].startswith(usage)
    checkpoint = fields(run("checkpoints", "show", "s", "--data-dir", data))
    assert checkpoint["usage"].startswith(usage)
    assert checkpoint["metadata"] == "tenant_id=acme"
    assert checkpoint["label"] == "-"
    doctor = run("doctor", "--data-dir", data)
    assert "integrity: ok\n" in doctor.stdout
    assert "orphans: none\n" in doctor.stdout
    for result in (session, checkpoint):
        assert not any(v.startswith(("{", "[")) or v == "None" for v in result.values())


def test_export_accepts_json(tmp_path: Path) -> None:
    data = str(stored(tmp_path))
    plain = run("checkpoints", "export", "s", "--data-dir", data)
    with_flag = run("checkpoints", "export", "s", "--json", "--data-dir", data)
    assert with_flag.exit_code == 0, with_flag.output
    assert with_flag.stdout == plain.stdout
    assert json.loads(with_flag.stdout)["session_id"] == "s"
    help_text = " ".join(run("checkpoints", "export", "--help").stdout.split())
    assert "--json Accepted for symmetry with the other commands; export always prints JSON" in (
        help_text
    )
