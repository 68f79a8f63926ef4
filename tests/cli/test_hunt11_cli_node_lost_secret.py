"""Hunt 11: ``sessionvisor serve --postgres`` on a node whose ``--data-dir`` lacks the
cluster's ``gateway.secret`` while the cluster's database holds API keys stops with one
``error:`` line (exit 1) saying to copy the file in; it made a new secret, under which
every key of the cluster answered 401 on that node."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from cli import main
from tests.cli.test_serve_cmd import TEMPLATE, error_line, process_state

__all__ = ["process_state"]  # the fixture, used by name


def test_a_node_without_the_clusters_secret_does_not_start(
    tmp_path: Path, pg_dsn: str, pg_schema: str, process_state: None
) -> None:
    first, node = tmp_path / "first", tmp_path / "node"
    made = CliRunner().invoke(
        main,
        ["keys", "create", "--tenant", "acme", "--data-dir", str(first),
         "--postgres", pg_dsn, "--postgres-schema", pg_schema],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    node.mkdir()

    result = CliRunner().invoke(
        main,
        ["serve", "--data-dir", str(node), "--template", TEMPLATE, "--port", "0",
         "--postgres", pg_dsn, "--postgres-schema", pg_schema, "--node-id", "n1"],
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    secret = node / "gateway.secret"
    assert error_line(result) == (
        f"error: {secret} is missing, but the cluster's database (schema {pg_schema!r}) holds "
        f"API keys made under it: copy gateway.secret from another node of the cluster into "
        f"{node} (mode 0600; the same file on every node)"
    )
    assert list(node.iterdir()) == []  # no new secret made
