"""Hunt 11: a cluster node's key store refuses a missing ``gateway.secret`` while the
cluster's database holds keys (made under the cluster's secret), as the SQLite key store
does beside its database: it made a new secret, and every key was unknown (401) there."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.keys import SecretUnusable


def test_a_node_without_the_secret_is_refused_once_keys_exist(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only here)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415

    first, node = tmp_path / "first", tmp_path / "node"
    node.mkdir()
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as checkpoints:
        fresh = PostgresKeyStore(checkpoints, first)  # no key yet: the secret is made
        assert (first / "gateway.secret").stat().st_mode & 0o777 == 0o600
        made = fresh.create("acme")

        with pytest.raises(SecretUnusable) as caught:
            PostgresKeyStore(checkpoints, node)
        secret = node / "gateway.secret"
        assert str(caught.value) == (
            f"{secret} is missing, but the cluster's database (schema {pg_schema!r}) holds API "
            f"keys made under it: copy gateway.secret from another node of the cluster into "
            f"{node} (mode 0600; the same file on every node)"
        )
        assert list(node.iterdir()) == []  # no new secret written

        secret.write_bytes((first / "gateway.secret").read_bytes())  # copied in, as told
        secret.chmod(0o600)
        assert PostgresKeyStore(checkpoints, node).authenticate(made.key) == made.info
