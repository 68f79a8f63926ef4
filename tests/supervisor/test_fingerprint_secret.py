"""A data directory keeps its API-key fingerprint key (issue 16): a host restarted on the
directory finds sessions by the API key they were started with, in every mode."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from supervisor import SupervisorError
from supervisor._fingerprint_secret import SECRET_FILE, fingerprint_secret
from tests.supervisor.host_helpers import HostFactory, template

KEY = "sk-test-0123456789abcdef"


def test_a_restarted_host_finds_a_resumed_session_by_its_api_key(
    make_host: HostFactory, tmp_path: Path
) -> None:
    first = make_host(store=None, data_dir=tmp_path)
    sid = first.start_session(template(), tenant_id="acme", api_key=KEY)
    first.send(sid, "hello")
    first.shutdown()
    saved = (tmp_path / "checkpoints.db").read_bytes()
    assert KEY.encode() not in saved  # only the fingerprint is in the checkpoint

    second = make_host(store=None, data_dir=tmp_path)
    assert second.registry.list_by_api_key(KEY) == []  # nothing runs yet
    second.resume(sid, template())  # without the key
    (entry,) = second.registry.list_by_api_key(KEY)
    assert entry.session_id == sid
    assert second.registry.list_by_api_key("sk-another-key-0123456789") == []
    second.shutdown()


def test_the_key_file_is_private_and_stays(tmp_path: Path) -> None:
    key = fingerprint_secret(tmp_path)
    path = tmp_path / SECRET_FILE
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert fingerprint_secret(tmp_path) == key
    other = tmp_path / "other"
    other.mkdir()
    assert fingerprint_secret(other) != key  # each directory its own


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    fingerprint_secret(tmp_path)
    (tmp_path / SECRET_FILE).chmod(0o644)
    with pytest.raises(SupervisorError, match="chmod 600"):
        fingerprint_secret(tmp_path)


def test_a_damaged_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / SECRET_FILE
    path.write_bytes(b"short")
    path.chmod(0o600)
    with pytest.raises(SupervisorError, match="holds 5 bytes"):
        fingerprint_secret(tmp_path)
