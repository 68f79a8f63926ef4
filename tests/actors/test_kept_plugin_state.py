"""The saved state of a plugin the template no longer has is kept: carried unchanged into
every later snapshot, after the live plugins' states, and handed back in ``ctx.state`` when a
template lists the plugin again. Before, the session dropped it from its next checkpoint,
and the user's data was lost without a word."""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pykka
import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Snapshot,
    SnapshotDecodeError,
    Tool,
)
from actors.redact import strip_secrets

WAIT = 5.0


class Notes(Plugin):
    """Keeps notes in its state, a live lock beside them (stripped from snapshots), and
    records what its ``session_start`` found."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state["started_with"] = {
            "state": copy.deepcopy({k: v for k, v in ctx.state.items() if k != "started_with"}),
            "resumed": ctx.resumed,
            "stripped": list(ctx.stripped),
        }
        ctx.state.setdefault("notes", [])
        ctx.state["lock"] = threading.Lock()

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["notes"].append(messages[0].content)


class Counter(Plugin):
    """Counts turns; sees every hook, so a kept state would show up in what it is handed."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def session_start(self, ctx: PluginContext) -> None:
        self.seen.append(ctx.plugin)
        ctx.state.setdefault("turns", 0)

    def before_model(self, ctx: PluginContext, messages: list[Message]) -> None:
        self.seen.append(ctx.plugin)

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        self.seen.append(ctx.plugin)
        ctx.state["turns"] += 1


class FailOn(EchoModel):
    """``EchoModel`` that raises for user text ``fail``."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        if messages[-1].content == "fail":
            raise RuntimeError("model down")
        return super().generate(messages, tools)


@pytest.fixture
def refs() -> Iterator[list[pykka.ActorRef[AgentSession]]]:
    started: list[pykka.ActorRef[AgentSession]] = []
    yield started
    for ref in started:
        if ref.is_alive():
            ref.stop(block=True, timeout=WAIT)


def _run(
    refs: list[pykka.ActorRef[AgentSession]],
    plugins: Sequence[Plugin],
    snapshot: Snapshot | None,
    *texts: str,
) -> Snapshot:
    """Start a session (resumed from ``snapshot`` if given), send ``texts``, stop it and
    return its last snapshot, passed through the host's default redaction as a host saves it."""
    restored: dict[str, Any] = {}
    if snapshot is not None:
        restored = {
            "restored_state": snapshot.state,
            "stripped_fields": snapshot.stripped_fields,
        }
    ref = AgentSession.start(
        AgentTemplate(model="echo", plugins=plugins), session_id="s", **restored
    )
    refs.append(ref)
    proxy = ref.proxy()
    for text in texts:
        proxy.send(text).get(timeout=WAIT)
    taken: Snapshot = proxy.snapshot().get(timeout=WAIT)
    ref.stop(block=True, timeout=WAIT)
    return strip_secrets(Snapshot.deserialize(taken.serialize()))  # as a store gives it back


def test_a_removed_plugins_state_is_kept_and_comes_back(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    first = _run(refs, [Notes(), Counter()], None, "one", "two")
    saved = first.state["plugins"]["notes"]
    assert saved["notes"] == ["one", "two"]
    assert "plugins.notes.lock" in first.stripped_fields

    without = _run(refs, [Counter()], first, "three")
    again = _run(refs, [Counter()], without, "four")  # kept through more than one life

    for later in (without, again):
        assert list(later.state["plugins"]) == ["counter", "notes"]  # the live ones first
        assert later.state["plugins"]["notes"] == saved
        notes_paths = [p for p in later.stripped_fields if p.startswith("plugins.notes.")]
        assert notes_paths == [p for p in first.stripped_fields if p.startswith("plugins.notes.")]
    assert again.state["plugins"]["counter"]["turns"] == 4

    back = _run(refs, [Notes(), Counter()], again, "five")
    state = back.state["plugins"]["notes"]
    assert state["started_with"] == {
        "state": {"notes": ["one", "two"], "lock": {"__stripped__": "_thread.lock"}},
        "resumed": True,
        "stripped": ["lock"],
    }
    assert state["notes"] == ["one", "two", "five"]


def test_a_snapshot_with_kept_states_is_the_full_walk(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    """Kept states sit after the live ones, in the order they were restored, and a snapshot
    lists their markers exactly as ``Snapshot.new`` over the whole state does."""
    restored = Snapshot.new(
        session_id="s",
        state={
            "plugins": {
                "zeta": {"conn": threading.Lock(), "n": 1},
                "counter": {"turns": 5},
                "alpha": {"__stripped__": "secret"},  # stripped whole: kept as the marker
                "mid": {"items": [{"k": len}, ("t", 2)]},
            }
        },
    )
    ref = AgentSession.start(
        AgentTemplate(model="echo", plugins=[Counter()]),
        restored_state=restored.state,
        stripped_fields=restored.stripped_fields,
    )
    refs.append(ref)
    proxy = ref.proxy()
    proxy.send("hi").get(timeout=WAIT)
    ours: Snapshot = proxy.snapshot().get(timeout=WAIT)
    state = proxy.state().get(timeout=WAIT)
    full = Snapshot.new(session_id=ours.session_id, state=state)

    assert list(ours.state["plugins"]) == ["counter", "zeta", "alpha", "mid"]
    assert ours.state == full.state
    assert ours.stripped_fields == full.stripped_fields
    assert ours.stripped_fields == (
        "plugins.zeta.conn",
        "plugins.alpha",
        "plugins.mid.items[0].k",
    )
    assert (
        ours.serialize()
        == dataclasses.replace(
            full, checkpoint_id=ours.checkpoint_id, saved_at=ours.saved_at
        ).serialize()
    )
    for name in ("zeta", "alpha", "mid"):
        assert ours.state["plugins"][name] == restored.state["plugins"][name]


def test_no_hook_sees_a_kept_state_and_nothing_changes_it(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    counter = Counter()
    restored: dict[str, Any] = {
        "plugins": {"counter": {"turns": 0}, "gone": {"items": [1, {"a": 2}]}}
    }
    ref = AgentSession.start(
        AgentTemplate(model="echo", plugins=[counter]), restored_state=restored
    )
    refs.append(ref)
    proxy = ref.proxy()
    proxy.send("hi").get(timeout=WAIT)

    assert counter.seen == ["counter", "counter", "counter"]
    handed = proxy.state().get(timeout=WAIT)
    handed["plugins"]["gone"]["items"].append("changed by a caller")  # a copy, not the kept one
    restored["plugins"]["gone"]["items"].append("changed by the resumer")  # so is this
    snapshot: Snapshot = proxy.snapshot().get(timeout=WAIT)
    assert snapshot.state["plugins"]["gone"] == {"items": [1, {"a": 2}]}


def test_a_rolled_back_turn_leaves_kept_states_as_they_were(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    saves: list[Snapshot] = []

    def checkpointer(snapshot: Snapshot) -> None:
        saves.append(snapshot)
        if len(saves) == 2:
            raise OSError("disk full")

    restored = {"plugins": {"gone": {"v": [1, 2]}, "counter": {"turns": 0}}}
    ref = AgentSession.start(
        AgentTemplate(model=FailOn(), plugins=[Counter()]),
        restored_state=restored,
        checkpointer=checkpointer,
    )
    refs.append(ref)
    proxy = ref.proxy()
    proxy.send("one").get(timeout=WAIT)
    with pytest.raises(RuntimeError, match="model down"):
        proxy.send("fail").get(timeout=WAIT)
    with pytest.raises(OSError, match="disk full"):
        proxy.send("two").get(timeout=WAIT)
    proxy.send("three").get(timeout=WAIT)

    assert [s.state["plugins"]["counter"]["turns"] for s in saves] == [1, 2, 2]
    for snapshot in saves:
        assert snapshot.state["plugins"]["gone"] == {"v": [1, 2]}
        assert list(snapshot.state["plugins"]) == ["counter", "gone"]


def test_the_start_says_once_which_states_are_kept(
    refs: list[pykka.ActorRef[AgentSession]], caplog: pytest.LogCaptureFixture
) -> None:
    restored = {"plugins": {"gone": {}, "counter": {"turns": 1}, "also_gone": {"x": 1}}}
    with caplog.at_level(logging.WARNING, logger="actors.plugins"):
        ref = AgentSession.start(
            AgentTemplate(model="echo", plugins=[Counter()]),
            session_id="s-17",
            restored_state=restored,
        )
        refs.append(ref)
        proxy = ref.proxy()
        proxy.send("hi").get(timeout=WAIT)  # queued behind the start: it is over
        proxy.send("again").get(timeout=WAIT)

    kept = [e for e in proxy.events().get(timeout=WAIT).events if e.type == "plugin_state_kept"]
    assert [e.data for e in kept] == [{"plugins": ["gone", "also_gone"]}]
    assert kept[0].seq == 1  # before any turn of the session
    records = [r for r in caplog.records if r.name == "actors.plugins"]
    assert len(records) == 1
    message = records[0].getMessage()
    assert records[0].levelno == logging.WARNING
    assert "'s-17'" in message
    assert "'gone', 'also_gone'" in message


def test_nothing_is_said_when_every_state_has_its_plugin(
    refs: list[pykka.ActorRef[AgentSession]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="actors.plugins"):
        ref = AgentSession.start(
            AgentTemplate(model="echo", plugins=[Counter()]),
            restored_state={"plugins": {"counter": {"turns": 1}}},
        )
        refs.append(ref)
        ref.proxy().send("hi").get(timeout=WAIT)
    types = [e.type for e in ref.proxy().events().get(timeout=WAIT).events]
    assert "plugin_state_kept" not in types
    assert not [r for r in caplog.records if r.name == "actors.plugins"]


def test_a_kept_state_with_a_live_value_is_kept_as_a_snapshot_holds_it() -> None:
    """A hand-made state (``state()`` of a live session) may hold live values: they are
    stripped at once, as every snapshot would strip them, and nothing live is held."""
    lock = threading.Lock()
    session = AgentSession(
        AgentTemplate(model="echo"),
        restored_state={"plugins": {"gone": {"lock": lock, "pair": (1, 2)}}},
    )
    assert session.plugins.kept == {
        "gone": {"lock": {"__stripped__": "_thread.lock"}, "pair": [1, 2]}
    }
    assert session.snapshot().stripped_fields == ("plugins.gone.lock",)


@pytest.mark.parametrize(
    ("state", "says"),
    [
        (["not", "a", "dict"], "state.plugins.gone must be a dict"),
        ({"s": {1, 2}}, "state.plugins.gone.s"),
        ({"n": 2**70}, "state.plugins.gone.n"),
        ({"k": {3: "non-str key"}}, "state.plugins.gone.k"),
    ],
)
def test_a_kept_state_no_checkpoint_can_hold_fails_the_resume(state: object, says: str) -> None:
    """Refused where it is found, naming the path, as a live plugin's is at start: kept, it
    would fail every later turn's checkpoint instead."""
    with pytest.raises(SnapshotDecodeError, match="not a valid session state") as caught:
        AgentSession(AgentTemplate(model="echo"), restored_state={"plugins": {"gone": state}})
    assert says in str(caught.value)


def test_a_plugin_back_on_a_whole_state_marker_starts_afresh(
    refs: list[pykka.ActorRef[AgentSession]],
) -> None:
    """A state stripped whole (an old checkpoint's redaction) is kept as the marker; the
    plugin back finds a fresh state, as it would had it never been away."""
    start = Snapshot.new(session_id="s", state={"plugins": {"notes": {"__stripped__": "secret"}}})
    kept = _run(refs, [Counter()], start, "one")
    assert kept.state["plugins"]["notes"] == {"__stripped__": "secret"}
    assert "plugins.notes" in kept.stripped_fields

    back = _run(refs, [Notes()], kept, "two")
    assert back.state["plugins"]["notes"]["started_with"]["state"] == {}
    assert back.state["plugins"]["notes"]["notes"] == ["two"]
