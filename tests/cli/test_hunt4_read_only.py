"""The reading commands change nothing in a data directory: not the keys an encrypted
store records, not whether a store is encrypted, not the ``-wal`` file a host that
stopped without closing its store left (each of these changed what the next host
could open, or what a backup of the directory holds)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from actors import Snapshot
from cli import main
from supervisor import EncryptionKeys, SQLiteCheckpointStore

READS = [
    ["sessions", "list"],
    ["sessions", "show", "s1"],
    ["checkpoints", "list", "s1"],
    ["checkpoints", "show", "s1"],
    ["checkpoints", "export", "s1"],
]


def run(args: list[str], keys: str | None = None) -> Result:
    return CliRunner(env={EncryptionKeys.VARIABLE: keys}).invoke(main, args)


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def entry(key_id: str, key: bytes) -> str:
    return f"{key_id}:{base64.b64encode(key).decode()}"


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_a_new_current_key_is_not_recorded(tmp_path: Path, command: list[str]) -> None:
    """Keys given with a new key first (a rotation being prepared): the store is read,
    and the host still opens it with the keys it had (the new key was recorded, so the
    host's ring then lacked a key the store says it uses)."""
    old, new = EncryptionKeys.new_key(), EncryptionKeys.new_key()
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": old})) as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": 1}))
    before = contents(tmp_path)
    result = run([*command, "--data-dir", str(tmp_path)], f"{entry('k2', new)},{entry('k1', old)}")
    assert result.exit_code == 0, result.output
    assert contents(tmp_path) == before
    SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": old})).close()


def test_keys_are_not_needed_for_a_plaintext_store_nor_make_it_encrypted(tmp_path: Path) -> None:
    """A host without encryption that has saved nothing yet: a reading command with keys
    in the environment leaves the store plaintext (it marked it encrypted, and the host
    then refused to open it)."""
    db = tmp_path / "checkpoints.db"
    SQLiteCheckpointStore(db).close()
    before = contents(tmp_path)
    result = run(
        ["sessions", "list", "--json", "--data-dir", str(tmp_path)], entry("k1", b"k" * 32)
    )
    assert (result.exit_code, result.stdout) == (0, "[]\n")
    assert contents(tmp_path) == before
    SQLiteCheckpointStore(db).close()  # raised StoreEncrypted


def test_keys_missing_from_the_ring_are_still_an_error(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": b"1" * 32})) as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": []}))
    before = contents(tmp_path)
    result = run(["sessions", "list", "--data-dir", str(tmp_path)], entry("k2", b"2" * 32))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "'k1' is used by this store but missing from the key ring" in result.stderr
    assert contents(tmp_path) == before


def crashed_store(tmp_path: Path) -> Path:
    """A data directory as a host killed while serving leaves it: checkpoints saved in
    its ``-wal`` file, not yet copied into ``checkpoints.db``, and the ``-shm`` file."""
    served, data = tmp_path / "served", tmp_path / "data"
    served.mkdir()
    data.mkdir()
    store = SQLiteCheckpointStore(served / "checkpoints.db", keep_last=None)
    try:
        for turns in range(3):
            store.save(Snapshot.new(session_id="s1", state={"messages": [], "turns": turns}))
        for name in ("checkpoints.db", "checkpoints.db-wal", "checkpoints.db-shm"):
            shutil.copy(served / name, data / name)
        shutil.copy(served / "checkpoints.db.sessionvisor", data / "checkpoints.db.sessionvisor")
    finally:
        store.close()
    return data


@pytest.mark.parametrize("command", READS, ids=" ".join)
def test_the_wal_file_of_a_stopped_host_is_left_as_it_is(
    tmp_path: Path, command: list[str]
) -> None:
    """The files as a crashed host left them, for its next start (or for a backup): a
    reading command no longer copies the ``-wal`` file into the store and deletes it."""
    data = crashed_store(tmp_path)
    before = contents(data)
    result = run([*command, "--data-dir", str(data)])
    assert result.exit_code == 0, result.output
    assert contents(data).keys() == before.keys()
    assert contents(data)["checkpoints.db"] == before["checkpoints.db"]
    assert contents(data)["checkpoints.db-wal"] == before["checkpoints.db-wal"]
    listed = run(["checkpoints", "list", "s1", "--json", "--data-dir", str(data)])
    assert listed.stdout.count('"checkpoint_id"') == 3


def test_a_clean_directory_gets_no_wal_file(tmp_path: Path) -> None:
    """Without a ``-wal`` file to keep, none is left behind either."""
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db) as store:
        store.save(Snapshot.new(session_id="s1", state={"messages": []}))
    before = contents(tmp_path)
    assert run(["sessions", "list", "--data-dir", str(tmp_path)]).exit_code == 0
    assert contents(tmp_path) == before


@pytest.mark.parametrize(
    "command", [*READS, ["checkpoints", "prune", "--keep", "1"], ["doctor"]], ids=" ".join
)
def test_a_store_that_is_a_link_to_nothing_is_named_so(tmp_path: Path, command: list[str]) -> None:
    """``checkpoints.db`` a symbolic link whose target is gone (a volume not mounted, a
    moved file): said so, with the target, not that no host has written there yet."""
    (tmp_path / "checkpoints.db").symlink_to(tmp_path / "gone" / "checkpoints.db")
    result = run([*command, "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {str(tmp_path / 'checkpoints.db')!r} is a symbolic link to "
        f"{str(tmp_path / 'gone' / 'checkpoints.db')!r}, which does not exist: restore what "
        "it points to (mount its volume), or remove the link\n"
    )


def not_a_file(data_dir: Path, kind: str) -> Path:
    db = data_dir / "checkpoints.db"
    if kind == "directory":
        db.mkdir()
    else:
        os.mkfifo(db)
    return db


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("kind", ["directory", "named pipe"])
@pytest.mark.parametrize("command", [*READS, ["checkpoints", "prune", "--keep", "1"]], ids=" ".join)
def test_a_store_that_is_no_file_is_named_so(tmp_path: Path, command: list[str], kind: str) -> None:
    """Something else than a file where the store should be: said so (a directory was a
    'disk I/O error', a named pipe blocked the command for ever, waiting for a writer)."""
    db = not_a_file(tmp_path, kind)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli import main; main()",
            *command,
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"error: {str(db)!r} is not a file: restore the store's file there from a backup, "
        "or give the right data directory with --data-dir\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("kind", ["directory", "named pipe"])
def test_doctor_finds_a_store_that_is_no_file(tmp_path: Path, kind: str) -> None:
    db = not_a_file(tmp_path, kind)
    result = run(["doctor", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"] == [
        f"{db} is not a file: restore the store's file there from a backup"
    ]
