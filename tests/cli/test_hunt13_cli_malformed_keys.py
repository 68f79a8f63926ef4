"""A malformed ``SESSIONVISOR_KEYS`` does not stop the commands on a plaintext store, which
is read without keys (as the README promises): they work, and warn on stderr that the
variable is malformed. An encrypted store still needs the keys: the error says both."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from actors import Snapshot
from cli import main
from supervisor import EncryptionKeys, SQLiteCheckpointStore

MALFORMED = "2025-06"  # an id without its key: no ':'
REASON = "entry 1 of SESSIONVISOR_KEYS has no ':'; write each entry as key_id:base64key"
KEY = b"k" * 32

COMMANDS = [
    ["sessions", "list"],
    ["sessions", "show", "s1"],
    ["checkpoints", "list", "s1"],
    ["checkpoints", "show", "s1"],
    ["checkpoints", "export", "s1"],
    ["checkpoints", "prune", "--keep", "1"],
]


def run(data: Path, command: list[str], keys: str | None) -> Result:
    env = {EncryptionKeys.VARIABLE: keys}
    return CliRunner(env=env).invoke(main, [*command, "--json", "--data-dir", str(data)])


def stored(data: Path, keys: EncryptionKeys | None = None) -> Path:
    """``data``, made a data directory whose store holds session ``s1`` (two checkpoints)."""
    data.mkdir(exist_ok=True)
    with SQLiteCheckpointStore(data / "checkpoints.db", encryption=keys) as store:
        for turns in (1, 2):
            store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": turns}))
    return data


def warning(data: Path) -> str:
    store = str(data / "checkpoints.db")
    return (
        f"warning: {EncryptionKeys.VARIABLE} is malformed, and ignored: the store {store!r} is "
        f"not encrypted, so it needs no keys; fix the variable before a host reads it "
        f"({REASON})\n"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_plaintext_store_is_read_despite_malformed_keys(
    tmp_path: Path, command: list[str]
) -> None:
    data = stored(tmp_path / "data")
    without = run(shutil.copytree(data, tmp_path / "copy"), command, None)
    assert (without.exit_code, without.stderr) == (0, "")
    result = run(data, command, MALFORMED)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == warning(data)
    assert result.stdout == without.stdout.replace(str(tmp_path / "copy"), str(data))
    assert sorted(p.name for p in data.iterdir()) == [
        "checkpoints.db",
        "checkpoints.db.sessionvisor",
    ]  # nothing left behind


def test_doctor_verifies_a_plaintext_store_despite_malformed_keys(tmp_path: Path) -> None:
    data = stored(tmp_path)
    result = run(data, ["doctor"], MALFORMED)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] is True
    assert report["problems"] == []
    assert report["warnings"] == [warning(data).removeprefix("warning: ")[:-1]]


@pytest.mark.parametrize("command", [*COMMANDS[:2], COMMANDS[-1]], ids=" ".join)
def test_an_encrypted_store_with_malformed_keys_says_both(
    tmp_path: Path, command: list[str]
) -> None:
    data = stored(tmp_path, EncryptionKeys({"k1": KEY}))
    result = run(data, command, MALFORMED)
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: the store {str(data / 'checkpoints.db')!r} is encrypted, and "
        f"{EncryptionKeys.VARIABLE} cannot give its keys: {REASON}\n"
    )
    assert sorted(p.name for p in data.iterdir()) == [
        "checkpoints.db",
        "checkpoints.db.sessionvisor",
    ]  # no -wal or -shm file left by the failed command
    good = f"k1:{base64.b64encode(KEY).decode()}"
    assert run(data, command, good).exit_code == 0


def test_doctor_says_why_an_encrypted_store_was_not_verified(tmp_path: Path) -> None:
    data = stored(tmp_path, EncryptionKeys({"k1": KEY}))
    result = run(data, ["doctor"], MALFORMED)
    assert result.exit_code == 0, result.output  # a warning, as without keys
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] is False
    assert report["warnings"] == [
        f"the checkpoints in {data / 'checkpoints.db'} were not verified: the store is "
        f"encrypted, and {EncryptionKeys.VARIABLE} cannot give its keys: {REASON}"
    ]
