"""A checkpoint costs the turn, not the history (issue 14).

A 20,000-turn session checkpointed after every turn into SQLite: its last
1,000 turns do the same work as its first 1,000 (messages converted and bytes
encoded per turn, counted exactly) and take about as long (medians of the
thread's CPU time, with a generous factor: this machine is shared), and a
large plugin value that never changes is stored once. The database lives in
memory-backed ``/dev/shm`` where there is one: the disk's fsyncs are not what
is measured.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import msgpack
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    EventBuffer,
    Message,
    Plugin,
    PluginContext,
    Snapshot,
    _codec,
)
from supervisor import SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints

TURNS = 20_000
WINDOW = 1_000


BOOK = bytes(range(256)) * 1024  # 256 KiB that never change


class Library(Plugin):
    """Holds one large value that never changes: stored once, however many checkpoints."""

    name = "library"

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["book"] = BOOK


class _Counts:
    """Calls to ``Message.to_dict`` and bytes msgpack produced, since the last ``take``."""

    def __init__(self) -> None:
        self.to_dict = 0
        self.packed = 0

    def take(self) -> tuple[int, int]:
        taken = (self.to_dict, self.packed)
        self.to_dict = self.packed = 0
        return taken


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in ``/dev/shm`` (removed afterwards), or ``tmp_path`` without one."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir="/dev/shm") as name:
        yield Path(name)


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> _Counts:
    seen = _Counts()
    to_dict: Callable[[Message], dict[str, Any]] = Message.to_dict
    packb: Callable[..., bytes] = msgpack.packb
    codec_packb: Callable[[object], bytes] = _codec._packb

    def counted_to_dict(message: Message) -> dict[str, Any]:
        seen.to_dict += 1
        return to_dict(message)

    def counted_packb(*args: Any, **kwargs: Any) -> bytes:
        packed = packb(*args, **kwargs)
        seen.packed += len(packed)
        return packed

    def counted_codec_packb(value: object) -> bytes:
        packed = codec_packb(value)
        seen.packed += len(packed)
        return packed

    monkeypatch.setattr(Message, "to_dict", counted_to_dict)
    monkeypatch.setattr(msgpack, "packb", counted_packb)
    # the snapshot codec's own encodings, through its reused packers
    monkeypatch.setattr(_codec, "_packb", counted_codec_packb)
    return seen


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_last_turns_of_a_long_session_cost_what_the_first_did(
    fast_dir: Path, counts: _Counts
) -> None:
    db = fast_dir / "long.db"
    store = SQLiteCheckpointStore(db, synchronous="NORMAL", keep_last=10)
    events = EventBuffer(16)
    saver = Checkpoints(store).saver(events)
    first_message: list[dict[str, Any]] = []  # the session's dict of its first message
    references: list[int] = []  # to it, while each checkpoint was alive

    def checkpointer(snapshot: Snapshot) -> Snapshot:
        saved = saver(snapshot)
        if first_message:
            references.append(sys.getrefcount(first_message[0]))
        return saved

    session = AgentSession(
        AgentTemplate(model=EchoModel(), plugins=[Library()]),
        session_id="long",
        event_buffer=events,
        checkpointer=checkpointer,
    )
    session.on_start()  # the session runs on this thread, not as an actor: no counting noise
    seconds: list[float] = []
    work: list[tuple[int, int]] = []
    with store:
        session.send("question -1")
        first_message.append(session.snapshot().state["messages"][0])
        counts.take()
        for turn in range(TURNS):
            start = time.thread_time()  # this thread's CPU: other processes' load is not counted
            session.send(f"question {turn}")
            seconds.append(time.thread_time() - start)
            work.append(counts.take())
        latest = store.load("long")
        assert len(latest.messages()) == 2 * (TURNS + 1)
        assert latest.state["plugins"]["library"]["book"] == BOOK
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM state_parts").fetchone()[0] == 1
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert page_size * pages < 3 * 1024 * 1024  # the book once (each turn: 5 MiB in all)
    first, last = slice(0, WINDOW), slice(TURNS - WINDOW, TURNS)
    assert {calls for calls, _ in work[first]} == {calls for calls, _ in work[last]} == {2}
    first_bytes = statistics.median(packed for _, packed in work[first])
    last_bytes = statistics.median(packed for _, packed in work[last])
    assert last_bytes < 1.2 * first_bytes  # counters grow a digit or two; the history does not
    # No checkpoint made a list of the history (a session's snapshot makes one only if its
    # state is read): one held a reference to each message, and making and freeing it
    # made the last turns here 1.8x the first at 40,000 messages.
    assert set(references) == {sys.getrefcount(first_message[0])}
    first_time = statistics.median(seconds[first])
    last_time = statistics.median(seconds[last])
    assert last_time < 4 * first_time, (first_time, last_time)
    # The mean counts the turns whose save merges log chunks too (one in eight; what they
    # rewrite is bounded exactly in test_log_chunks): here 0.9-2.0x, against 2.1-2.6x when
    # the whole log was rewritten every 32 turns.
    first_mean = statistics.mean(seconds[first])
    last_mean = statistics.mean(seconds[last])
    assert last_mean < 4 * first_mean, (first_mean, last_mean)
