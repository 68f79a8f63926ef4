"""A store vouches for the messages a session encoded itself, and for nothing else.

The SQLite store seals a checkpoint whose messages are a session's own
encodings as ``checked``; its ``load`` then vouches for them
(``actors.snapshot.checked_messages``) and a resume takes them unchecked. These
tests pin down that the vouch is never given to messages a check could refuse,
and that whatever else reaches the store is still checked at resume.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    MigrationRegistry,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    ToolCall,
)
from actors._codec import pack_plain
from actors._history import HistoryCodec
from actors._restored import _canonical, _exact
from actors.messages import checked_message
from actors.snapshot import (
    SCHEMA_VERSION,
    checked_encoding,
    checked_messages,
    encoded_messages,
    session_snapshot,
)
from supervisor import AgentHost, SQLiteCheckpointStore
from tests.actors.message_dicts import messages

text = st.text(max_size=4)
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**64), 2**65), st.floats(allow_nan=False), text
    ),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(text, inner, max_size=2),
    max_leaves=4,
)
live = st.builds(threading.Lock)  # stripped to a marker when checkpointed
arguments = st.dictionaries(text, json_values | live, max_size=3)
calls = st.builds(ToolCall, text, text, arguments)
histories = st.lists(messages(text, calls), min_size=1, max_size=5)


def _session_checkpoint(history: list[Message]) -> Snapshot:
    """The checkpoint a session with ``history`` takes (its ``HistoryCodec`` encodings)."""
    plain, paths, encoded = HistoryCodec().snapshot_part(history)
    return session_snapshot(
        session_id="s", state={"messages": []}, messages=plain, message_paths=paths, encoded=encoded
    )


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with SQLiteCheckpointStore(tmp_path / "checked.db") as opened:
        yield opened


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(histories)
def test_vouched_messages_pass_the_check_they_skip(store: Any, history: list[Message]) -> None:
    """Whatever a session wrote and the store vouches for, the resume's check would have
    accepted as written by ``to_dict`` and built into the same messages."""
    saved = _session_checkpoint(history)
    if encoded_messages(saved) is None:  # an integer past 64 bits: nothing saved to vouch for
        with pytest.raises(SnapshotEncodeError, match="64-bit range"):
            store.save(saved)
        return
    store.save(saved)
    loaded = store.load("s")
    assert loaded.state["messages"] == saved.state["messages"]
    vouched = checked_messages(loaded)
    assert vouched is loaded.state["messages"]
    assert _exact(vouched)
    assert _canonical(vouched)
    built = [checked_message(item) for item in vouched]
    assert built == [Message.from_dict(item) for item in vouched]


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=histories)
def test_a_resumed_sessions_first_snapshot_cuts_the_stores_bytes(
    store: Any, history: list[Message], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resumed from a vouched checkpoint, the first snapshot takes its message encodings from
    the bytes the store read (no encoding again), and they are exactly each message's own
    encoding: the snapshot is byte for byte the one encoding them again gives, and the full
    walk's (stripped markers from the earlier life listed in ``stripped_fields`` too)."""
    saved = _session_checkpoint(history)
    if encoded_messages(saved) is None:  # an integer past 64 bits: never saved
        return
    store.save(saved)
    loaded = store.load("s")
    encoding = checked_encoding(loaded)
    assert encoding is not None

    def resumed(encoding: bytes | None) -> AgentSession:
        return AgentSession(
            AgentTemplate(model=EchoModel()),
            session_id="s",
            restored_state=loaded.state,
            restored_checked=True,
            restored_encoding=encoding,
        )

    session = resumed(encoding)
    with monkeypatch.context() as patch:
        patch.setattr("actors._history.pack_each", _no_encoding_again)
        first = session.snapshot()
    encoded = encoded_messages(first)
    assert encoded is not None
    assert encoded.parts[: encoded.count] == [pack_plain(m) for m in loaded.state["messages"]]
    for other in (resumed(None).snapshot(), Snapshot.new(session_id="s", state=session.state())):
        # Encoding the restored dicts again (pack_each), and the full walk, which lists the
        # markers stripped in the earlier life: the same bytes.
        same = dataclasses.replace(
            other, checkpoint_id=first.checkpoint_id, saved_at=first.saved_at
        )
        assert first.serialize() == same.serialize()
    assert session.send("more").content == "echo: more"


def _no_encoding_again(values: list[Any]) -> list[bytes] | None:
    raise AssertionError(f"encoded {len(values)} restored messages again")


def test_a_snapshot_made_outside_a_session_is_not_vouched_for(store: Any) -> None:
    history = [Message.user("hi"), Message.assistant("hello")]
    made = Snapshot.new(session_id="s", state={"messages": [m.to_dict() for m in history]})
    store.save(made)
    assert checked_messages(store.load("s")) is None
    store.save(_session_checkpoint(history))
    assert checked_messages(store.load("s")) is not None


def test_a_redacted_or_rebuilt_state_loses_the_vouch(store: Any) -> None:
    store.save(_session_checkpoint([Message.user("hi")]))
    loaded = store.load("s")
    assert checked_messages(loaded) is not None
    assert checked_messages(loaded.redact(lambda state: state)) is None
    rebuilt = dataclasses.replace(loaded, state={"messages": list(loaded.state["messages"])})
    assert checked_messages(rebuilt) is None
    assert checked_messages(loaded.with_metadata({"k": 1})) is not None


def test_a_migration_drops_the_vouch(tmp_path: Path) -> None:
    registry = MigrationRegistry(current_version=SCHEMA_VERSION + 1)

    @registry.register(SCHEMA_VERSION)
    def _rename(data: dict[str, Any]) -> dict[str, Any]:
        data["state"]["messages"][0]["content"] = "changed by a migration"
        return data

    with SQLiteCheckpointStore(tmp_path / "old.db") as store:
        store.save(_session_checkpoint([Message.user("hi")]))
    with SQLiteCheckpointStore(tmp_path / "old.db", migrations=registry) as store:
        loaded = store.load("s")
    assert loaded.state["messages"][0]["content"] == "changed by a migration"
    assert checked_messages(loaded) is None


def _body_check(path: Path) -> bytes:
    with sqlite3.connect(path) as conn:
        (check,) = conn.execute("SELECT body_check FROM checkpoints").fetchone()
    return bytes(check)


def test_claiming_the_vouch_breaks_the_seal(tmp_path: Path) -> None:
    """The claim is hashed with the row: turning a row's plain seal into a ``checked`` one
    (or back) is damage, refused as any edit is."""
    path = tmp_path / "edited.db"
    with SQLiteCheckpointStore(path) as store:
        made = [Message.user("hi")]
        store.save(Snapshot.new(session_id="s", state={"messages": [m.to_dict() for m in made]}))
    check = _body_check(path)
    assert check[:1] == b"\x01"
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE checkpoints SET body_check = ?", (b"\x02" + check[1:],))
    conn.close()
    with (
        SQLiteCheckpointStore(path) as store,
        pytest.raises(SnapshotDecodeError, match="checksum mismatch"),
    ):
        store.load("s")


def test_a_bad_message_saved_by_hand_still_fails_the_resume(tmp_path: Path) -> None:
    path = tmp_path / "hand.db"
    bad = {"role": "wizard", "content": "hi"}
    with (
        SQLiteCheckpointStore(path) as store,
        AgentHost(store=store) as host,
    ):
        store.save(Snapshot.new(session_id="s", state={"session_id": "s", "messages": [bad]}))
        with pytest.raises(SnapshotDecodeError, match="field 'role' must be one of"):
            host.resume("s", AgentTemplate(model=EchoModel()))
        assert host.list_sessions() == []


@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "worker"])
def test_a_vouched_checkpoint_resumes_to_the_same_history(
    tmp_path: Path, workers: int | None
) -> None:
    """A checkpoint a session took in thread mode is vouched for; a host resumes it (a
    worker is told so and takes the messages unchecked too) with the history written,
    and goes on. Its later checkpoints are vouched for too: a worker's bring the
    encodings its session made of its messages, as a thread-mode session's do."""
    template = AgentTemplate(model=EchoModel())
    with SQLiteCheckpointStore(tmp_path / "again.db") as store:
        with AgentHost(store=store) as writer:
            writer.start_session(template, session_id="s")
            writer.send("s", "one")
            writer.stop_session("s")
        assert checked_messages(store.load("s")) is not None
        with AgentHost(store=store, workers=workers) as host:
            host.resume("s", template)
            assert [m.content for m in host.history("s")] == ["one", "echo: one"]
            assert host.send("s", "two").content == "echo: two"
            host.stop_session("s")
            assert checked_messages(store.load("s")) is not None
            host.resume("s", template)
            texts = [m.content for m in host.history("s")]
            assert texts == ["one", "echo: one", "two", "echo: two"]
            host.stop_session("s")
