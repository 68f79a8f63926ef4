"""``keys list`` and ``keys revoke`` of a cluster (``--postgres``) only read too: the keys
are in the database and these commands need no fingerprint secret, so they neither make
``gateway.secret`` in ``--data-dir`` nor need one there (a node's directory before its
secret is copied in)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from cli import main


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_list_and_revoke_of_a_cluster_leave_the_data_dir_unchanged(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    cluster = ["--postgres", pg_dsn, "--postgres-schema", pg_schema]
    first = tmp_path / "first"
    made = run("keys", "create", "--tenant", "acme", "--json", "--data-dir", str(first), *cluster)
    assert made.exit_code == 0, made.output
    key_id = json.loads(made.stdout)["key_id"]
    node = tmp_path / "node"
    node.mkdir()
    (node / "notes.txt").write_text("a node's directory, its secret not copied in yet")
    before = contents(node)

    listed = run("keys", "list", "--json", "--data-dir", str(node), *cluster)
    assert listed.exit_code == 0, listed.output
    assert [k["key_id"] for k in json.loads(listed.stdout)] == [key_id]
    table = run("keys", "list", "--data-dir", str(node), *cluster)
    assert table.exit_code == 0, table.output
    revoked = run("keys", "revoke", key_id, "--json", "--data-dir", str(node), *cluster)
    assert revoked.exit_code == 0, revoked.output
    assert json.loads(revoked.stdout)["revoked_at"] is not None
    missing = run("keys", "revoke", "key_nope", "--data-dir", str(node), *cluster)
    assert missing.exit_code == 1
    assert "no API key with id 'key_nope'" in missing.stderr

    assert contents(node) == before
