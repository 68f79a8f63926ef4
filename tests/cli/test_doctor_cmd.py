"""``sessionvisor doctor`` judging what the other commands and ``serve`` judge, by
their rules: secrets others may read, a truncated store, a dangling link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli import main
from supervisor import AgentHost


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def hosted(data_dir: Path) -> Path:
    """``data_dir`` as a host and ``keys create`` leave it: a store, both secrets."""
    AgentHost(data_dir=data_dir).shutdown()
    assert run("keys", "create", "--tenant", "acme", "--data-dir", str(data_dir)).exit_code == 0
    return data_dir


def test_secrets_others_may_read(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    assert run("doctor", "--data-dir", str(data)).exit_code == 0
    key, secret = data / "fingerprint.key", data / "gateway.secret"
    os.chmod(key, 0o644)
    os.chmod(secret, 0o640)
    result = run("doctor", "--data-dir", str(data))
    assert result.exit_code == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM: ")]
    assert problems == [
        # word for word what serve refuses to start with
        f"PROBLEM: {key} may be read by other users (mode 644); it keys the API-key "
        f"fingerprints: run 'chmod 600 {key}'",
        f"PROBLEM: {secret} may be read by other users (mode 640); it keys the gateway's "
        f"API-key fingerprints: run 'chmod 600 {secret}'",
    ]
    os.chmod(key, 0o600)
    os.chmod(secret, 0o600)
    assert run("doctor", "--data-dir", str(data)).exit_code == 0


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("gateway.secret", b"x" * 31, "is damaged (fewer than 32 bytes)"),
        ("gateway.sqlite3", b"not a database" * 100, "is not a readable database"),
    ],
)
def test_a_damaged_file_is_a_finding(
    tmp_path: Path, name: str, content: bytes, problem: str
) -> None:
    data = hosted(tmp_path)
    (data / name).write_bytes(content)
    result = run("doctor", "--data-dir", str(data))
    assert result.exit_code == 1
    assert f"PROBLEM: {data / name} {problem}" in result.stdout


def test_a_truncated_store_is_what_the_other_commands_say(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    (data / "checkpoints.db").write_bytes(b"")
    said = run("sessions", "list", "--data-dir", str(data))
    assert said.exit_code == 1
    assert "is empty, but its marker file says a store was created there" in said.stderr
    result = run("doctor", "--data-dir", str(data))
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "PROBLEM: " + said.stderr.removeprefix("error: ")[:-1]
    assert "integrity" not in result.stdout
    assert "not a sessionvisor store" not in result.stdout


def test_a_deleted_store_is_what_the_other_commands_say(tmp_path: Path) -> None:
    """The store is gone but its marker says a host wrote it: that is lost data, which
    a host refuses to start on, not a directory "no host has written" yet."""
    data = hosted(tmp_path)
    (data / "checkpoints.db").unlink()
    said = run("sessions", "list", "--data-dir", str(data))
    assert said.exit_code == 1
    assert said.stderr == (
        f"error: checkpoint store {str(data / 'checkpoints.db')!r} is missing, but its marker "
        "file says a store was there; restore it (and its -wal file) from a backup; to start "
        "over with an empty store instead, delete it and the marker file beside it ending in "
        "'.sessionvisor'\n"
    )
    result = run("doctor", "--data-dir", str(data), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"] == [said.stderr.removeprefix("error: ")[:-1]]
    assert not (data / "checkpoints.db").exists()  # neither created it anew


def test_a_dangling_symlink_is_a_finding(tmp_path: Path) -> None:
    data = hosted(tmp_path)
    (data / "x").symlink_to(tmp_path / "nowhere")
    result = run("doctor", "--data-dir", str(data), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"] == [
        f"{data / 'x'} is a symbolic link to {str(tmp_path / 'nowhere')!r}, which does not "
        f"exist: remove it (rm {data / 'x'}) or restore what it points to"
    ]
