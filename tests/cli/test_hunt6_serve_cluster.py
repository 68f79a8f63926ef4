"""Hunt 6: ``sessionvisor serve --postgres`` refuses a node id or a TTL no cluster node
can use as a usage error naming the option (exit 2), before any startup work: nothing
is imported from the templates, the data directory is not created, nothing listens.
The rules are ``NodeConfig``'s, so the command and the library agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli import main

# A template that cannot be imported: reaching the templates would fail with exit 1.
NOT_IMPORTED = "chat=tests.cli.no_such_module_hunt6:echo"


def _serve(data_dir: Path, *extra: str) -> Result:
    args = [
        "serve", "--data-dir", str(data_dir), "--template", NOT_IMPORTED, "--port", "0",
        "--postgres", "postgresql://127.0.0.1:1/nowhere", *extra,
    ]  # fmt: skip
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    ("extra", "option", "message"),
    [
        (["--node-id", "node 1"], "--node-id", "node_id must be 1 to 255 printable ASCII"),
        (["--node-id", "n\u00e9"], "--node-id", "node_id must be 1 to 255 printable ASCII"),
        (["--node-id", "x" * 256], "--node-id", "node_id must be 1 to 255 printable ASCII"),
        (["--node-id", ""], "--node-id", "node_id must be a non-empty str"),
        (["--node-id", "n", "--ttl", "86401"], "--ttl", "86400"),
        (["--node-id", "n", "--ttl", "1e9"], "--ttl", "86400"),
        (["--node-id", "n", "--ttl", "nan"], "--ttl", "ttl must be a positive number"),
        (["--node-id", "n", "--ttl", "inf"], "--ttl", "86400"),
        (["--node-id", "n", "--ttl", "0.05"], "--ttl", "0.1"),
    ],
)
def test_a_node_id_or_ttl_no_node_can_use_is_a_usage_error_naming_the_option(
    tmp_path: Path, extra: list[str], option: str, message: str
) -> None:
    data_dir = tmp_path / "data"
    result = _serve(data_dir, *extra)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert f"Invalid value for '{option}'" in result.stderr
    assert message in result.stderr
    assert "no_such_module_hunt6" not in result.stderr  # the templates were never loaded
    assert not data_dir.exists()  # nor the data directory made
