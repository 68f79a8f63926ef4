"""``AgentSession.snapshot()`` and the after-turn checkpointer, on a real actor.

Every wait is bounded (``WAIT``); nothing sleeps.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    GetHistory,
    Message,
    Plugin,
    PluginContext,
    Send,
    Snapshot,
    SteeringQueue,
    TakeSnapshot,
    is_stripped_marker,
    tool,
)

WAIT = 5.0

Ref = pykka.ActorRef[AgentSession]


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


class Resources(Plugin):
    """Holds three live values (a lock, an open file, a socket) and one plain counter."""

    name = "resources"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["lock"] = threading.Lock()
        ctx.state["file"] = (self.directory / f"{ctx.session_id}.log").open("a", encoding="utf-8")
        left, right = socket.socketpair()
        ctx.state["sock"] = left
        ctx.state["peer"] = right
        ctx.state["turns"] = 0

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] += 1
        ctx.state["file"].write(f"turn {ctx.state['turns']}\n")

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        for key in ("file", "sock", "peer"):
            ctx.state[key].close()


class Recorder:
    """A checkpointer that records every snapshot it is given; can be told to fail."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        self.fail_with: Exception | None = None

    def __call__(self, snapshot: Snapshot) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.snapshots.append(snapshot)


Starter = Callable[..., Ref]


@pytest.fixture
def start() -> Iterator[Starter]:
    """Start sessions and stop them (bounded) at the end of the test."""
    refs: list[Ref] = []

    def _start(template: AgentTemplate, **kwargs: Any) -> Ref:
        ref = AgentSession.start(template, **kwargs)
        refs.append(ref)
        return ref

    yield _start
    for ref in refs:
        ref.stop(block=True, timeout=WAIT)


def _template(tmp_path: Path) -> AgentTemplate:
    return AgentTemplate(
        model=EchoModel(),
        tools=(multiply,),
        instructions="Be brief.",
        plugins=(Resources(tmp_path),),
    )


def _ask(ref: Ref, message: object) -> Any:
    return ref.ask(message, block=True, timeout=WAIT)


def _send(ref: Ref, text: str) -> Message:
    answer: Message = _ask(ref, Send(text))
    return answer


def test_snapshot_strips_plugin_live_values_and_round_trips(tmp_path: Path, start: Starter) -> None:
    ref = start(_template(tmp_path), session_id="snap-1")
    _send(ref, "hello")
    assert _send(ref, '/multiply {"a": 6, "b": 7}').content == "multiply returned: 42"

    snapshot: Snapshot = ref.proxy().snapshot("after-tools").get(timeout=WAIT)

    assert snapshot.label == "after-tools"
    assert snapshot.session_id == "snap-1"
    assert set(snapshot.stripped_fields) == {
        "plugins.resources.lock",
        "plugins.resources.file",
        "plugins.resources.sock",
        "plugins.resources.peer",
    }
    plugin_state = snapshot.state["plugins"]["resources"]
    assert plugin_state["turns"] == 2
    assert all(is_stripped_marker(plugin_state[k]) for k in ("lock", "file", "sock", "peer"))
    history = ref.proxy().history().get(timeout=WAIT)
    assert snapshot.messages() == history
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert snapshot.usage() == ref.proxy().usage().get(timeout=WAIT)
    assert Snapshot.deserialize(snapshot.serialize()) == snapshot


def test_snapshot_leaves_the_live_session_untouched(tmp_path: Path, start: Starter) -> None:
    ref = start(_template(tmp_path))
    _send(ref, "one")
    ref.proxy().snapshot().get(timeout=WAIT)

    # The live lock and file are still in use after the snapshot stripped copies.
    _send(ref, "two")
    state = ref.proxy().state().get(timeout=WAIT)
    assert isinstance(state["plugins"]["resources"]["lock"], type(threading.Lock()))
    assert state["plugins"]["resources"]["turns"] == 2


def test_message_forms_take_snapshot_and_get_history(tmp_path: Path, start: Starter) -> None:
    ref = start(_template(tmp_path))
    _send(ref, "hi")

    snapshot = _ask(ref, TakeSnapshot("x"))
    history = _ask(ref, GetHistory())

    assert isinstance(snapshot, Snapshot)
    assert snapshot.label == "x"
    assert history == [Message.user("hi"), Message.assistant("echo: hi")]
    assert snapshot.messages() == history
    assert _ask(ref, TakeSnapshot()).label is None


def test_checkpointer_runs_after_every_completed_turn(tmp_path: Path, start: Starter) -> None:
    recorder = Recorder()
    ref = start(_template(tmp_path), checkpointer=recorder, checkpoint_every=1)

    for index in range(3):
        _send(ref, f"turn {index}")
        # Saved before send returned: the newest snapshot holds this very turn.
        assert len(recorder.snapshots) == index + 1
        assert recorder.snapshots[-1].messages() == _ask(ref, GetHistory())
        assert recorder.snapshots[-1].state["turns"] == index + 1


def test_checkpointer_runs_every_nth_turn(tmp_path: Path, start: Starter) -> None:
    recorder = Recorder()
    ref = start(_template(tmp_path), checkpointer=recorder, checkpoint_every=3)

    counts = []
    for index in range(7):
        _send(ref, f"turn {index}")
        counts.append(len(recorder.snapshots))

    assert counts == [0, 0, 1, 1, 1, 2, 2]
    assert [s.state["turns"] for s in recorder.snapshots] == [3, 6]
    assert len(recorder.snapshots[1].messages()) == 12


def test_checkpointer_is_not_called_for_a_failed_turn(tmp_path: Path, start: Starter) -> None:
    recorder = Recorder()
    model_error = RuntimeError("provider down")

    class Failing(EchoModel):
        def generate(self, messages: Sequence[Message], tools: Sequence[Any]) -> Any:
            raise model_error

    template = AgentTemplate(model=Failing(), plugins=(Resources(tmp_path),))
    ref = start(template, checkpointer=recorder)

    with pytest.raises(RuntimeError, match="provider down"):
        _send(ref, "anything")

    assert recorder.snapshots == []
    assert _ask(ref, GetHistory()) == []


def test_failing_checkpointer_raises_from_send_and_rolls_the_turn_back(
    tmp_path: Path, start: Starter
) -> None:
    recorder = Recorder()
    steering = SteeringQueue(4)
    ref = start(_template(tmp_path), checkpointer=recorder, steering=steering)
    _send(ref, "durable")
    recorder.fail_with = OSError("disk full")
    steering.put("be brief")

    with pytest.raises(OSError, match="disk full"):
        _send(ref, "not durable")

    # The turn is undone: history, turn counter, and the steering it took is queued again.
    assert [m.content for m in _ask(ref, GetHistory())] == ["durable", "echo: durable"]
    assert ref.proxy().state().get(timeout=WAIT)["turns"] == 1
    assert steering.drain() == ["be brief"]
    # An error event tells that the turn is not durable.
    batch = ref.proxy().events().get(timeout=WAIT)
    errors = [e for e in batch.events if e.type == "error"]
    assert len(errors) == 1
    assert "disk full" in errors[0].data["error"]
    assert errors[0].data["turn"] == 2
    # The session lives on; the retry is clean and its checkpoint holds each turn once.
    recorder.fail_with = None
    _send(ref, "not durable")
    assert [m.content for m in recorder.snapshots[-1].messages()] == [
        "durable",
        "echo: durable",
        "not durable",
        "echo: not durable",
    ]
    assert recorder.snapshots[-1].state["turns"] == 2
    assert ref.is_alive()
