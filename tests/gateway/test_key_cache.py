"""``KeyStore.authenticate`` remembers a valid key for ``cache_seconds``: a revocation
through the same store counts at once, one by another process (another store on
the same directory, as ``sessionvisor keys revoke`` is) once the time has passed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import KeyStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_revocation_elsewhere_counts_after_cache_seconds(tmp_path: Path) -> None:
    clock = Clock()
    server = KeyStore(tmp_path, cache_seconds=1.0, clock=clock)
    other = KeyStore(tmp_path)  # the keys command beside a running server
    try:
        made = other.create("acme")
        found = server.authenticate(made.key)
        assert found is not None
        assert found.tenant_id == "acme"
        other.revoke(made.info.key_id)
        clock.now += 0.9
        assert server.authenticate(made.key) == found  # remembered
        clock.now += 0.2
        assert server.authenticate(made.key) is None  # looked up again: revoked
        clock.now += 5
        assert server.authenticate(made.key) is None  # a revoked key is never remembered
    finally:
        server.close()
        other.close()


def test_a_revocation_through_the_store_counts_at_once(tmp_path: Path) -> None:
    store = KeyStore(tmp_path, cache_seconds=60.0, clock=Clock())
    try:
        made = store.create("acme")
        kept = store.create("acme")
        assert store.authenticate(made.key) is not None
        assert store.authenticate(kept.key) is not None
        store.revoke(made.info.key_id)
        assert store.authenticate(made.key) is None
        assert store.authenticate(kept.key) is not None
        assert store.authenticate("sv_unknown") is None
        assert store.authenticate("not-a-key") is None
    finally:
        store.close()


def test_without_a_cache_every_call_reads_the_database(tmp_path: Path) -> None:
    server = KeyStore(tmp_path, cache_seconds=0, clock=Clock())
    other = KeyStore(tmp_path)
    try:
        made = other.create("acme")
        assert server.authenticate(made.key) is not None
        other.revoke(made.info.key_id)
        assert server.authenticate(made.key) is None
    finally:
        server.close()
        other.close()


def test_a_negative_cache_time_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cache_seconds must be >= 0, got -1"):
        KeyStore(tmp_path, cache_seconds=-1)
