"""Encryption at rest of the SQLite checkpoint store (issue 13, item 7): what reaches the
files, key rotation, the migration of a plaintext store, failing closed, and tampering.

The contract suite (``test_checkpoint_store_contract.py``) also runs against an
encrypted store, and so does the message-log cache suite.
"""

from __future__ import annotations

import base64
import logging
import random
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors import SCHEMA_VERSION, Message, Snapshot, SnapshotDecodeError, ToolCall, encode_plain
from actors._ids import new_checkpoint_id
from supervisor import (
    EncryptionKeyError,
    EncryptionKeys,
    EncryptionUnavailable,
    SQLiteCheckpointStore,
    StoreEncrypted,
    StoreNotEncrypted,
    SupervisorError,
)
from supervisor._checkpoints import Checkpoints

K1, K2, K3 = (bytes([n]) * 16 + bytes(range(16)) for n in (1, 2, 3))
KEYS = EncryptionKeys({"k1": K1})
SECRET = "CONFIDENTIAL"
"""In every piece of conversation text ``_snap`` writes, so a scan can look for it."""


def _state(turns: int, sid: str) -> dict[str, Any]:
    """A session state whose every text field (messages, tool arguments and results, model,
    instructions, plugin state) carries ``SECRET``; a longer one extends a shorter one."""
    messages = [Message.system(f"{SECRET} system prompt").to_dict()]
    for turn in range(turns):
        call = ToolCall(f"call-{turn}", "lookup", {"query": f"{SECRET} args {turn}"})
        messages += [
            Message.user(f"{SECRET} question {turn} of {sid}").to_dict(),
            Message.assistant(None, (call,)).to_dict(),
            Message.tool(call, f"{SECRET} result {turn}").to_dict(),
            Message.assistant(f"{SECRET} answer {turn}").to_dict(),
        ]
    return {
        "session_id": sid,
        "messages": messages,
        "model": f"{SECRET}-model",
        "instructions": f"{SECRET} instructions",
        "metadata": {"tenant_id": f"{SECRET}-tenant"},
        "plugins": {"notes": {"fact": f"{SECRET} plugin state"}},
        "turns": turns,
    }


def _snap(turns: int, sid: str = "s") -> Snapshot:
    return Snapshot(
        schema_version=SCHEMA_VERSION, checkpoint_id=new_checkpoint_id(), session_id=sid,
        saved_at=datetime.now(UTC), state=_state(turns, sid), label="nightly",
    )  # fmt: skip


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _files(db: Path) -> dict[str, bytes]:
    """The store's database, WAL and shared-memory files that exist, by name."""
    names = (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
    return {path.name: path.read_bytes() for path in names if path.exists()}


def _strings(data: bytes, shortest: int = 4) -> list[bytes]:
    """What ``strings`` prints: runs of at least ``shortest`` printable ASCII bytes."""
    runs, run = [], bytearray()
    for byte in data:
        if 32 <= byte < 127:
            run.append(byte)
            continue
        if len(run) >= shortest:
            runs.append(bytes(run))
        run.clear()
    if len(run) >= shortest:
        runs.append(bytes(run))
    return runs


def _leaks(db: Path, *needles: bytes) -> dict[str, list[bytes]]:
    """Per file of the store, the ``needles`` found in it (raw or in its ``strings``)."""
    found = {}
    for name, data in _files(db).items():
        text = b"\n".join(_strings(data))
        hits = [needle for needle in needles if needle in data or needle in text]
        if hits:
            found[name] = hits
    return found


def _raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # a test's edits need not survive a power cut
    return conn


def _key_ids(db: Path) -> Counter[str]:
    """How many stored bodies, chunks and log digests name each key id."""
    with closing(_raw(db)) as conn:
        values = [row[0] for row in conn.execute("SELECT body FROM checkpoints")]
        values += [row[0] for row in conn.execute("SELECT data FROM message_chunks")]
        values += [row[0] for row in conn.execute("SELECT digest FROM message_logs")]
    return Counter(value[3 : 3 + value[2]].decode() for value in values)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


# --- what reaches the files ----------------------------------------------------------------


def test_no_message_text_nor_key_reaches_the_database_wal_or_shm(db: Path) -> None:
    keys = EncryptionKeys.from_env(environ={"SESSIONVISOR_KEYS": "k1:" + _b64(K1)})
    needles = (SECRET.encode(), K1, _b64(K1).encode(), _b64(K1)[:12].encode())
    with SQLiteCheckpointStore(db, encryption=keys) as store:
        for turns in range(1, 41):  # 40 saves: log appends, compactions, WAL checkpoints
            store.save(_snap(turns))
            store.save(_snap(turns, "other"))
        assert store.load("s") == store.load("s", store.list("s")[0].checkpoint_id)
        assert set(_files(db)) == {db.name, f"{db.name}-wal", f"{db.name}-shm"}
        assert len(_files(db)[f"{db.name}-wal"]) > 0
        assert _leaks(db, *needles) == {}  # while open: the WAL holds the latest pages
    assert _leaks(db, *needles) == {}  # closed: everything is in the database file
    with SQLiteCheckpointStore(db, encryption=keys) as store:  # and it all reads back
        assert store.load("s").state == _state(40, "s")


def test_the_scan_finds_the_text_of_a_plaintext_store(db: Path) -> None:
    """The yardstick of the test above: without encryption the text is in the files."""
    with SQLiteCheckpointStore(db) as store:
        store.save(_snap(3))
        assert _leaks(db, SECRET.encode()) != {}


def test_what_stays_in_clear_is_ids_times_labels_sizes_and_offsets(db: Path) -> None:
    snap = _snap(2)
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        info = store.save(snap)
        assert store.list("s") == [info]  # list and sessions need no decryption
        assert store.sessions() == ["s"]
    with closing(_raw(db)) as conn:
        row = conn.execute(
            "SELECT session_id, checkpoint_id, saved_at_us, label, size, log_gen, log_bytes,"
            " log_count, log_digest, body_check FROM checkpoints"
        ).fetchone()
    sid, cid, saved_at_us, label, size, gen, length, count, digest, check = row
    assert (sid, cid, label, size) == ("s", snap.checkpoint_id, "nightly", info.size)
    assert saved_at_us == int(snap.saved_at.timestamp() * 1_000_000)
    assert (gen, count, digest, check) == (0, 9, None, b"\x02")  # the digest is encrypted
    assert length > 0


def test_a_save_encrypts_only_the_new_messages(db: Path) -> None:
    """Saves stay incremental: the chunk a save appends holds the new messages alone."""
    overhead = 3 + len("k1") + 12 + 16  # header, nonce, tag
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        store.save(_snap(10))
        store.save(_snap(11))
    with closing(_raw(db)) as conn:
        chunks = conn.execute("SELECT start, length(data) FROM message_chunks ORDER BY start")
        (_, first), (start, second) = chunks.fetchall()
    assert first - overhead == start  # the first chunk: ten turns' message bytes
    new_messages = _state(11, "s")["messages"][-4:]  # one turn: four messages
    assert second - overhead == sum(len(encode_plain(m)) for m in new_messages)


# --- keys ---------------------------------------------------------------------------------


def test_rotation_keeps_old_rows_readable_and_rotate_keys_retires_old_keys(db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": K1})) as store:
        old = [_snap(t) for t in (1, 2)]
        for snap in old:
            store.save(snap)
    rotated = EncryptionKeys({"k2": K2, "k1": K1})  # k2 current, k1 kept for old rows
    with SQLiteCheckpointStore(db, encryption=rotated) as store:
        new = _snap(3)
        store.save(new)
        assert [store.load("s", s.checkpoint_id) for s in (*old, new)] == [*old, new]
        assert set(_key_ids(db)) == {"k1", "k2"}
    with pytest.raises(EncryptionKeyError) as info:  # k1 is still needed
        SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k2": K2}))
    assert info.value.key_id == "k1"
    assert "missing from the key ring; add it back" in str(info.value)

    with SQLiteCheckpointStore(db, encryption=rotated) as store:
        assert store.rotate_keys() == 2  # the two checkpoints under k1
        assert _key_ids(db).keys() == {"k2"}
        assert store.rotate_keys() == 0
    assert _leaks(db, SECRET.encode(), K1, K2) == {}
    with SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k2": K2})) as store:
        assert [store.load("s", s.checkpoint_id) for s in (*old, new)] == [*old, new]


def test_rotate_keys_needs_an_encrypted_store(db: Path) -> None:
    with SQLiteCheckpointStore(db) as store, pytest.raises(SupervisorError, match="not encrypted"):
        store.rotate_keys()


def test_a_row_under_a_key_added_elsewhere_needs_that_key_and_is_no_damage(db: Path) -> None:
    served = {"k1": K1}
    reader = SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": K1}))
    fetching = SQLiteCheckpointStore(db, encryption=EncryptionKeys.from_callback(served.copy))
    writer = SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k3": K3, "k1": K1}))
    with reader, fetching, writer:
        reader.save(_snap(1))
        newer = _snap(2)
        writer.save(newer)  # under k3, which the readers' rings lack
        for store in (reader, fetching):
            with pytest.raises(EncryptionKeyError) as info:
                store.load("s")
            assert info.value.key_id == "k3"
            assert "missing from the key ring" in str(info.value)
        with pytest.raises(EncryptionKeyError):  # a key problem is not skipped as damage
            Checkpoints(reader).latest("s")
        served["k3"] = K3  # the secret manager has it now: the callback ring asks again
        assert fetching.load("s") == newer


def test_opening_with_other_bytes_under_a_recorded_id_is_refused(db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        store.save(_snap(1))
    with pytest.raises(EncryptionKeyError) as info:
        SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k1": K2}))
    assert info.value.key_id == "k1"
    assert str(info.value) == (
        f"checkpoint store {str(db)!r}: encryption key 'k1' is not the key this store recorded "
        "under that id; put the right key back under that id (a new key needs a new id)"
    )


# --- failing closed ---------------------------------------------------------------------------


def test_an_encrypted_store_will_not_open_without_keys(db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=EncryptionKeys({"k2": K2, "k1": K1})) as store:
        store.save(_snap(1))
    before = _files(db)
    with pytest.raises(StoreEncrypted) as info:
        SQLiteCheckpointStore(db)
    assert sorted(info.value.key_ids) == ["k2"]
    assert "is encrypted (keys: 'k2'); open it with encryption=EncryptionKeys" in str(info.value)
    assert _files(db)[db.name] == before[db.name]


def test_a_plaintext_store_with_rows_is_not_silently_encrypted(db: Path) -> None:
    snap = _snap(2)
    with SQLiteCheckpointStore(db) as store:
        store.save(snap)
    with pytest.raises(StoreNotEncrypted) as info:
        SQLiteCheckpointStore(db, encryption=KEYS)
    assert info.value.checkpoints == 1
    assert "encrypt it once with SQLiteCheckpointStore.encrypt_existing(path, keys)" in str(
        info.value
    )
    with SQLiteCheckpointStore(db) as store:  # nothing changed
        assert store.load("s") == snap
        assert not store.encrypted


def test_a_plaintext_writer_is_refused_once_the_store_is_encrypted(db: Path) -> None:
    with SQLiteCheckpointStore(db) as plain:  # opened while the store was empty
        with SQLiteCheckpointStore(db, encryption=KEYS) as sealed:
            assert sealed.encrypted
            with pytest.raises(StoreEncrypted):
                plain.save(_snap(1))
            assert sealed.list("s") == []


def test_a_plaintext_reader_is_told_the_store_was_encrypted_not_that_it_is_damaged(
    db: Path,
) -> None:
    with SQLiteCheckpointStore(db) as plain:
        plain.save(_snap(1))
        assert SQLiteCheckpointStore.encrypt_existing(db, KEYS) == 1  # behind its back
        with pytest.raises(StoreEncrypted, match="keys: 'k1'"):
            plain.load("s")
        with pytest.raises(StoreEncrypted):  # never skipped as a damaged checkpoint
            Checkpoints(plain).latest("s")


def test_encrypt_existing_creates_no_store_where_there_is_none(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no checkpoint store at .* to encrypt"):
        SQLiteCheckpointStore.encrypt_existing(tmp_path / "typo.db", KEYS)
    assert list(tmp_path.iterdir()) == []


def test_a_plaintext_row_in_an_encrypted_store_is_refused_until_migrated(
    tmp_path: Path, db: Path
) -> None:
    good, injected = _snap(1), _snap(2)
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        store.save(good)
    plain_db = tmp_path / "plain.db"
    with SQLiteCheckpointStore(plain_db) as plain:
        plain.save(injected)
    with closing(_raw(db)) as conn:  # copy the plaintext row and its log in
        conn.execute("ATTACH ? AS plain", (str(plain_db),))
        conn.execute("DELETE FROM message_chunks")
        conn.execute("DELETE FROM message_logs")
        conn.execute(
            "INSERT INTO checkpoints (session_id, checkpoint_id, saved_at_us, label, size, body,"
            " log_gen, log_bytes, log_count, log_digest, body_check) SELECT session_id,"
            " checkpoint_id, saved_at_us, label, size, body, log_gen, log_bytes, log_count,"
            " log_digest, body_check FROM plain.checkpoints"
        )
        conn.execute("INSERT INTO message_chunks SELECT * FROM plain.message_chunks")
        conn.execute("INSERT INTO message_logs SELECT * FROM plain.message_logs")
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        with pytest.raises(SnapshotDecodeError) as info:
            store.load("s")
        assert f"checkpoint {injected.checkpoint_id!r} of session 's'" in str(info.value)
        assert "stored in plaintext, but this store is encrypted" in str(info.value)
        assert "encrypt_existing" in str(info.value)
        with pytest.raises(SnapshotDecodeError, match="chunk at byte 0 is not encrypted"):
            store.load("s", good.checkpoint_id)  # its log was replaced by plaintext
    assert SQLiteCheckpointStore.encrypt_existing(db, KEYS) == 1
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        assert store.load("s") == injected
    assert _leaks(db, SECRET.encode()) == {}


def test_encryption_without_cryptography_says_what_to_install(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(EncryptionUnavailable) as info:
        SQLiteCheckpointStore(db, encryption=KEYS)
    assert "pip install 'sessionvisor[encryption]'" in str(info.value)
    assert isinstance(info.value, ImportError)
    monkeypatch.undo()
    with SQLiteCheckpointStore(db) as store:  # the store was not marked encrypted
        assert not store.encrypted


def test_a_ring_of_another_type_is_refused(db: Path) -> None:
    with pytest.raises(TypeError, match="encryption must be an EncryptionKeys, got dict"):
        SQLiteCheckpointStore(db, encryption={"k1": K1})  # type: ignore[arg-type]


# --- migration --------------------------------------------------------------------------------


def test_encrypt_existing_migrates_a_plaintext_store_and_scrubs_the_files(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    saved = []
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        for turns in range(1, 36):  # past a compaction of the log
            saved.append(_snap(turns))
            store.save(saved[-1])
            saved.append(_snap(turns, "b"))
            store.save(saved[-1])
        damaged = saved[-1]
    with closing(_raw(db)) as conn:  # one row damaged before the migration
        conn.execute(
            "UPDATE checkpoints SET body = CAST(body || x'00' AS BLOB) WHERE checkpoint_id = ?",
            (damaged.checkpoint_id,),
        )
    assert _leaks(db, SECRET.encode()) != {}

    with caplog.at_level(logging.WARNING, logger="supervisor.store"):
        assert SQLiteCheckpointStore.encrypt_existing(db, KEYS) == len(saved)
    assert (
        f"checkpoint {damaged.checkpoint_id!r} of session 'b' encrypted as damaged" in caplog.text
    )
    assert _leaks(db, SECRET.encode()) == {}  # nor in free pages or the WAL
    with SQLiteCheckpointStore(db, encryption=KEYS, keep_last=None) as store:
        for snap in saved[:-1]:
            assert store.load(snap.session_id, snap.checkpoint_id) == snap
        with pytest.raises(SnapshotDecodeError, match="already damaged when the store was"):
            store.load("b", damaged.checkpoint_id)  # still refused
        store.save(_snap(36))
        assert store.load("s").state == _state(36, "s")
    assert SQLiteCheckpointStore.encrypt_existing(db, KEYS) == 0  # idempotent
    with pytest.raises(StoreEncrypted):
        SQLiteCheckpointStore(db)


def test_encrypt_existing_checks_the_keys_of_an_encrypted_store(db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=KEYS) as store:
        store.save(_snap(1))
    with pytest.raises(EncryptionKeyError, match="'k1' is used by this store but missing"):
        SQLiteCheckpointStore.encrypt_existing(db, EncryptionKeys({"k2": K2}))


def test_a_schema_2_store_gains_the_encryption_tables_and_stays_plaintext(db: Path) -> None:
    snap = _snap(2)
    with SQLiteCheckpointStore(db) as store:
        store.save(snap)
    with closing(_raw(db)) as conn:
        conn.execute("DROP TABLE store_meta")
        conn.execute("DROP TABLE encryption_keys")
        conn.execute("ALTER TABLE checkpoints DROP COLUMN parts")  # schema 4's
        conn.execute("DROP TABLE state_parts")
        conn.execute("PRAGMA user_version = 2")
    with SQLiteCheckpointStore(db) as store:
        assert store.load("s") == snap
        assert not store.encrypted
    with closing(_raw(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT COUNT(*) FROM store_meta").fetchone()[0] == 0


# --- tampering --------------------------------------------------------------------------------


@pytest.fixture
def sealed(db: Path) -> Iterator[tuple[SQLiteCheckpointStore, list[Snapshot]]]:
    with SQLiteCheckpointStore(db, encryption=KEYS, keep_last=None) as store:
        snaps = [_snap(turns) for turns in (1, 2, 5)]  # the later ones extend the log
        for snap in snaps:
            store.save(snap)
        yield store, snaps


def test_bit_flips_in_encrypted_rows_never_load_as_altered_state(
    db: Path, sealed: tuple[SQLiteCheckpointStore, list[Snapshot]]
) -> None:
    """Single-bit flips over every stored body and log chunk (header, nonce, ciphertext,
    tag) and in the log columns left in clear: every load raises, naming the checkpoint."""
    store, snaps = sealed
    originals = {s.checkpoint_id: s for s in snaps}
    rng = random.Random(7)
    outcomes: Counter[str] = Counter()
    with closing(_raw(db)) as conn:

        def load_after(table: str, column: str, where: str, key: Any, value: Any) -> None:
            (original,) = conn.execute(
                f"SELECT {column} FROM {table} WHERE {where}", key
            ).fetchone()
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (value, *key))
            for cid, snap in originals.items():
                try:
                    loaded = store.load("s", cid)
                except SnapshotDecodeError as exc:
                    named = f"checkpoint {cid!r} of session 's'" in str(exc)
                    outcomes["raised" if named else "unnamed"] += 1
                else:
                    outcomes["equal" if loaded == snap else "ALTERED"] += 1
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (original, *key))

        def flips(value: bytes, count: int) -> Iterator[bytes]:
            for bit in rng.sample(range(len(value) * 8), min(count, len(value) * 8)):
                flipped = bytearray(value)
                flipped[bit // 8] ^= 1 << (bit % 8)
                yield bytes(flipped)

        bodies = conn.execute("SELECT checkpoint_id, body FROM checkpoints").fetchall()
        for cid, body in bodies:
            for bit in range(8 * 40):  # all of the header and nonce, the start of the text
                flipped = bytearray(body)
                flipped[bit // 8] ^= 1 << (bit % 8)
                load_after("checkpoints", "body", "checkpoint_id = ?", (cid,), bytes(flipped))
            for value in flips(body, 60):
                load_after("checkpoints", "body", "checkpoint_id = ?", (cid,), value)
        for start, data in conn.execute("SELECT start, data FROM message_chunks").fetchall():
            for value in flips(data, 80):
                load_after("message_chunks", "data", "start = ?", (start,), value)
        for cid, *_ in bodies:
            for column in ("log_gen", "log_bytes", "log_count"):
                for bit in range(4):
                    load_after(
                        "checkpoints", column, "checkpoint_id = ?", (cid,),
                        conn.execute(f"SELECT {column} FROM checkpoints WHERE checkpoint_id = ?",
                                     (cid,)).fetchone()[0] ^ (1 << bit),
                    )  # fmt: skip
    assert outcomes["ALTERED"] == 0
    assert outcomes["unnamed"] == 0
    assert outcomes["raised"] > 1_500  # each flip fails the checkpoints that use the value
    assert [store.load("s", cid) for cid in originals] == snaps  # all restored


def test_a_tampered_newest_checkpoint_falls_back_to_the_one_before(
    db: Path, sealed: tuple[SQLiteCheckpointStore, list[Snapshot]]
) -> None:
    store, snaps = sealed
    with closing(_raw(db)) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (snaps[2].checkpoint_id,)
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?",
            (body[:-1] + bytes([body[-1] ^ 1]), snaps[2].checkpoint_id),
        )
    with pytest.raises(SnapshotDecodeError, match="fails authentication under key 'k1'"):
        store.load("s")
    assert Checkpoints(store).latest("s") == snaps[1]


def test_a_key_id_the_store_never_recorded_is_damage(
    db: Path, sealed: tuple[SQLiteCheckpointStore, list[Snapshot]]
) -> None:
    store, snaps = sealed
    with closing(_raw(db)) as conn:
        conn.execute(
            "UPDATE checkpoints SET body = CAST(replace(body, x'6b31', x'6b39') AS BLOB)"
            " WHERE checkpoint_id = ?",
            (snaps[2].checkpoint_id,),
        )  # k1 -> k9 in the envelope's header
    with pytest.raises(SnapshotDecodeError, match="names key 'k9', which this store never"):
        store.load("s")
    assert Checkpoints(store).latest("s") == snaps[1]


def test_a_damaged_log_digest_starts_a_new_log_and_loses_nothing(
    db: Path, sealed: tuple[SQLiteCheckpointStore, list[Snapshot]]
) -> None:
    _, snaps = sealed
    with closing(_raw(db)) as conn:
        conn.execute("UPDATE message_logs SET digest = x'c101'")
    reopened = SQLiteCheckpointStore(db, encryption=KEYS, keep_last=None)  # no cached log
    with reopened:
        later = _snap(6)
        reopened.save(later)
        assert [reopened.load("s", s.checkpoint_id) for s in (*snaps, later)] == [*snaps, later]
    with closing(_raw(db)) as conn:
        assert conn.execute("SELECT gen FROM message_logs").fetchone()[0] == 1


# --- rows moved to other rows -------------------------------------------------------------


def test_values_moved_to_another_row_do_not_decrypt(tmp_path: Path, db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=KEYS, keep_last=None) as store:
        a1, a2, b1 = _snap(2, "a"), _snap(2, "a"), _snap(2, "b")
        for snap in (a1, a2, b1):
            store.save(snap)
        with closing(_raw(db)) as conn:

            def body(cid: str) -> bytes:
                return bytes(
                    conn.execute(
                        "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (cid,)
                    ).fetchone()[0]
                )

            def put(cid: str, value: bytes) -> None:
                conn.execute(
                    "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?", (value, cid)
                )

            originals = {s.checkpoint_id: body(s.checkpoint_id) for s in (a1, a2, b1)}
            put(b1.checkpoint_id, originals[a1.checkpoint_id])  # another session's body
            with pytest.raises(SnapshotDecodeError, match="moved from another row"):
                store.load("b")
            put(a2.checkpoint_id, originals[a1.checkpoint_id])  # same session, other checkpoint
            with pytest.raises(SnapshotDecodeError, match="moved from another row"):
                store.load("a", a2.checkpoint_id)
            for cid, value in originals.items():
                put(cid, value)
            conn.execute(
                "UPDATE message_chunks SET data = (SELECT data FROM message_chunks"
                " WHERE session_id = 'a') WHERE session_id = 'b'"
            )  # the log of a (same length: same-shaped conversation) as b's
            with pytest.raises(SnapshotDecodeError, match="chunk at byte 0 fails authentication"):
                store.load("b")
            assert store.load("a", a1.checkpoint_id) == a1

    other = tmp_path / "other.db"  # another store with the same key
    with SQLiteCheckpointStore(other, encryption=KEYS) as second:
        second.save(a1)
        with closing(_raw(other)) as conn:
            conn.execute("ATTACH ? AS first", (str(db),))
            conn.execute(
                "UPDATE checkpoints SET body = (SELECT body FROM first.checkpoints"
                " WHERE checkpoint_id = ?)",
                (a1.checkpoint_id,),
            )
        with pytest.raises(SnapshotDecodeError, match="moved from another row"):
            second.load("a")
