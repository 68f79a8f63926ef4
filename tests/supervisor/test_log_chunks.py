"""A session's message log in SQLite merges its chunks as a base-8 counter carries
(``supervisor._log_chunks``): the rows of a log stay few, a save rewrites a few earlier
chunks at most on average, and every checkpoint, old ones included, loads exactly."""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from actors import AgentSession, AgentTemplate, EchoModel, EventBuffer, SnapshotDecodeError
from supervisor import EncryptionKeys, SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints
from supervisor._log_chunks import FANOUT, merges

KEYS = EncryptionKeys({"k1": bytes(range(32))})


def _digit_sum(number: int) -> int:
    total = 0
    while number:
        number, digit = divmod(number, FANOUT)
        total += digit
    return total


class _Session:
    """A session driven on this thread, checkpointed into ``store`` after every turn; it
    remembers each checkpoint's id and the SHA-256 of its ``serialize()``."""

    def __init__(self, store: SQLiteCheckpointStore, sid: str = "long") -> None:
        events = EventBuffer(16)
        self.sid = sid
        self.saved: dict[str, bytes] = {}
        saver = Checkpoints(store).saver(events)

        def checkpoint(snapshot: object) -> None:
            done = saver(snapshot)  # type: ignore[arg-type]
            self.saved[done.checkpoint_id] = hashlib.sha256(done.serialize()).digest()

        self.session = AgentSession(
            AgentTemplate(model=EchoModel()), session_id=sid, event_buffer=events,
            checkpointer=checkpoint,
        )  # fmt: skip
        self.session.on_start()

    def turns(self, count: int) -> None:
        for _ in range(count):
            self.session.send(f"question {len(self.saved)} " + "x" * 40)

    def assert_every_checkpoint_loads(self, store: SQLiteCheckpointStore) -> None:
        for cid, expected in self.saved.items():
            loaded = store.load(self.sid, cid)
            assert hashlib.sha256(loaded.serialize()).digest() == expected, cid


def _chunks(db: Path, sid: str = "long") -> list[tuple[int, int]]:
    """(start, stored length) of each chunk of the session's current log, in order."""
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT start, length(data) FROM message_chunks WHERE session_id = ? AND gen ="
            " (SELECT gen FROM message_logs WHERE session_id = ?) ORDER BY start",
            (sid, sid),
        ).fetchall()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


def test_an_append_merges_the_chunks_its_counter_carries_over() -> None:
    assert [merges(k) for k in range(1, FANOUT)] == [0] * (FANOUT - 1)
    assert merges(FANOUT) == merges(3 * FANOUT) == FANOUT - 1
    assert merges(FANOUT**2) == merges(5 * FANOUT**2) == 2 * (FANOUT - 1)
    assert merges(FANOUT**3) == 3 * (FANOUT - 1)


def test_a_long_log_keeps_few_chunks_rewrites_little_and_loads_every_checkpoint(
    db: Path,
) -> None:
    appends = FANOUT**3 + 9  # past a carry over three digits: everything merged once
    written = 0  # bytes written to chunks, merges included
    with SQLiteCheckpointStore(db, synchronous="NORMAL", keep_last=None) as store:
        session = _Session(store)
        for _ in range(appends):
            session.turns(1)
            written += _chunks(db)[-1][1]  # the chunk holding the turn's bytes
        chunks = _chunks(db)
        assert len(chunks) == _digit_sum(appends)  # 1 + 1 + 1: 8 ** 3 + 8 + 1
        length = sum(size for _, size in chunks)
        # Each byte is written when appended and once per digit carried over it (3 here).
        # Rewriting the whole log every 32 appends, as before, wrote it 8 times over.
        assert written <= 4 * length
        session.assert_every_checkpoint_loads(store)
    with SQLiteCheckpointStore(db) as reopened:
        session.assert_every_checkpoint_loads(reopened)


def test_an_encrypted_log_merges_its_chunks_too(db: Path) -> None:
    with SQLiteCheckpointStore(db, encryption=KEYS, keep_last=None) as store:
        session = _Session(store)
        session.turns(FANOUT**2 + 3)
        assert len(_chunks(db)) == _digit_sum(FANOUT**2 + 3)
        session.assert_every_checkpoint_loads(store)
    with SQLiteCheckpointStore(db, encryption=KEYS) as reopened:
        session.assert_every_checkpoint_loads(reopened)


def test_a_log_whose_count_does_not_match_its_chunks_merges_on_and_loads(db: Path) -> None:
    """A store written before counted chunks in ``message_logs.chunks``: whatever the count
    says, merging trailing chunks keeps every checkpoint loadable."""
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        session = _Session(store)
        session.turns(3)
        with closing(sqlite3.connect(db)) as conn:
            conn.execute("UPDATE message_logs SET chunks = ?", (FANOUT * 4 - 2,))
            conn.commit()
        session.turns(1)
        assert len(_chunks(db)) == 4  # append 31 of the count: nothing merges
        session.turns(1)  # append 32 merges 7 chunks before it, where there are only 4
        assert len(_chunks(db)) == 1
        session.turns(2 * FANOUT)
        assert len(_chunks(db)) == 1 + 2  # that one, and one per carry into the 8s since
        session.assert_every_checkpoint_loads(store)


def test_chunks_that_cannot_be_read_back_start_a_new_log_and_the_damage_stays_reported(
    db: Path,
) -> None:
    """A save whose merge meets a chunk it cannot read back writes nothing into the damaged
    log: the session's messages go to a new log, so its newest checkpoint loads whole,
    while the checkpoints that cover the damage still say so."""
    with SQLiteCheckpointStore(db, keep_last=None) as store:
        session = _Session(store)
        session.turns(FANOUT - 1)
        starts = [start for start, _ in _chunks(db)]
        covering = list(session.saved)[3:]  # the checkpoints whose messages reach the gap
        with closing(sqlite3.connect(db)) as conn:  # a gap in the log
            conn.execute("DELETE FROM message_chunks WHERE start = ?", (starts[3],))
            conn.commit()
        session.turns(1)  # the eighth append would merge seven chunks, one of them gone
        assert [start for start, _ in _chunks(db)] == [0]  # a new log, of one chunk
        newest = store.load("long")
        assert newest.messages() == session.session.history()
        for cid in list(session.saved)[:3]:  # before the gap: whole
            assert store.load("long", cid).checkpoint_id == cid
        for cid in covering:  # the log they were saved in lacks a chunk
            with pytest.raises(SnapshotDecodeError, match=f"checkpoint '{cid}' of session 'long'"):
                store.load("long", cid)
