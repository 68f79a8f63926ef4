"""Hunt 11: ``keys list`` and ``keys revoke`` on a data directory whose key database holds
no key and which has no ``gateway.secret`` write no file (they made a new secret), as the
README promises; with keys in the database, the lost secret is refused as ``serve`` does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner, Result

from cli import main
from gateway.keys import KeyStore


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _empty_key_database(data: Path) -> None:
    """A key database without keys and without its secret (a ``serve`` made them, then the
    secret was removed, or the directory was restored without it)."""
    KeyStore(data).close()
    (data / "gateway.secret").unlink()
    with sqlite3.connect(data / "gateway.sqlite3") as db:  # no -wal / -shm left behind
        db.execute("PRAGMA journal_mode=DELETE")
    assert sorted(p.name for p in data.iterdir()) == ["gateway.sqlite3"]


def test_list_and_revoke_write_no_secret_beside_a_database_without_keys(tmp_path: Path) -> None:
    _empty_key_database(tmp_path)
    before = contents(tmp_path)

    listed = run("keys", "list", "--json", "--data-dir", str(tmp_path))
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.strip() == "[]"
    revoked = run("keys", "revoke", "key_0123456789ab", "--data-dir", str(tmp_path))
    assert revoked.exit_code == 1
    assert revoked.stderr == (
        "error: no API key with id 'key_0123456789ab'; `sessionvisor keys list` shows them\n"
    )

    assert contents(tmp_path) == before  # no gateway.secret made


def test_list_refuses_a_lost_secret_beside_keys(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    try:
        store.create("acme")
    finally:
        store.close()
    secret, db = tmp_path / "gateway.secret", tmp_path / "gateway.sqlite3"
    secret.unlink()
    listed = run("keys", "list", "--data-dir", str(tmp_path))
    assert listed.exit_code == 1
    assert listed.stderr.startswith(f"error: {secret} is missing, but {db} holds API keys")
    assert not secret.exists()
