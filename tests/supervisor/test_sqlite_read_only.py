"""``SQLiteCheckpointStore(path, read_only=True)``: reads a store beside a host that may be
serving it and changes nothing: no file made or changed (the marker file, the ``-wal``
file), no schema created or migrated, no key recorded; every writer refuses."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest

import supervisor
from actors import Snapshot, SnapshotDecodeError
from supervisor import (
    EncryptionKeyError,
    EncryptionKeys,
    SQLiteCheckpointStore,
    StoreCorrupted,
    StoreEncrypted,
    StoreReadOnly,
    StoreUnavailable,
    SupervisorError,
)

K1, K2 = b"1" * 32, b"2" * 32


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def snap(sid: str = "s1", turns: int = 1) -> Snapshot:
    return Snapshot.new(session_id=sid, state={"messages": [{"x": turns}], "turns": turns})


def written(db: Path, *snapshots: Snapshot, keys: EncryptionKeys | None = None) -> None:
    with SQLiteCheckpointStore(db, keep_last=None, encryption=keys) as store:
        for one in snapshots or (snap(),):
            store.save(one)


def sql(db: Path, query: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(query).fetchall()


def test_reads_as_the_store_does_and_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    first, second, other = snap("s1", 1), snap("s1", 2), snap("s2", 1)
    written(db, first, second, other)
    before = contents(tmp_path)
    with SQLiteCheckpointStore(db, read_only=True) as store:
        assert store.read_only
        assert store.sessions() == ["s1", "s2"]
        assert [i.checkpoint_id for i in store.list("s1")] == [
            second.checkpoint_id,
            first.checkpoint_id,
        ]
        assert store.load("s1") == second
        assert store.load("s1", first.checkpoint_id) == first
    assert contents(tmp_path) == before  # no -wal or -shm file left either


def test_a_missing_marker_file_stays_missing(tmp_path: Path) -> None:
    """A store from before marker files (or whose marker was removed): read, not marked."""
    db = tmp_path / "checkpoints.db"
    written(db)
    (tmp_path / "checkpoints.db.sessionvisor").unlink()
    before = contents(tmp_path)
    with SQLiteCheckpointStore(db, read_only=True) as store:
        assert store.sessions() == ["s1"]
    assert contents(tmp_path) == before


def test_a_wal_file_there_is_left_byte_for_byte(tmp_path: Path) -> None:
    """The files of a host killed while serving: SQLite does not checkpoint the ``-wal``
    file into the store through a read-only connection, nor remove it."""
    served, data = tmp_path / "served", tmp_path / "data"
    served.mkdir()
    data.mkdir()
    host = SQLiteCheckpointStore(served / "checkpoints.db", keep_last=None)
    try:
        for turns in range(3):
            host.save(snap("s1", turns))
        for path in served.iterdir():
            shutil.copy(path, data / path.name)
    finally:
        host.close()
    before = contents(data)
    assert before["checkpoints.db-wal"]
    with SQLiteCheckpointStore(data / "checkpoints.db", read_only=True) as store:
        assert [store.load("s1", i.checkpoint_id).state["turns"] for i in store.list("s1")] == [
            2,
            1,
            0,
        ]
    after = contents(data)
    assert after.keys() == before.keys()
    assert after["checkpoints.db"] == before["checkpoints.db"]
    assert after["checkpoints.db-wal"] == before["checkpoints.db-wal"]


def test_reads_beside_a_writing_store_see_its_saves(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    with SQLiteCheckpointStore(db, keep_last=None) as host:
        host.save(snap("s1", 1))
        with SQLiteCheckpointStore(db, read_only=True) as reader:
            assert reader.load("s1").state["turns"] == 1
            newer = snap("s1", 2)
            host.save(newer)
            assert reader.load("s1") == newer
            wal = (tmp_path / "checkpoints.db-wal").read_bytes()
        assert (tmp_path / "checkpoints.db-wal").read_bytes() == wal  # not folded on close
        host.save(snap("s1", 3))
        assert len(host.list("s1")) == 3


WRITERS: dict[str, Callable[[SQLiteCheckpointStore], object]] = {
    "save()": lambda store: store.save(snap("s1", 9)),
    "delete()": lambda store: store.delete("s1"),
    "delete() of one": lambda store: store.delete("s1", store.list("s1")[0].checkpoint_id),
    "prune()": lambda store: store.prune("s1", 1),
    "rotate_keys()": lambda store: store.rotate_keys(),
}


@pytest.mark.parametrize("method", list(WRITERS))
def test_every_writer_refuses_and_changes_nothing(tmp_path: Path, method: str) -> None:
    db = tmp_path / "checkpoints.db"
    keys = EncryptionKeys({"k1": K1})
    written(db, snap("s1", 1), snap("s1", 2), keys=keys)
    before = contents(tmp_path)
    with SQLiteCheckpointStore(db, read_only=True, encryption=keys) as store:
        with pytest.raises(StoreReadOnly) as raised:
            WRITERS[method](store)
        assert len(store.list("s1")) == 2
    name = method.split(maxsplit=1)[0]
    assert str(raised.value) == (
        f"checkpoint store {str(db)!r} was opened read_only=True: {name} writes, and nothing "
        "was changed; open another SQLiteCheckpointStore on the file without read_only=True "
        "to change it"
    )
    assert raised.value.path == str(db)
    assert contents(tmp_path) == before


def test_store_read_only_is_public() -> None:
    assert supervisor.StoreReadOnly is StoreReadOnly
    assert StoreReadOnly.__module__ == "supervisor"
    assert issubclass(StoreReadOnly, SupervisorError)
    assert "StoreReadOnly" in supervisor.__all__


def test_read_only_is_keyword_only(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    with pytest.raises(TypeError):
        SQLiteCheckpointStore(db, None, 100, "FULL", 30.0, None, None, True)  # type: ignore[call-arg]
    with SQLiteCheckpointStore(db) as store:
        assert not store.read_only


def test_a_missing_file_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    with pytest.raises(StoreUnavailable) as raised:
        SQLiteCheckpointStore(db, read_only=True)
    assert str(db) in str(raised.value)
    assert "does not exist" in str(raised.value)
    assert "read_only=True never creates one" in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_a_lost_store_is_what_a_writing_open_says(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    db.unlink()
    with pytest.raises(StoreCorrupted) as writing:
        SQLiteCheckpointStore(db)
    with pytest.raises(StoreCorrupted) as reading:
        SQLiteCheckpointStore(db, read_only=True)
    assert str(reading.value) == str(writing.value)
    assert not db.exists()


def test_a_directory_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    db.mkdir()
    with pytest.raises(StoreUnavailable, match="is a directory"):
        SQLiteCheckpointStore(db, read_only=True)


def test_an_empty_file_is_not_made_a_store(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    db.touch()
    with pytest.raises(StoreReadOnly) as raised:
        SQLiteCheckpointStore(db, read_only=True)
    assert raised.value.schema_version == 0
    assert "the file holds no store yet, and creating one would write to it" in str(raised.value)
    assert db.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoints.db"]


def test_a_truncated_store_is_corrupted_as_for_a_writing_open(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    db.write_bytes(b"")
    with pytest.raises(StoreCorrupted, match="is empty, but its marker file says"):
        SQLiteCheckpointStore(db, read_only=True)


def set_version(db: Path, version: int) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()


def test_an_older_schema_is_not_migrated(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    older = SQLiteCheckpointStore.SCHEMA_VERSION - 1
    set_version(db, older)
    before = contents(tmp_path)
    with pytest.raises(StoreReadOnly) as raised:
        SQLiteCheckpointStore(db, read_only=True)
    assert raised.value.schema_version == older
    assert (
        f"it holds schema version {older}, older than the "
        f"{SQLiteCheckpointStore.SCHEMA_VERSION} this code reads, and migrating it would write "
        "to it, and nothing was changed; open it once without read_only=True"
    ) in str(raised.value)
    assert contents(tmp_path) == before


def test_a_newer_schema_is_refused_as_a_writing_open_refuses_it(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    set_version(db, 99)
    with pytest.raises(SupervisorError, match="schema version 99, newer than the supported"):
        SQLiteCheckpointStore(db, read_only=True)


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    with pytest.raises(StoreCorrupted, match="another program's SQLite database"):
        SQLiteCheckpointStore(db, read_only=True)


# --- encryption ----------------------------------------------------------------------------


def test_an_encrypted_store_needs_keys(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db, keys=EncryptionKeys({"k1": K1}))
    with pytest.raises(StoreEncrypted) as raised:
        SQLiteCheckpointStore(db, read_only=True)
    assert raised.value.key_ids == ("k1",)


def test_a_new_current_key_decrypts_nothing_but_is_not_recorded(tmp_path: Path) -> None:
    """A ring with a new current key (a rotation being prepared): its recorded old key
    reads the rows; the new key is not recorded, so a host with the old ring still opens."""
    db = tmp_path / "checkpoints.db"
    one = snap()
    written(db, one, keys=EncryptionKeys({"k1": K1}))
    before = contents(tmp_path)
    with SQLiteCheckpointStore(
        db, read_only=True, encryption=EncryptionKeys({"k2": K2, "k1": K1})
    ) as store:
        assert store.encrypted
        assert store.load("s1") == one
    assert contents(tmp_path) == before
    assert sql(db, "SELECT key_id FROM encryption_keys") == [("k1",)]
    SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": K1})).close()


def test_a_ring_without_the_stores_keys_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db, keys=EncryptionKeys({"k1": K1}))
    with pytest.raises(EncryptionKeyError, match="'k1' is used by this store but missing"):
        SQLiteCheckpointStore(db, read_only=True, encryption=EncryptionKeys({"k2": K2}))
    with pytest.raises(EncryptionKeyError, match="is not the key this store recorded"):
        SQLiteCheckpointStore(db, read_only=True, encryption=EncryptionKeys({"k1": K2}))


def test_keys_for_a_plaintext_store_do_not_encrypt_it(tmp_path: Path) -> None:
    """An empty plaintext store opened with keys by a writer becomes encrypted; read-only
    it stays as it is (and one with checkpoints reads, without StoreNotEncrypted)."""
    empty, full = tmp_path / "empty" / "checkpoints.db", tmp_path / "full" / "checkpoints.db"
    empty.parent.mkdir()
    full.parent.mkdir()
    SQLiteCheckpointStore(empty).close()
    one = snap()
    written(full, one)
    keys = EncryptionKeys({"k1": K1})
    with SQLiteCheckpointStore(empty, read_only=True, encryption=keys) as store:
        assert not store.encrypted
        assert store.sessions() == []
    with SQLiteCheckpointStore(full, read_only=True, encryption=keys) as store:
        assert store.load("s1") == one
    assert sql(empty, "SELECT * FROM store_meta") == []
    SQLiteCheckpointStore(empty).close()  # still plaintext: opens without keys


def test_damage_is_reported_as_by_a_writing_open(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    one, two = snap("s1", 1), snap("s1", 2)
    written(db, one, two)
    with closing(sqlite3.connect(db)) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (two.checkpoint_id,)
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?",
            (body[:-1] + bytes([body[-1] ^ 1]), two.checkpoint_id),
        )
        conn.commit()
    with SQLiteCheckpointStore(db, read_only=True) as store:
        with pytest.raises(SnapshotDecodeError, match=two.checkpoint_id):
            store.load("s1")
        assert store.load("s1", one.checkpoint_id) == one


def test_threads_share_one_read_only_store(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    saved = [snap(f"s{n}", n) for n in range(8)]
    written(db, *saved)
    with (
        SQLiteCheckpointStore(db, read_only=True) as store,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        loaded = list(pool.map(lambda one: store.load(one.session_id), saved * 4))
    assert loaded == saved * 4


def test_a_closed_read_only_store_refuses_reads(tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    written(db)
    store = SQLiteCheckpointStore(db, read_only=True)
    store.close()
    store.close()
    with pytest.raises(ValueError, match="is closed"):
        store.sessions()


def test_a_path_with_uri_characters_is_the_file_itself(tmp_path: Path) -> None:
    """The file is opened by a ``file:`` URI: ``?``, ``#``, ``%`` and spaces in its path
    name the file, not URI parameters."""
    directory = tmp_path / "a b?mode=rwc#x%41"
    directory.mkdir()
    db = directory / "checkpoints.db"
    one = snap()
    written(db, one)
    with SQLiteCheckpointStore(db, read_only=True) as store:
        assert store.load("s1") == one
    assert sorted(p.name for p in directory.iterdir()) == [
        "checkpoints.db",
        "checkpoints.db.sessionvisor",
    ]
