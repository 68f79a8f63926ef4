"""``PostgresCheckpointStore``: very large snapshots and message logs.

PostgreSQL takes no protocol message, and builds no value or result row, of 1 GiB or
more (``MaxAllocSize``): a save whose rows would be that large cannot be sent, and a
checkpoint that large could not be loaded back. Such a save used to go to the server,
which closed the connection ("invalid message length"); the store took that for a
broken connection, tried again on a fresh one, and raised ``StoreUnreachable`` telling
the user to check that the server runs, for a save that could never be stored. It must
be refused up front as ``SnapshotTooLarge``, nothing stored, the store and the session
still usable.

A save of a session whose log this instance does not remember (a log longer than the
log cache holds, a session evicted from it, a process restarted) used to send the whole
log first, as a new log, have the server refuse it as not the log expected, and only
then read the log's row and send the new messages: every save of a long conversation
sent all of it. It must read the row first and send only the new messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from actors import Message, Snapshot
from supervisor import PostgresCheckpointStore, SnapshotTooLarge
from supervisor._pg_writes import SaveWriter
from tests.actors.snapshot_helpers import session_state

_APPEND = 18
"""The position of the appended message bytes among the save function's parameters."""


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresCheckpointStore]:
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as opened:
        yield opened


def _grown(state: dict[str, Any], text: str) -> dict[str, Any]:
    return {**state, "messages": [*state["messages"], Message.user(text).to_dict()]}


def test_a_snapshot_past_what_postgresql_takes_is_snapshot_too_large(
    store: PostgresCheckpointStore,
) -> None:
    small = Snapshot.new(session_id="s", state=session_state(1, session_id="s"))
    store.save(small)
    huge = Snapshot.new(session_id="s", state=_grown(small.state, "x" * (2**30 + 2**20)))
    with pytest.raises(SnapshotTooLarge, match="PostgreSQL") as caught:
        store.save(huge)
    assert caught.value.session_id == "s"
    assert caught.value.size > 2**30
    assert "max_snapshot_bytes" not in str(caught.value)
    del huge
    assert [info.checkpoint_id for info in store.list("s")] == [small.checkpoint_id]
    later = Snapshot.new(session_id="s", state=_grown(small.state, "fine"))
    store.save(later)
    assert store.load("s") == later


def test_a_save_without_the_log_cached_sends_only_the_new_messages(
    store: PostgresCheckpointStore, pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _grown(session_state(1, session_id="s"), "x" * 2_000_000)
    store.save(Snapshot.new(session_id="s", state=state))
    sent: list[int] = []
    call = SaveWriter._call

    def spying(self: SaveWriter, conn: Any, params: tuple[Any, ...]) -> tuple[int, int, int]:
        append = params[_APPEND]
        sent.append(0 if append is None else len(append))
        return call(self, conn, params)

    monkeypatch.setattr(SaveWriter, "_call", spying)
    # Another instance (a restarted process): it has not written this log.
    with PostgresCheckpointStore(pg_dsn, schema=pg_schema, keep_last=None) as other:
        later = Snapshot.new(session_id="s", state=_grown(state, "a short answer"))
        other.save(later)
        assert sum(sent) < 1_000, sent
        assert other.load("s") == later
    # Evicted from the cache: the same.
    store._logs.clear()
    sent.clear()
    last = Snapshot.new(session_id="s", state=_grown(later.state, "and one more"))
    store.save(last)
    assert sum(sent) < 1_000, sent
    assert store.load("s") == last
    # A new session's first save still sends its messages, in one call.
    sent.clear()
    first = Snapshot.new(session_id="n", state=_grown(session_state(1, session_id="n"), "y" * 5000))
    store.save(first)
    assert len(sent) == 1
    assert sent[0] > 5000
    assert store.load("n") == first
