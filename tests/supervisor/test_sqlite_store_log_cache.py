"""The SQLite store's in-memory message-log cache never changes what is stored.

A store instance remembers the message log it last wrote per session, so a
save encodes the history but walks and hashes only the new messages. These
tests attack that shortcut: messages edited in place after a save (also edits
that ``==`` cannot see, such as ``1`` -> ``True``), bad keys slipped into the
already-saved part, other instances writing the same session, failed saves,
deletes, and a tiny cache budget; each on a plaintext and on an encrypted
store. The yardstick is always the bytes: a loaded checkpoint must
``serialize()`` to exactly what the snapshot serialized to when it was saved.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors import SCHEMA_VERSION, Snapshot, SnapshotEncodeError
from actors._ids import new_checkpoint_id
from supervisor import EncryptionKeys, SQLiteCheckpointStore
from supervisor import sqlite_store as sqlite_store_module


def _snap(messages: list[Any], session_id: str = "s") -> Snapshot:
    """A snapshot whose state shares the message dicts (a new list, the same dicts)."""
    state = {"messages": list(messages), "usage": {"input_tokens": 1, "output_tokens": 2}}
    return Snapshot(
        schema_version=SCHEMA_VERSION, checkpoint_id=new_checkpoint_id(), session_id=session_id,
        saved_at=datetime.now(UTC), state=state,
    )  # fmt: skip


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}", "n": i}


@pytest.fixture(
    params=[None, EncryptionKeys({"cache": bytes(range(32))})], ids=["plain", "encrypted"]
)
def encryption(request: pytest.FixtureRequest) -> EncryptionKeys | None:
    """Every test runs on a plaintext and on an encrypted store."""
    keys: EncryptionKeys | None = request.param
    return keys


@pytest.fixture
def store(tmp_path: Path, encryption: EncryptionKeys | None) -> Iterator[SQLiteCheckpointStore]:
    with SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=encryption) as opened:
        yield opened


class Ledger:
    """The bytes of every snapshot at the moment it was saved."""

    def __init__(self) -> None:
        self.saved: dict[str, bytes] = {}

    def save(self, store: SQLiteCheckpointStore, snap: Snapshot) -> None:
        data = snap.serialize()  # before save: the snapshot may be edited afterwards
        store.save(snap)
        self.saved[snap.checkpoint_id] = data

    def check(self, store: SQLiteCheckpointStore, session_id: str = "s") -> None:
        for info in store.list(session_id):
            loaded = store.load(session_id, info.checkpoint_id).serialize()
            assert loaded == self.saved[info.checkpoint_id], info.checkpoint_id


def test_edits_in_place_to_saved_messages_are_stored_exactly(
    store: SQLiteCheckpointStore,
) -> None:
    ledger = Ledger()
    messages = [_msg(i) for i in range(5)]
    ledger.save(store, _snap(messages))
    # edits that == does not notice, then plain ones, each followed by a save that appends
    edits: list[tuple[str, object]] = [("n", True), ("n", 1.0), ("content", "changed"), ("n", -0.0)]
    for step, (key, value) in enumerate(edits):
        messages[1][key] = value
        messages.append(_msg(100 + step))
        ledger.save(store, _snap(messages))
        ledger.check(store)
    assert store.load("s").state["messages"][1] == {"role": "user", "content": "changed", "n": -0.0}


def test_a_bad_key_in_the_saved_part_or_the_new_part_is_refused_with_its_path(
    store: SQLiteCheckpointStore,
) -> None:
    messages = [_msg(i) for i in range(4)]
    store.save(_snap(messages))
    before = store.list("s")
    messages[2][b"raw"] = 1  # type: ignore[index]  # already saved, edited in place
    messages.append(_msg(4))
    with pytest.raises(SnapshotEncodeError) as info:
        store.save(_snap(messages))
    assert info.value.path == "state.messages[2][b'raw']"
    del messages[2][b"raw"]  # type: ignore[arg-type]
    messages.append({"role": "user", "meta": {7: "x"}})
    with pytest.raises(SnapshotEncodeError) as info:
        store.save(_snap(messages))
    assert info.value.path == "state.messages[5].meta[7]"
    assert store.list("s") == before  # nothing stored by the refused saves


def test_two_instances_writing_one_session_load_exactly(
    tmp_path: Path, encryption: EncryptionKeys | None
) -> None:
    ledger = Ledger()
    messages = [_msg(0)]
    with (
        SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=encryption) as first,
        SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=encryption) as second,
    ):
        for i in range(1, 12):
            messages.append(_msg(i))
            if i % 4 == 0:
                messages[0]["content"] = f"edited at {i}"  # behind both caches' backs
            ledger.save(first if i % 3 else second, _snap(messages))
        ledger.check(first)
        ledger.check(second)


def test_a_failed_save_leaves_no_trace_and_the_next_save_is_exact(
    store: SQLiteCheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger()
    messages = [_msg(0), _msg(1)]
    ledger.save(store, _snap(messages))

    def fail(*args: object) -> int:
        raise OSError("disk on fire")

    monkeypatch.setattr(store, "keep_last", 1)  # one checkpoint so far: this save prunes
    monkeypatch.setattr(store, "_prune", fail)
    messages.append(_msg(2))
    with pytest.raises(OSError, match="disk on fire"):
        store.save(_snap(messages))  # rolled back after the log was appended
    monkeypatch.undo()
    messages.append(_msg(3))
    ledger.save(store, _snap(messages))
    ledger.check(store)
    assert len(store.list("s")) == 2


def test_delete_all_then_save_again(store: SQLiteCheckpointStore) -> None:
    ledger = Ledger()
    messages = [_msg(i) for i in range(3)]
    ledger.save(store, _snap(messages))
    store.delete("s")
    messages.append(_msg(3))
    ledger.save(store, _snap(messages))
    ledger.check(store)


def test_a_tiny_cache_budget_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encryption: EncryptionKeys | None
) -> None:
    monkeypatch.setattr(sqlite_store_module, "_LOG_CACHE_BYTES", 200)
    ledger = Ledger()
    histories: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    with SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=encryption) as store:
        for i in range(12):
            sid = "ab"[i % 2]
            histories[sid].append(_msg(i))
            ledger.save(store, _snap(histories[sid], session_id=sid))
        for sid in histories:
            ledger.check(store, sid)


def test_random_histories_across_two_instances_load_exactly(
    tmp_path: Path, encryption: EncryptionKeys | None
) -> None:
    """A seeded model run: append, edit in place, retype, truncate, resume, delete, prune."""
    rng = random.Random(4)
    ledger = Ledger()
    messages: list[dict[str, Any]] = [_msg(0)]
    with (
        SQLiteCheckpointStore(tmp_path / "c.db", keep_last=None, encryption=encryption) as first,
        SQLiteCheckpointStore(tmp_path / "c.db", keep_last=8, encryption=encryption) as second,
    ):
        for step in range(250):
            action = rng.randrange(10)
            if action < 5 or len(messages) < 3:
                messages.extend(_msg(step) for _ in range(rng.randint(0, 3)))
            elif action == 5:
                rng.choice(messages)["n"] = rng.choice([0, 1, True, False, 1.0, None, "1"])
            elif action == 6:
                rng.choice(messages)["content"] = f"rewritten {step}"
            elif action == 7:
                del messages[rng.randrange(1, len(messages)) :]
            elif action == 8:
                messages = [dict(m) for m in messages]  # fresh dicts, same content
            elif rng.random() < 0.3:
                first.delete("s")
            else:
                first.prune("s", keep_last=3)
            ledger.save(rng.choice([first, second]), _snap(messages))
            if step % 25 == 0:
                ledger.check(first)
        ledger.check(first)
        ledger.check(second)


def test_keep_last_holds_after_every_save_while_another_instance_adds_checkpoints(
    tmp_path: Path, encryption: EncryptionKeys | None
) -> None:
    """A save prunes only when the session reaches ``keep_last``: counted in the database,
    so checkpoints another instance added (or a re-save of the same id) are counted too."""
    path = tmp_path / "c.db"
    messages = [_msg(0)]
    saved: list[str] = []
    with (
        SQLiteCheckpointStore(path, keep_last=3, encryption=encryption) as pruning,
        SQLiteCheckpointStore(path, keep_last=None, encryption=encryption) as keeping,
    ):
        for i in range(1, 10):
            messages.append(_msg(i))
            snapshot = _snap(messages)
            (keeping if i in (4, 5) else pruning).save(snapshot)
            saved.append(snapshot.checkpoint_id)
            if i == 6:
                pruning.save(snapshot)  # the same id again: replaced, not added
            listed = [info.checkpoint_id for info in pruning.list("s")]
            expected = saved[::-1] if i in (4, 5) else saved[::-1][:3]
            assert listed == expected, f"after save {i}"
            if i not in (4, 5):
                saved = saved[-3:]


def test_the_logs_of_thousands_of_busy_sessions_stay_known(tmp_path: Path) -> None:
    """A host with thousands of sessions in flight saves each one's next turn by extending
    the log it remembers: remembered for the 1,024 latest only, two thirds of a burst of
    3,000 read their log's row and hashed it again, one save at a time."""
    sids = [f"s{i}" for i in range(3000)]
    with SQLiteCheckpointStore(tmp_path / "c.db", synchronous="NORMAL") as store:
        for sid in sids:
            store.save(_snap([_msg(0)], session_id=sid))
        assert all(store._logs.get(sid) is not None for sid in sids)
