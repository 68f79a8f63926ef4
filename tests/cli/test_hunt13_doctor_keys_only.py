"""``doctor`` on a data directory where API keys were made but no session yet (``keys
create`` before the first ``serve``; a ``serve --postgres`` node's, which holds only
``gateway.secret``): what
is there is checked, and the missing ``checkpoints.db`` is a warning, not a failure."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner, Result

from cli import main


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def keys_only(tmp_path: Path) -> Path:
    """A data directory ``keys create`` made: the key database and its secret, no store."""
    data = tmp_path / "data"
    made = run("keys", "create", "--tenant", "acme", "--data-dir", str(data))
    assert made.exit_code == 0, made.output
    assert sorted(p.name for p in data.iterdir()) == ["gateway.secret", "gateway.sqlite3"]
    return data


def contents(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_a_directory_with_keys_and_no_store_is_healthy_with_a_warning(tmp_path: Path) -> None:
    data = keys_only(tmp_path)
    before = contents(data)
    result = run("doctor", "--json", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["problems"] == []
    assert report["warnings"] == [
        f"{data / 'checkpoints.db'} does not exist: no host has saved a session here yet (or "
        "its sessions are in PostgreSQL: serve --postgres), so there are no checkpoints to "
        "check; if one did, restore the store and its marker file from a backup"
    ]
    assert report["bytes"] == 0
    text = run("doctor", "--data-dir", str(data))
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[-2:] == [
        f"WARNING: {report['warnings'][0]}",
        "no problems found",
    ]
    assert contents(data) == before  # no store made, nothing changed
    assert not (data / "checkpoints.db").exists()


def test_the_secret_of_a_directory_without_a_store_is_checked(tmp_path: Path) -> None:
    data = keys_only(tmp_path)
    secret = data / "gateway.secret"
    os.chmod(secret, 0o644)
    result = run("doctor", "--json", "--data-dir", str(data))
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["problems"] == [
        f"{secret} may be read by other users (mode 644); it keys the gateway's API-key "
        f"fingerprints: run 'chmod 600 {secret}'"
    ]


def test_the_key_database_of_a_directory_without_a_store_is_checked(tmp_path: Path) -> None:
    data = keys_only(tmp_path)
    (data / "gateway.sqlite3").write_bytes(b"not a database" * 100)
    result = run("doctor", "--data-dir", str(data))
    assert result.exit_code == 1, result.output
    assert f"PROBLEM: {data / 'gateway.sqlite3'} is not a readable database" in result.stdout


def test_a_lost_secret_beside_the_keys_is_a_problem(tmp_path: Path) -> None:
    data = keys_only(tmp_path)
    (data / "gateway.secret").unlink()
    result = run("doctor", "--json", "--data-dir", str(data))
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)["problems"]
    assert problem.startswith(f"{data / 'gateway.secret'} is missing, but ")


def test_a_directory_holding_nothing_of_sessionvisor_is_still_an_error(tmp_path: Path) -> None:
    """No store, no key, no secret: most likely the wrong --data-dir, as before."""
    (tmp_path / "notes.txt").write_text("not ours")
    result = run("doctor", "--data-dir", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {str(tmp_path)!r} holds no checkpoints.db: no host has written there yet\n"
    )


def test_a_directory_with_only_the_gateway_secret_is_checked(tmp_path: Path) -> None:
    """A ``serve --postgres`` node keeps only ``gateway.secret`` in its data directory."""
    data = keys_only(tmp_path)
    (data / "gateway.sqlite3").unlink()
    result = run("doctor", "--json", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["problems"] == []
    assert [w.split(" does not exist: ")[0] for w in report["warnings"]] == [
        str(data / "checkpoints.db")
    ]
