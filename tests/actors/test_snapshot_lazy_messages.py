"""A running session's snapshot makes its list of message dicts only when its state is read.

A checkpoint needs only the messages' encodings, so a per-turn checkpoint of a
40,000-message session must not build (and then free) a 40,000-entry list: that
made the last 1,000 turns of a 20,000-turn session cost 1.9 times the first 1,000
(``bench_long_session``). Whether a list was made is seen here the way it costs:
by the references it takes to the session's message dicts (``sys.getrefcount``).
In every other way the snapshot is a ``Snapshot``.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import AgentSession, AgentTemplate, EchoModel, Plugin, PluginContext, Snapshot
from actors.redact import SECRET_MARKER, strip_secrets
from actors.snapshot import encoded_messages
from supervisor import SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints


class Keyed(Plugin):
    """Holds what its test puts in its state (``key`` may look like a secret)."""

    def __init__(self, **values: Any) -> None:
        self.values = values

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.update(self.values)


def _session(turns: int = 3, **plugin_state: Any) -> AgentSession:
    template = AgentTemplate(model=EchoModel(), plugins=[Keyed(**plugin_state)])
    session = AgentSession(template, session_id="lazy")
    session.on_start()
    for turn in range(turns):
        session.send(f"question {turn}")
    return session


def _first_message(session: AgentSession) -> dict[str, Any]:
    """The dict every snapshot of ``session`` shares for its first message."""
    first: dict[str, Any] = session.snapshot().state["messages"][0]
    return first


def test_a_checkpoint_makes_no_message_list(tmp_path: Path) -> None:
    session = _session(turns=5)
    first = _first_message(session)
    before = sys.getrefcount(first)
    with SQLiteCheckpointStore(tmp_path / "lazy.db") as store:
        snapshot = session.snapshot()
        saved = Checkpoints(store).saver(session.event_buffer)(snapshot)
        data = saved.serialize()
        assert repr(saved).count("messages=10") == 1
        assert sys.getrefcount(first) == before  # no list holds it: none was made
        assert store.load("lazy") == Snapshot.deserialize(data)
    assert saved.state["messages"][0] is first  # made when read: the session's own dict
    assert sys.getrefcount(first) == before + 1
    assert saved.state["messages"] is saved.state["messages"]  # made once


def test_it_equals_and_hashes_as_the_snapshot_it_serializes_to() -> None:
    session = _session()
    lazy = session.snapshot("before")
    back = Snapshot.deserialize(lazy.serialize())
    assert type(back) is Snapshot
    assert back == lazy
    assert lazy == back
    assert hash(back) == hash(lazy)
    assert len({back, lazy}) == 1
    assert lazy != dataclasses.replace(back, label="after")
    assert dataclasses.replace(back, label="after") != lazy
    other: object = "a snapshot"
    assert lazy != other
    assert [m.content for m in lazy.messages()] == [
        "question 0",
        "echo: question 0",
        "question 1",
        "echo: question 1",
        "question 2",
        "echo: question 2",
    ]


def test_derived_snapshots_keep_its_messages_and_their_encodings() -> None:
    session = _session()
    lazy = session.snapshot()
    expected = Snapshot.deserialize(lazy.serialize())

    relabelled = dataclasses.replace(lazy, label="relabelled")
    assert relabelled.state == expected.state
    assert relabelled.label == "relabelled"
    assert encoded_messages(relabelled) is not None  # the list it read is the one encoded
    assert Snapshot.deserialize(relabelled.serialize()) == relabelled

    marked = lazy.with_metadata({"event_seq": 7})
    assert marked.metadata == {"event_seq": 7}
    assert encoded_messages(marked) is not None
    assert Snapshot.deserialize(marked.serialize()) == marked
    assert marked.state == expected.state

    session.send("a later turn")
    assert "a later turn" in repr(session.snapshot().state)  # now in the lists lazy shares
    for copied in (pickle.loads(pickle.dumps(lazy)), copy.deepcopy(lazy), copy.copy(lazy)):
        assert type(copied) is Snapshot
        assert copied == expected
    assert b"a later turn" not in pickle.dumps(lazy)  # pickled with its own messages only
    assert lazy.redact(lambda state: state) == expected


def test_strip_secrets_reads_no_message_list_unless_it_finds_a_secret() -> None:
    clean = _session(note="plain")
    first = _first_message(clean)
    before = sys.getrefcount(first)
    snapshot = clean.snapshot()
    assert strip_secrets(snapshot) is snapshot
    assert sys.getrefcount(first) == before

    secret = _session(api_key="sk-live-0123456789abcdef0123")
    snapshot = secret.snapshot()
    stripped = strip_secrets(snapshot)
    assert stripped.state["plugins"]["keyed"]["api_key"] == SECRET_MARKER
    assert "plugins.keyed.api_key" in stripped.stripped_fields
    assert stripped.state["messages"] == snapshot.state["messages"]
    assert Snapshot.deserialize(stripped.serialize()) == stripped


def test_threads_reading_its_state_at_once_get_one_dict() -> None:
    session = _session(turns=200)
    for _ in range(20):
        lazy = session.snapshot()
        start = threading.Barrier(8)

        def read(snapshot: Snapshot = lazy, barrier: threading.Barrier = start) -> int:
            barrier.wait(timeout=10)
            return id(snapshot.state)

        with ThreadPoolExecutor(max_workers=8) as pool:
            seen = set(pool.map(lambda _: read(), range(8)))
        assert seen == {id(lazy.state)}
        assert len(lazy.state["messages"]) == 400


def test_a_snapshot_keeps_its_messages_through_later_turns_and_a_rollback() -> None:
    session = _session(turns=2)
    taken = session.snapshot()

    def failing(snapshot: Snapshot) -> None:
        raise OSError("disk full")

    session.send("kept")
    session.checkpointer = failing
    with pytest.raises(OSError, match="disk full"):
        session.send("rolled back")
    session.checkpointer = None
    session.send("after")
    assert [m.content for m in taken.messages()] == [
        "question 0",
        "echo: question 0",
        "question 1",
        "echo: question 1",
    ]
    later = session.snapshot()
    assert [m.content for m in later.messages()][4:] == [
        "kept",
        "echo: kept",
        "after",
        "echo: after",
    ]
    assert Snapshot.deserialize(taken.serialize()) == taken
