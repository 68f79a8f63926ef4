"""The gateway's key-fingerprint secret (``gateway.secret``) is refused when others may read
it, as the host refuses its ``fingerprint.key``: with it and the key database, API keys of
any tenant could be made. A key's tenant is one sessions can run under."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import KeyStore


def test_a_secret_others_may_read_is_refused_with_what_to_do(tmp_path: Path) -> None:
    KeyStore(tmp_path).close()  # creates it, 0600
    secret = tmp_path / "gateway.secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    secret.chmod(0o640)
    with pytest.raises(ValueError, match="may be read by other users \\(mode 640\\)") as caught:
        KeyStore(tmp_path)
    assert f"run 'chmod 600 {secret}'" in str(caught.value)
    secret.chmod(0o600)
    KeyStore(tmp_path).close()  # fixed as told: accepted


@pytest.mark.parametrize("tenant", ["", "   "])
def test_a_key_needs_a_tenant_sessions_can_run_under(tmp_path: Path, tenant: str) -> None:
    keys = KeyStore(tmp_path)
    try:
        with pytest.raises(ValueError, match="tenant_id must be a non-empty str"):
            keys.create(tenant)
        assert keys.list() == []
    finally:
        keys.close()


def test_a_cluster_key_store_opened_without_creating_the_secret_reads_it_when_needed(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    """``PostgresKeyStore(create_secret=False)`` makes no file: it lists and revokes keys
    without a secret, and reads the secret (not makes it) when a key is made or checked."""
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only here)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415

    first, node = tmp_path / "first", tmp_path / "node"
    node.mkdir()
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema) as checkpoints:
        made = PostgresKeyStore(checkpoints, first).create("acme")
        reader = PostgresKeyStore(checkpoints, node, create_secret=False)
        assert [k.key_id for k in reader.list()] == [made.info.key_id]
        with pytest.raises(FileNotFoundError):
            reader.authenticate(made.key)
        with pytest.raises(FileNotFoundError):
            reader.create("acme")
        assert list(node.iterdir()) == []
        secret = node / "gateway.secret"
        secret.write_bytes((first / "gateway.secret").read_bytes())  # copied in, as told
        secret.chmod(0o600)
        assert reader.authenticate(made.key) == made.info
        assert reader.revoke(made.info.key_id).revoked_at is not None
