"""Hunt 10: a ``--postgres`` that is no connection string, or a ``--postgres-schema`` that
is no schema name the store takes (``MyApp``: upper case), is a usage error (exit 2)
naming both options, with the store's message, from ``serve`` and every ``keys``
command: both ended in a traceback. No PostgreSQL is needed: the store refuses them
before it connects."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli import main
from tests.cli.test_serve_cmd import process_state

__all__ = ["process_state"]  # the fixture, used by name

TEMPLATE = "chat=tests.cli.serve_targets:echo"
SCHEMA = "schema must be a lowercase SQL identifier (letters, digits, '_'; at most 63), got "
CONNINFO = "conninfo is not a PostgreSQL connection string: give a URI"
HINT = "Invalid value for '--postgres' / '--postgres-schema': "


def _usage_error(result: Result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith(f"Error: {HINT}{message}")


DSN = "postgresql://127.0.0.1:1/x"
CASES = [
    (["--postgres", DSN, "--postgres-schema", "MyApp"], SCHEMA + "'MyApp'"),
    (["--postgres", DSN, "--postgres-schema", 'a"b'], SCHEMA + "'a\"b'"),
    (["--postgres", "host=x password=hunter2 = = y"], CONNINFO),
]


@pytest.mark.parametrize(("options", "message"), CASES)
def test_serve(tmp_path: Path, process_state: None, options: list[str], message: str) -> None:
    args = ["serve", "--data-dir", str(tmp_path / "d"), "--template", TEMPLATE, "--port", "0"]
    result = CliRunner().invoke(main, [*args, "--node-id", "n1", *options])
    _usage_error(result, message)
    assert "hunter2" not in result.output


@pytest.mark.parametrize(("options", "message"), CASES)
@pytest.mark.parametrize(
    "command", [["keys", "list"], ["keys", "create", "--tenant", "acme"], ["keys", "revoke", "k"]]
)
def test_keys(tmp_path: Path, command: list[str], options: list[str], message: str) -> None:
    result = CliRunner().invoke(main, [*command, "--data-dir", str(tmp_path), *options])
    _usage_error(result, message)
    assert "hunter2" not in result.output  # the connection string is never quoted
