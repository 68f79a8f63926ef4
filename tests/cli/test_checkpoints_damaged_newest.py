"""``checkpoints show`` and ``checkpoints export`` without a checkpoint id: a session whose
newest checkpoint is damaged is shown by the newest that can be read, the one a host
resumes it from (as ``sessions show`` describes it), with a warning naming the one
skipped; a damaged checkpoint named by its id stays an error."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from cli import main
from tests.cli.test_doctor_checkpoints import checkpoint_ids, damage_body, hosted


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_show_and_export_skip_a_damaged_newest_checkpoint(tmp_path: Path) -> None:
    data = hosted(tmp_path)  # s1: three turns, one checkpoint each at least
    *older, newest = checkpoint_ids(data, "s1")
    damage_body(data, newest)

    shown = run("checkpoints", "show", "s1", "--json", "--data-dir", str(data))
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["checkpoint_id"] == older[-1]
    assert newest in shown.stderr
    assert "the newest that can be read" in shown.stderr

    exported = run("checkpoints", "export", "s1", "--redact", "--data-dir", str(data))
    assert exported.exit_code == 0, exported.output
    document = json.loads(exported.stdout)
    assert document["checkpoint_id"] == older[-1]
    described = run("sessions", "show", "s1", "--json", "--data-dir", str(data))
    assert json.loads(described.stdout)["newest_checkpoint"] == older[-1]  # the same one

    named = run("checkpoints", "show", "s1", newest, "--data-dir", str(data))
    assert named.exit_code == 1
    assert newest in named.stderr


def test_a_session_none_of_whose_checkpoints_reads_is_an_error(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    for cid in checkpoint_ids(data, "s2"):
        damage_body(data, cid)
    shown = run("checkpoints", "show", "s2", "--data-dir", str(data))
    assert shown.exit_code == 1
    assert shown.stderr.startswith("error: ")
    assert "s2" in shown.stderr
    missing = run("checkpoints", "export", "nobody", "--data-dir", str(data))
    assert missing.exit_code == 1
    assert "no session 'nobody'" in missing.stderr
