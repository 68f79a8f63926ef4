"""A worker's turn checkpoint carries only the messages its host lacks (``_checkpoint_delta``).

The host must still save, byte for byte, the checkpoint the session in the worker
took; after a save fails (the turn is rolled back in the worker), the next one
must bring every message again; and a turn must cost its host what it added, not
the whole conversation.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    ScriptedModel,
    Snapshot,
    SnapshotDecodeError,
    ToolCall,
    tool,
)
from supervisor import AgentHost, CheckpointInfo, SQLiteCheckpointStore
from supervisor.workers import _checkpoint_delta
from supervisor.workers._checkpoint_delta import DeltaWriter, HistoryMirror
from supervisor.workers._protocol import pack, unpack


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Notes(Plugin):
    """Keeps a count and the last answer in its state: the part of a checkpoint that is not
    messages, sent whole every turn."""

    name = "notes"

    def after_turn(self, ctx: PluginContext, added: Sequence[Message]) -> None:
        ctx.state["turns"] = ctx.state.get("turns", 0) + 1
        ctx.state["last"] = added[-1].content


def _script(turns: int) -> list[Any]:
    """Answers for ``turns`` turns; every third one calls the ``add`` tool first."""
    script: list[Any] = []
    for turn in range(turns):
        if turn % 3 == 0:
            call = ToolCall(f"call-{turn}", "add", {"a": turn, "b": 1})
            script.append(ModelResponse(Message.assistant(None, (call,))))
        script.append(f"answer {turn}")
    return script


def _template(turns: int) -> AgentTemplate:
    return AgentTemplate(
        model=ScriptedModel(_script(turns)),
        tools=(add,),
        instructions="Be brief.",
        plugins=(Notes(),),
    )


def _through_pipe(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as the host reads it: packed into a frame in the worker, unpacked here."""
    frame: dict[str, Any] = unpack(pack({"id": 1, "payload": payload}))
    return frame["payload"]  # type: ignore[no-any-return]


class _Host:
    """A host's end, fed a session's checkpoints as its worker would send them: each
    request declares what this mirror has, the answer goes through a frame."""

    def __init__(self, session: AgentSession) -> None:
        self.writer = DeltaWriter()
        self.mirror = HistoryMirror()
        self.taken: list[Snapshot] = []
        self.payloads: list[dict[str, Any]] = []
        self.rebuilt: list[Snapshot] = []
        self.refuse = False
        session.checkpointer = self

    def __call__(self, snapshot: Snapshot) -> None:
        payload = _through_pipe(self.writer.capture(snapshot, self.mirror.have()))
        self.taken.append(snapshot)
        self.payloads.append(payload)
        self.rebuilt.append(self.mirror.snapshot(payload))
        if self.refuse:
            raise OSError(errno.ENOSPC, "No space left on device")


def _same(rebuilt: Snapshot, taken: Snapshot) -> None:
    assert rebuilt == taken
    assert rebuilt.serialize() == taken.serialize()
    assert Snapshot.deserialize(rebuilt.serialize()) == taken


def test_the_host_rebuilds_each_checkpoint_byte_for_byte_from_the_turns_messages() -> None:
    session = AgentSession(_template(12), session_id="delta")
    host = _Host(session)

    for turn in range(12):
        session.send(f"question {turn}")
        _same(host.rebuilt[-1], host.taken[-1])

    # A tool turn adds four messages, another turn two; each payload brings those only.
    assert [len(p["parts"]) for p in host.payloads] == [4 if t % 3 == 0 else 2 for t in range(12)]
    assert [p["base"] for p in host.payloads][:4] == [0, 4, 6, 8]
    assert host.rebuilt[-1].state["plugins"]["notes"] == {"turns": 12, "last": "answer 11"}


def test_neither_end_makes_a_list_of_the_whole_history_for_a_checkpoint(tmp_path: Path) -> None:
    """The worker sends, and the host saves, a turn's checkpoint from the messages'
    encodings: a list of the whole history (seen by the references it takes to a
    message dict) would make every checkpoint of a long session cost its length."""
    session = AgentSession(_template(6), session_id="delta-lazy")
    host = _Host(session)
    session.send("question 0")
    worker_first = session.snapshot().state["messages"][0]
    host_first = host.rebuilt[-1].state["messages"][0]
    worker_refs, host_refs = sys.getrefcount(worker_first), sys.getrefcount(host_first)
    with SQLiteCheckpointStore(tmp_path / "lazy.db") as store:
        for turn in range(1, 6):
            session.send(f"question {turn}")
            data = host.rebuilt[-1].serialize()
            store.save(host.rebuilt[-1])
        assert sys.getrefcount(worker_first) == worker_refs
        assert sys.getrefcount(host_first) == host_refs
        assert data == host.taken[-1].serialize()
        assert store.load("delta-lazy") == Snapshot.deserialize(data)
    assert host.rebuilt[-1].state["messages"][0] is host_first  # made when read
    _same(host.rebuilt[-1], host.taken[-1])


def test_after_a_failed_save_the_next_checkpoint_brings_every_message_again() -> None:
    session = AgentSession(_template(4), session_id="delta-rollback")
    host = _Host(session)
    session.send("one")
    host.refuse = True
    with pytest.raises(OSError, match="No space left"):
        session.send("two")  # rolled back: its messages are gone from the session
    host.refuse = False
    session.send("two")

    assert [len(p["parts"]) for p in host.payloads] == [4, 2, 6]
    _same(host.rebuilt[-1], host.taken[-1])
    assert [m.content for m in host.rebuilt[-1].messages() if m.role == "user"] == ["one", "two"]
    assert host.rebuilt[-1].messages() == session.history()


def test_a_checkpoint_continuing_from_messages_the_host_lacks_is_refused() -> None:
    session = AgentSession(_template(3), session_id="delta-gap")
    host = _Host(session)
    session.send("one")
    session.send("two")
    stranger = HistoryMirror()  # a host that never saw the first checkpoint

    with pytest.raises(RuntimeError, match=r"continues from message 4 .*, but the host has 0"):
        stranger.snapshot(host.payloads[1])
    assert stranger.have() is None  # unchanged: its next request gets every message
    snapshot = session.snapshot()
    payload = _through_pipe(host.writer.capture(snapshot, stranger.have()))
    assert len(payload["parts"]) == 6
    _same(stranger.snapshot(payload), snapshot)


def test_a_reply_the_host_cannot_read_changes_nothing_it_has() -> None:
    session = AgentSession(_template(3), session_id="delta-damaged")
    host = _Host(session)
    session.send("one")
    have = host.mirror.have()
    session.checkpointer = None
    session.send("two")
    snapshot = session.snapshot()
    payload = _through_pipe(host.writer.capture(snapshot, have))
    damaged = {**payload, "parts": [b"\xc1", *payload["parts"][1:]]}  # 0xc1: never valid

    with pytest.raises(SnapshotDecodeError):
        host.mirror.snapshot(damaged)
    assert host.mirror.have() == have
    _same(host.mirror.snapshot(payload), snapshot)


def test_replies_to_requests_sent_together_skip_the_messages_the_host_got_meanwhile() -> None:
    session = AgentSession(_template(3), session_id="delta-pipelined")
    host = _Host(session)
    session.send("one")
    declared = host.mirror.have()  # two requests declare this before either answer arrives
    session.checkpointer = None
    session.send("two")
    first = session.snapshot()
    first_payload = _through_pipe(host.writer.capture(first, declared))
    session.send("three")
    second = session.snapshot()
    second_payload = _through_pipe(host.writer.capture(second, declared))

    _same(host.mirror.snapshot(first_payload), first)
    assert len(second_payload["parts"]) == 4  # turns two and three
    _same(host.mirror.snapshot(second_payload), second)
    assert host.mirror.have() == [1, 8]


def test_a_snapshot_without_its_messages_encodings_goes_whole() -> None:
    snapshot = Snapshot.new(session_id="plain", state={"messages": [], "turns": 0})
    payload = _through_pipe(DeltaWriter().capture(snapshot, [1, 0]))

    assert set(payload) == {"whole"}
    assert HistoryMirror().snapshot(payload) == snapshot


# -- end to end, in a worker ---------------------------------------------------------------


class _FullDisk(SQLiteCheckpointStore):
    """A SQLite store whose ``save`` fails with ``ENOSPC`` while ``full`` is set."""

    full = False

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().save(snapshot)


@pytest.fixture
def parts_received(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many message encodings each checkpoint brought to the host (``-1``: whole)."""
    received: list[int] = []
    original = HistoryMirror.snapshot

    def counting(self: HistoryMirror, payload: dict[str, Any]) -> Snapshot:
        received.append(len(payload["parts"]) if "parts" in payload else -1)
        return original(self, payload)

    monkeypatch.setattr(_checkpoint_delta.HistoryMirror, "snapshot", counting)
    return received


def test_a_worker_session_sends_its_host_each_turns_messages_only(
    tmp_path: Path, parts_received: list[int]
) -> None:
    path = tmp_path / "delta.db"
    store = _FullDisk(path)
    echo = AgentTemplate(model=EchoModel(), instructions="Be brief.", plugins=(Notes(),))
    with AgentHost(store=store, workers=1) as host:
        sid = host.start_session(echo, session_id="worker-delta")
        for turn in range(20):
            host.send(sid, f"question {turn}")
        store.full = True
        with pytest.raises(OSError, match="No space left"):
            host.send(sid, "refused")
        store.full = False
        for turn in range(20, 30):
            host.send(sid, f"question {turn}")
        host.hibernate(sid)  # its final checkpoint: nothing new
        host.send(sid, "after")  # a new incarnation, whose host has nothing yet
        history = host.history(sid)

    with SQLiteCheckpointStore(path) as reopened:
        saved = reopened.load(sid)
    assert saved.messages() == history
    users = [m.content for m in history if m.role == "user"]
    assert users == [f"question {t}" for t in range(30)] + ["after"]
    assert saved.state["plugins"]["notes"] == {"turns": 31, "last": "echo: after"}
    # Two messages a turn; the refused turn's too; then, the worker having rolled it back,
    # every message of the 21 turns after it; then two a turn again; none at the
    # hibernation; all of them at the first turn of the next incarnation; none at the
    # final checkpoint of the host's shutdown.
    assert parts_received == [2] * 20 + [2, 42] + [2] * 9 + [0, 62, 0]
