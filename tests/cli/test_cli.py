"""The ``sessionvisor`` inspection commands against real data directories.

Most tests read a directory that a running ``AgentHost`` in this process is
serving (it holds ``host.lock`` the whole time), through click's ``CliRunner``.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from actors import AgentTemplate, EchoModel, Snapshot
from cli import main
from supervisor import AgentHost, EncryptionKeys, SQLiteCheckpointStore


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[AgentHost, Path]]:
    """A running host on ``tmp_path/data`` with sessions ``a1`` (tenant acme, 2 turns)
    and ``b1`` (tenant beta, 1 turn)."""
    data = tmp_path / "data"
    host = AgentHost(data_dir=data)
    try:
        template = AgentTemplate(model=EchoModel())
        host.start_session(template, "a1", tenant_id="acme")
        host.send("a1", "hello")
        host.send("a1", "again")
        host.start_session(template, "b1", tenant_id="beta")
        host.send("b1", "hi")
        yield host, data
    finally:
        host.shutdown()


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_sessions_list_while_the_host_serves(served: tuple[AgentHost, Path]) -> None:
    host, data = served
    assert (data / "host.lock").exists()
    result = run("sessions", "list", "--data-dir", str(data), "--json")
    assert result.exit_code == 0, result.output
    found = {s["session_id"]: s for s in json.loads(result.output)}
    assert set(found) == {"a1", "b1"}
    assert found["a1"]["tenant_id"] == "acme"
    assert found["a1"]["turns"] == 2
    assert found["a1"]["messages"] == 4
    # the host keeps working and its new turn is visible to the next command
    host.send("b1", "more")
    result = run("sessions", "show", "b1", "--data-dir", str(data), "--json")
    assert json.loads(result.output)["turns"] == 2


def test_sessions_list_table_and_tenant_filter(served: tuple[AgentHost, Path]) -> None:
    _, data = served
    result = run("sessions", "list", "--tenant", "beta", "--data-dir", str(data))
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "SESSION",
        "TENANT",
        "MODEL",
        "TURNS",
        "TOKENS",
        "DAMAGED",
        "SAVED",
    ]
    assert len(lines) == 2
    assert lines[1].split()[:2] == ["b1", "beta"]


def test_checkpoints_list_show_export(served: tuple[AgentHost, Path]) -> None:
    _, data = served
    listed = json.loads(run("checkpoints", "list", "a1", "--data-dir", str(data), "--json").output)
    assert len(listed) >= 2
    assert listed == sorted(listed, key=lambda c: c["checkpoint_id"], reverse=True)
    oldest = listed[-1]["checkpoint_id"]
    shown = run("checkpoints", "show", "a1", oldest, "--data-dir", str(data), "--json")
    assert json.loads(shown.output)["checkpoint_id"] == oldest
    exported = run("checkpoints", "export", "a1", "--redact", "--data-dir", str(data))
    assert exported.exit_code == 0
    document = json.loads(exported.output)
    assert document["session_id"] == "a1"
    texts = json.dumps(document["messages"])
    assert "hello" in texts
    assert "again" in texts


def test_export_redacts_secrets(tmp_path: Path) -> None:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        store.save(
            Snapshot.new(
                session_id="s",
                state={"messages": [], "metadata": {"api_key": "k-123", "tenant_id": "t"}},
            )
        )
    plain = run("checkpoints", "export", "s", "--data-dir", str(tmp_path))
    assert "k-123" in plain.output  # export without --redact keeps the stored metadata
    redacted = run("checkpoints", "export", "s", "--redact", "--data-dir", str(tmp_path))
    assert redacted.exit_code == 0
    assert "k-123" not in redacted.output
    assert json.loads(redacted.output)["metadata"] == {"tenant_id": "t"}


def test_prune_keeps_the_newest(served: tuple[AgentHost, Path]) -> None:
    _, data = served
    before = json.loads(run("checkpoints", "list", "a1", "--data-dir", str(data), "--json").output)
    result = run("checkpoints", "prune", "--keep", "1", "a1", "--data-dir", str(data), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["removed"] == {"a1": len(before) - 1}
    after = json.loads(run("checkpoints", "list", "a1", "--data-dir", str(data), "--json").output)
    assert [c["checkpoint_id"] for c in after] == [before[0]["checkpoint_id"]]


def test_errors_and_exit_codes(served: tuple[AgentHost, Path], tmp_path: Path) -> None:
    _, data = served
    missing = run("sessions", "list", "--data-dir", str(tmp_path / "nope"))
    assert missing.exit_code == 1
    assert "no data directory" in missing.stderr
    assert not (tmp_path / "nope").exists()
    unknown = run("sessions", "show", "zz", "--data-dir", str(data))
    assert unknown.exit_code == 1
    assert "no session 'zz'" in unknown.stderr
    no_cp = run("checkpoints", "show", "a1", "0" * 32, "--data-dir", str(data))
    assert no_cp.exit_code == 1
    assert "no checkpoint" in no_cp.stderr
    assert run("checkpoints", "prune", "--keep", "0", "--data-dir", str(data)).exit_code == 2
    assert run("sessions", "bogus").exit_code == 2


def test_doctor_healthy_while_served(served: tuple[AgentHost, Path]) -> None:
    _, data = served
    result = run("doctor", "--data-dir", str(data), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["problems"] == []
    assert report["integrity"] == ["ok"]
    assert report["schema_version"] == 5
    assert report["sessions"] == 2


def test_doctor_finds_orphans_and_bad_permissions(served: tuple[AgentHost, Path]) -> None:
    host, data = served
    host.shutdown()
    with sqlite3.connect(data / "checkpoints.db") as conn:
        conn.execute("INSERT INTO state_parts VALUES ('ghost', x'00', 'c', x'00')")
    os.chmod(data, 0o777)
    result = run("doctor", "--data-dir", str(data))
    assert result.exit_code == 1
    assert "1 orphaned state parts of sessions without checkpoints" in result.output
    assert f"run chmod o-w {data}" in result.output


def test_doctor_finds_a_damaged_file(tmp_path: Path) -> None:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        store.save(Snapshot.new(session_id="s", state={"messages": []}))
    with open(tmp_path / "checkpoints.db", "r+b") as db:
        db.seek(0)
        db.write(b"garbage" * 20)
    result = run("doctor", "--data-dir", str(tmp_path))
    assert result.exit_code == 1
    assert "restore it from a backup" in result.output


def test_installed_script(served: tuple[AgentHost, Path]) -> None:
    _, data = served
    script = Path(sys.executable).parent / "sessionvisor"
    done = subprocess.run(
        [str(script), "sessions", "list", "--json", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert {s["session_id"] for s in json.loads(done.stdout)} == {"a1", "b1"}


def test_encrypted_store_needs_keys(tmp_path: Path) -> None:
    key = EncryptionKeys.new_key()
    keys = EncryptionKeys({"k1": key})
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db", encryption=keys) as store:
        store.save(Snapshot.new(session_id="s", state={"messages": [], "turns": 3}))
    runner = CliRunner(env={"SESSIONVISOR_KEYS": None})
    refused = runner.invoke(main, ["sessions", "show", "s", "--data-dir", str(tmp_path)])
    assert refused.exit_code == 1
    assert "is encrypted, give keys: set SESSIONVISOR_KEYS" in refused.stderr
    env = {"SESSIONVISOR_KEYS": "k1:" + base64.b64encode(key).decode()}
    shown = CliRunner(env=env).invoke(
        main, ["sessions", "show", "s", "--json", "--data-dir", str(tmp_path)]
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["turns"] == 3
