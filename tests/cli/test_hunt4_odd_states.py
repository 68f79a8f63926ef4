"""A store holds whatever state its users saved, not only an agent session's: a
``metadata`` that is no mapping or ``messages`` that is no list is shown as it is
(or as none), not a traceback (``AttributeError``, ``TypeError``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore

STATES = {
    "m1": {"metadata": [1, 2], "messages": [], "turns": 1},
    "m2": {"metadata": None, "messages": 5},
    "m3": {"metadata": {"tenant_id": "acme"}, "messages": None},
    "m4": {"usage": "lots", "messages": []},
}


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        for sid, state in STATES.items():
            store.save(Snapshot.new(session_id=sid, state=state))
    return tmp_path


@pytest.mark.parametrize("as_json", [[], ["--json"]], ids=["text", "json"])
def test_sessions_list(odd: Path, as_json: list[str]) -> None:
    result = CliRunner().invoke(main, ["sessions", "list", *as_json, "--data-dir", str(odd)])
    assert result.exit_code == 0, result.output
    if as_json:
        found = {s["session_id"]: s for s in json.loads(result.stdout)}
        assert {sid: (s["tenant_id"], s["messages"]) for sid, s in found.items()} == {
            "m1": (None, 0),
            "m2": (None, 0),
            "m3": ("acme", 0),
            "m4": (None, 0),
        }
        assert (found["m4"]["usage"], found["m4"]["damaged"]) == (None, 0)


@pytest.mark.parametrize("command", [["sessions", "show"], ["checkpoints", "show"]])
@pytest.mark.parametrize("sid", list(STATES))
def test_show(odd: Path, command: list[str], sid: str) -> None:
    result = CliRunner().invoke(main, [*command, sid, "--data-dir", str(odd)])
    assert result.exit_code == 0, result.output
    assert "messages: 0" in result.stdout.splitlines()
