"""Large plugin and provider states are stored once per content (issue 14).

The SQLite store takes each plugin state and the provider state of 4 KiB or
more out of the checkpoint body and keeps it once per session and content;
checkpoints with the same bytes share it, one no retained checkpoint uses is
deleted, and a damaged one fails exactly the checkpoints that use it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from actors import (
    AgentTemplate,
    EchoModel,
    Message,
    Plugin,
    PluginContext,
    Snapshot,
    SnapshotDecodeError,
)
from supervisor import AgentHost, EncryptionKeys, SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints
from supervisor._sqlite_schema import SCHEMA_VERSION
from supervisor._state_parts import PART_MIN_BYTES
from tests.actors.snapshot_helpers import session_state

BIG = 2 * 1024 * 1024


def _raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # a test's edits need not survive a power cut
    return conn


def _count(db: Path, table: str) -> int:
    with closing(_raw(db)) as conn:
        count: int = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return count


def _snap(turns: int, blob: bytes, provider: bytes = b"") -> Snapshot:
    state = session_state(turns, session_id="s")
    state["plugins"]["index"] = {"blob": blob, "version": 1}
    state["plugins"]["counter"] = {"turns": turns}  # small: stays in the body
    state["provider_state"] = {"cursor": turns, "cache": provider}
    return Snapshot.new(session_id="s", state=state)


class Counter(Plugin):
    """Changes its (small) state every turn."""

    name = "counter"

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] = ctx.state.get("turns", 0) + 1


class Index(Plugin):
    """Holds one large value that never changes."""

    name = "index"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("blob", b"\x01" * BIG)


def test_a_large_unchanged_plugin_value_is_stored_once(tmp_path: Path) -> None:
    """Parts are per plugin: the counter's change does not store the index again."""
    db = tmp_path / "c.db"
    turns = 30
    with AgentHost(store=SQLiteCheckpointStore(db), auto_hibernate=False) as host:
        sid = host.start_session(AgentTemplate(model=EchoModel(), plugins=[Index(), Counter()]))
        for turn in range(turns):
            host.send(sid, f"turn {turn}")
        assert len(host.store.list(sid)) == turns
        latest = host.store.load(sid)
        assert latest.state["plugins"]["index"]["blob"] == b"\x01" * BIG
        assert latest.state["plugins"]["counter"]["turns"] == turns
    assert _count(db, "state_parts") == 1
    with closing(_raw(db)) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert page_size * pages < 1.5 * BIG  # once; every checkpoint would be 60 MiB


def test_checkpoints_share_parts_and_unused_ones_are_deleted(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    first, second = b"a" * BIG, b"b" * BIG
    with SQLiteCheckpointStore(db, keep_last=3) as store:
        snaps = [_snap(t, first if t <= 3 else second) for t in range(1, 7)]
        for snap in snaps[:3]:
            info = store.save(snap)
            assert info.size == len(snap.serialize())
        assert _count(db, "state_parts") == 1
        for snap in snaps[3:]:
            store.save(snap)
        assert _count(db, "state_parts") == 1  # the first value's checkpoints were pruned
        assert [store.load("s", s.checkpoint_id) for s in snaps[3:]] == snaps[3:]
        assert store.delete("s") == 3
        assert _count(db, "state_parts") == 0


def test_a_part_is_kept_while_an_older_checkpoint_still_uses_it(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    first, second = b"a" * BIG, b"b" * BIG
    with SQLiteCheckpointStore(db, keep_last=3) as store:
        snaps = [_snap(1, first), _snap(2, second), _snap(3, second), _snap(4, first)]
        for snap in snaps:
            store.save(snap)
        assert _count(db, "state_parts") == 2
        assert [store.load("s", s.checkpoint_id) for s in snaps[1:]] == snaps[1:]
        store.prune("s", 1)
        assert _count(db, "state_parts") == 1
        assert store.load("s") == snaps[-1]


def test_the_provider_state_is_a_part_too_and_small_states_stay_in_the_body(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        small = _snap(1, b"x" * (PART_MIN_BYTES // 2), provider=b"y" * (PART_MIN_BYTES // 2))
        store.save(small)
        assert _count(db, "state_parts") == 0
        large = _snap(2, b"x", provider=b"p" * BIG)
        store.save(large)
        assert _count(db, "state_parts") == 1
        assert store.load("s") == large
        assert store.load("s", small.checkpoint_id) == small
        assert store.list("s")[0].size == len(large.serialize())


def _damage_part(db: Path, blob: bytes) -> None:
    with closing(_raw(db)) as conn:
        rows = conn.execute("SELECT digest, data FROM state_parts").fetchall()
        (digest, data), *_ = [(d, v) for d, v in rows if blob[:64] in v]
        middle = len(data) // 2
        damaged = data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]
        conn.execute("UPDATE state_parts SET data = ? WHERE digest = ?", (damaged, digest))


def test_a_damaged_shared_part_fails_every_checkpoint_using_it_and_resume_falls_back(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.db"
    first, second = b"a" * BIG, b"b" * BIG
    with SQLiteCheckpointStore(db) as store:
        snaps = [_snap(1, first), _snap(2, second), _snap(3, second)]
        for snap in snaps:
            store.save(snap)
        _damage_part(db, second)
        for snap in snaps[1:]:
            with pytest.raises(SnapshotDecodeError, match=r"state part plugins\.index"):
                store.load("s", snap.checkpoint_id)
        assert store.load("s", snaps[0].checkpoint_id) == snaps[0]
        assert Checkpoints(store).latest("s") == snaps[0]
        _damage_part(db, first)
        with pytest.raises(SnapshotDecodeError, match=snaps[2].checkpoint_id):
            Checkpoints(store).latest("s")


def test_a_missing_part_or_edited_reference_fails_its_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        snap = _snap(1, b"a" * BIG)
        store.save(snap)
        with closing(_raw(db)) as conn:
            (refs,) = conn.execute("SELECT parts FROM checkpoints").fetchone()
            conn.execute("UPDATE checkpoints SET parts = ?", (refs[:-1] + b"\x00",))
        with pytest.raises(SnapshotDecodeError, match="checksum mismatch"):
            store.load("s")
        with closing(_raw(db)) as conn:
            conn.execute("UPDATE checkpoints SET parts = ?", (refs,))
            conn.execute("DELETE FROM state_parts")
        with pytest.raises(SnapshotDecodeError, match=r"state part plugins\.index is missing"):
            store.load("s")


def test_a_version_3_store_migrates_and_keeps_its_checkpoints(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    old = _snap(1, b"a" * 10)
    with SQLiteCheckpointStore(db) as store:
        store.save(old)
    with closing(_raw(db)) as conn:  # what schema version 3 wrote
        conn.execute("ALTER TABLE checkpoints DROP COLUMN parts")
        conn.execute("DROP TABLE state_parts")
        conn.execute("PRAGMA user_version = 3")
    new = _snap(2, b"b" * BIG)
    with SQLiteCheckpointStore(db) as store:
        assert store.load("s") == old
        store.save(new)
        assert store.load("s") == new
        assert store.load("s", old.checkpoint_id) == old
    with closing(_raw(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert _count(db, "state_parts") == 1


KEYS = EncryptionKeys({"k1": bytes(range(32))})


def test_an_encrypted_store_keeps_large_states_inside_the_encrypted_body(tmp_path: Path) -> None:
    """A part's digest would be a SHA-256 of plaintext in clear, so none is written."""
    db = tmp_path / "c.db"
    blob = b"secret-index " * (PART_MIN_BYTES // 4)
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        saved = _snap(1, blob)
        store.save(saved)
        assert store.load("s") == saved
    assert _count(db, "state_parts") == 0
    with closing(_raw(db)) as conn:
        assert conn.execute("SELECT parts FROM checkpoints").fetchall() == [(None,)]
    assert b"secret-index" not in db.read_bytes()


def test_encrypting_a_store_puts_its_state_parts_back_into_the_bodies(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        shared, other = _snap(1, b"a" * BIG), _snap(2, b"a" * BIG)
        store.save(shared)
        store.save(other)
    assert _count(db, "state_parts") == 1
    assert SQLiteCheckpointStore.encrypt_existing(db, KEYS) == 2
    assert _count(db, "state_parts") == 0
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        assert store.load("s", shared.checkpoint_id) == shared
        assert store.load("s", other.checkpoint_id) == other


def test_encrypting_quarantines_a_checkpoint_whose_part_is_missing(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with SQLiteCheckpointStore(db) as store:
        store.save(_snap(1, b"a" * BIG))
    with closing(_raw(db)) as conn:
        conn.execute("DELETE FROM state_parts")
    SQLiteCheckpointStore.encrypt_existing(db, KEYS)
    with (
        SQLiteCheckpointStore(db, encryption=KEYS) as store,
        pytest.raises(SnapshotDecodeError, match="already damaged when the store was encrypted"),
    ):
        store.load("s")
