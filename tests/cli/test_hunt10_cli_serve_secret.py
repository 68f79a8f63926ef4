"""Hunt 10: the gateway's ``gateway.secret`` that cannot be used stops ``serve`` with one
``error:`` line (exit 1), as the ``keys`` commands say it, not a traceback; and a secret
lost beside a key database holding keys is refused, not silently made anew (which made
every existing key answer 401 "unknown or revoked")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from gateway import KeyStore, SecretUnusable
from supervisor import AgentHost
from tests.cli.test_serve_cmd import error_line, process_state, serve

__all__ = ["process_state"]  # the fixture, used by name


def _keys_made(data_dir: Path) -> str:
    """A data directory with one API key; its key."""
    keys = KeyStore(data_dir)
    try:
        return keys.create("acme").key
    finally:
        keys.close()


def test_a_secret_others_may_read_is_one_line(tmp_path: Path, process_state: None) -> None:
    _keys_made(tmp_path)
    secret = tmp_path / "gateway.secret"
    os.chmod(secret, 0o644)
    result = serve(tmp_path)
    assert result.exit_code == 1, result.output
    assert error_line(result) == (
        f"error: {secret} may be read by other users (mode 644); it keys the API-key "
        f"fingerprints: run 'chmod 600 {secret}'"
    )


def test_a_damaged_secret_is_one_line(tmp_path: Path, process_state: None) -> None:
    secret = tmp_path / "gateway.secret"
    secret.write_bytes(b"short")
    os.chmod(secret, 0o600)
    result = serve(tmp_path)
    assert result.exit_code == 1, result.output
    assert error_line(result) == (
        f"error: {secret} is damaged (fewer than 32 bytes); every key must be created anew"
    )


def _lost_message(data_dir: Path) -> str:
    secret, db = data_dir / "gateway.secret", data_dir / "gateway.sqlite3"
    return (
        f"error: {secret} is missing, but {db} holds API keys made under it: restore it from "
        f"the backup of this directory; or, to start anew, remove {db} and create new keys "
        "(every client then needs one)"
    )


def test_serve_refuses_a_lost_secret_beside_keys(tmp_path: Path, process_state: None) -> None:
    _keys_made(tmp_path)
    (tmp_path / "gateway.secret").unlink()
    result = serve(tmp_path)
    assert result.exit_code == 1, result.output
    assert error_line(result) == _lost_message(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["gateway.sqlite3"]  # no new secret made


def test_doctor_finds_the_lost_secret(tmp_path: Path) -> None:
    """``doctor`` passes no directory ``serve`` refuses."""
    AgentHost(data_dir=tmp_path).shutdown()
    _keys_made(tmp_path)
    (tmp_path / "gateway.secret").unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, ["doctor", "--data-dir", str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    problems = json.loads(result.stdout)["problems"]
    assert problems == [_lost_message(tmp_path).removeprefix("error: ")]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_listing_keys_neither_makes_a_new_secret(tmp_path: Path) -> None:
    _keys_made(tmp_path)
    (tmp_path / "gateway.secret").unlink()
    result = CliRunner().invoke(main, ["keys", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == _lost_message(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["gateway.sqlite3"]  # no file written


def test_the_restored_secret_makes_the_keys_work_again(tmp_path: Path) -> None:
    key = _keys_made(tmp_path)
    secret = tmp_path / "gateway.secret"
    saved = secret.read_bytes()
    secret.unlink()
    with pytest.raises(SecretUnusable):
        KeyStore(tmp_path)
    secret.write_bytes(saved)
    os.chmod(secret, 0o600)
    keys = KeyStore(tmp_path)
    try:
        found = keys.authenticate(key)
        assert found is not None
        assert found.tenant_id == "acme"
    finally:
        keys.close()


def test_a_key_database_without_keys_gets_a_new_secret(tmp_path: Path) -> None:
    KeyStore(tmp_path).close()  # the database, with no key yet
    (tmp_path / "gateway.secret").unlink()
    keys = KeyStore(tmp_path)
    try:
        assert keys.authenticate(keys.create("acme").key) is not None
    finally:
        keys.close()
    assert (tmp_path / "gateway.secret").stat().st_size == 32
