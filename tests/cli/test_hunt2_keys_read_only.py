"""``keys list`` and ``keys revoke`` only read: on a data directory that holds no key
database yet they answer (no keys; no such key) and leave the directory as it was,
without making the ``gateway.secret`` and ``gateway.sqlite3`` a later ``serve`` uses."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from actors import Snapshot
from cli import main
from supervisor import SQLiteCheckpointStore


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_list_and_revoke_leave_a_directory_without_keys_unchanged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with SQLiteCheckpointStore(data / "checkpoints.db") as store:  # a host wrote here
        store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": 1}))
    before = contents(data)

    listed = run("keys", "list", "--data-dir", str(data))
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.split() == ["KEY", "ID", "TENANT", "STATE"]
    as_json = run("keys", "list", "--json", "--data-dir", str(data))
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == []
    revoked = run("keys", "revoke", "key_0123456789ab", "--data-dir", str(data))
    assert revoked.exit_code == 1
    assert revoked.stderr == (
        "error: no API key with id 'key_0123456789ab'; `sessionvisor keys list` shows them\n"
    )

    assert contents(data) == before


def test_keys_created_later_are_listed_and_revoked(tmp_path: Path) -> None:
    """Reading first does not get in the way of the key store ``keys create`` makes."""
    assert run("keys", "list", "--data-dir", str(tmp_path)).exit_code == 0
    made = run("keys", "create", "--tenant", "acme", "--json", "--data-dir", str(tmp_path))
    assert made.exit_code == 0, made.output
    key_id = json.loads(made.stdout)["key_id"]
    listed = json.loads(run("keys", "list", "--json", "--data-dir", str(tmp_path)).stdout)
    assert [k["key_id"] for k in listed] == [key_id]
    revoked = run("keys", "revoke", key_id, "--json", "--data-dir", str(tmp_path))
    assert revoked.exit_code == 0, revoked.output
    assert json.loads(revoked.stdout)["revoked_at"] is not None
