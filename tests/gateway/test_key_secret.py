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
