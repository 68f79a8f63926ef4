"""``sessionvisor keys``: where it may create a data directory, what it refuses, and
how its failures and output look (one ``error:`` line, indented JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from cli import main


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_list_and_revoke_refuse_a_missing_data_dir_and_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    for args in (["keys", "list"], ["keys", "revoke", "key_x"], ["keys", "list", "--json"]):
        result = run(*args, "--data-dir", str(missing))
        assert result.exit_code == 1, result.output
        assert result.stderr == (
            f"error: no data directory at {str(missing)!r}; give the right one with --data-dir\n"
        )
        assert not missing.exists()


def test_create_makes_a_fresh_data_dir_only_inside_an_existing_one(tmp_path: Path) -> None:
    fresh = tmp_path / "data"  # the README's order: keys create, then the first serve
    made = run("keys", "create", "--tenant", "acme", "--data-dir", str(fresh))
    assert made.exit_code == 0, made.output
    assert made.stdout.startswith("sv_")
    assert (fresh / "gateway.secret").is_file()
    typo = tmp_path / "nope" / "data"
    refused = run("keys", "create", "--tenant", "acme", "--data-dir", str(typo))
    assert refused.exit_code == 1
    assert f"no directory {str(tmp_path / 'nope')!r} to create it in" in refused.stderr
    assert not (tmp_path / "nope").exists()
    help_text = " ".join(run("keys", "create", "--help").stdout.split())
    assert "A missing data directory is created if its parent exists" in help_text


def test_create_refuses_an_empty_or_blank_tenant(tmp_path: Path) -> None:
    for tenant in ("", "   "):
        result = run("keys", "create", "--tenant", tenant, "--data-dir", str(tmp_path / "d"))
        assert result.exit_code == 2, result.output
        assert "a tenant id must be a non-empty name, not only whitespace" in result.stderr
        assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "d").exists()


def test_an_os_error_on_the_data_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "gateway.secret").mkdir()  # as root too, reading it fails
    result = run("keys", "create", "--tenant", "acme", "--data-dir", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: cannot use the data directory {str(tmp_path)!r} "
        f"({tmp_path / 'gateway.secret'}: Is a directory)\n"
    )


def test_output_is_indented_json_and_errors_say_error(tmp_path: Path) -> None:
    made = run("keys", "create", "--tenant", "acme", "--json", "--data-dir", str(tmp_path))
    assert made.exit_code == 0
    created = json.loads(made.stdout)
    assert made.stdout == json.dumps(created, indent=2) + "\n"
    listed = run("keys", "list", "--json", "--data-dir", str(tmp_path))
    assert listed.stdout == json.dumps(json.loads(listed.stdout), indent=2) + "\n"
    revoked = run("keys", "revoke", created["key_id"], "--json", "--data-dir", str(tmp_path))
    assert revoked.stdout == json.dumps(json.loads(revoked.stdout), indent=2) + "\n"
    unknown = run("keys", "revoke", "key_nope", "--data-dir", str(tmp_path))
    assert unknown.exit_code == 1
    assert unknown.stderr == (
        "error: no API key with id 'key_nope'; `sessionvisor keys list` shows them\n"
    )
    table = run("keys", "list", "--data-dir", str(tmp_path)).stdout.splitlines()
    assert table[0].split() == ["KEY", "ID", "TENANT", "STATE"]
    assert table[1].split() == [created["key_id"], "acme", "revoked"]


def test_the_cli_extra_alone_runs_the_inspection_commands(tmp_path: Path) -> None:
    """Without the server extra (fastapi, uvicorn), ``doctor`` and the others still run,
    and ``keys`` says what to install instead of failing on an import."""
    script = (
        "import sys; sys.modules['fastapi'] = sys.modules['uvicorn'] = None; "
        "from cli import main; main()"
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    doctor = cli("doctor", "--data-dir", str(tmp_path))
    assert doctor.returncode == 1
    assert (
        doctor.stderr
        == f"error: {str(tmp_path)!r} holds no checkpoints.db: no host has written there yet\n"
    )
    keys = cli("keys", "list", "--data-dir", str(tmp_path))
    assert keys.returncode == 1
    assert "error: the keys commands need the server extra" in keys.stderr
    assert "pip install 'sessionvisor[server]'" in keys.stderr
    assert "Traceback" not in keys.stderr


def test_a_data_directory_the_keys_command_makes_is_private(tmp_path: Path) -> None:
    made = tmp_path / "data"
    result = CliRunner().invoke(
        main, ["keys", "create", "--tenant", "acme", "--data-dir", str(made)]
    )
    assert result.exit_code == 0, result.stderr
    assert made.stat().st_mode & 0o777 == 0o700
