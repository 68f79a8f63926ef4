"""A data directory keeps its API-key fingerprint key (issue 16): a host restarted on the
directory finds sessions by the API key they were started with, in every mode."""

from __future__ import annotations

import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any

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


def test_a_crash_while_creating_the_key_leaves_no_empty_key_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host killed while it writes a new key must not leave a file every later host
    refuses (an empty ``fingerprint.key``): the key appears whole or not at all."""

    def crash(size: int) -> bytes:
        raise KeyboardInterrupt("killed while creating the key")

    with monkeypatch.context() as patch:
        patch.setattr(secrets, "token_bytes", crash)
        with pytest.raises(KeyboardInterrupt):
            fingerprint_secret(tmp_path)
    assert not (tmp_path / SECRET_FILE).exists()
    key = fingerprint_secret(tmp_path)
    assert len(key) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == [SECRET_FILE]  # nothing left over


def test_two_creators_at_once_agree_on_one_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first creator is still writing its key when a second one asks: the second
    gets a whole key (not "holds 0 bytes"), and both end with the same one."""
    real_write = os.write
    second_done = threading.Event()
    first = threading.current_thread()

    def slow_write(fd: int, data: bytes) -> int:
        if threading.current_thread() is first:
            assert second_done.wait(10), "the second creator waited for the first"
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", slow_write)
    found: list[bytes | BaseException] = []

    def second() -> None:
        try:
            found.append(fingerprint_secret(tmp_path))
        except BaseException as exc:  # reported by the asserts below
            found.append(exc)
        finally:
            second_done.set()

    racer = threading.Thread(target=second)
    real_open = os.open
    started = threading.Event()

    def open_then_race(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if threading.current_thread() is first and not started.is_set():
            started.set()
            racer.start()  # the first has its file open, nothing written yet
        return fd

    monkeypatch.setattr(os, "open", open_then_race)
    key = fingerprint_secret(tmp_path)
    racer.join(10)
    assert found == [key]
    assert (tmp_path / SECRET_FILE).read_bytes() == key
