"""Incremental snapshots (issue 14): each message is stripped and encoded once, and reused.

The invariant, as a property over random conversations, plugin states, provider
states and live values: ``AgentSession.snapshot()`` (which reuses what earlier
snapshots built) is exactly ``Snapshot.new`` over the whole ``state()``, the
full walk: equal state, the same stripped paths in the same order, the same
``serialize()`` bytes (or the same ``SnapshotEncodeError``), and the same cut
for the SQLite store (message log and state parts, which join back into the same
snapshot). Failed turns roll the reused parts back. States of plugins the template
lacks (kept from the state the session resumed from) are carried unchanged, markers
and all, and listed exactly as the full walk lists them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ModelResponse,
    Plugin,
    PluginContext,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    Tool,
    ToolCall,
    Usage,
)
from actors.snapshot import encoded_messages
from supervisor import _state_parts
from supervisor._message_log import KnownLog, join, split


def _live() -> st.SearchStrategy[Any]:
    """Values ``strip_live`` replaces: a fresh lock, a function, a builtin, a bound method."""
    return st.one_of(
        st.builds(threading.Lock),
        st.builds(lambda: lambda: 0),
        st.just(len),
        st.builds(lambda: threading.Event().is_set),
    )


text = st.text(alphabet=st.characters(exclude_categories=()), max_size=8)
scalars = st.one_of(
    text,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
)
leaves: st.SearchStrategy[Any] = st.one_of(
    scalars,
    _live(),
    st.just({"__stripped__": "earlier.Thing"}),  # a marker already there: listed again
    st.builds(set),  # not plain: serialize refuses it, naming its path
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=2).map(tuple),
        st.dictionaries(text, inner, max_size=3),
        st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),  # non-str keys
    ),
    max_leaves=6,
)
plain_values = st.recursive(
    st.one_of(text, st.integers(min_value=-(2**63), max_value=2**63 - 1), st.booleans()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=5,
)

storable_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)
storable_leaves: st.SearchStrategy[Any] = st.one_of(
    storable_text,
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.just({"__stripped__": "earlier.Thing"}),  # a marker of an older checkpoint: plain
)
storable_values = st.recursive(
    storable_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=2).map(tuple),
        st.dictionaries(storable_text, inner, max_size=3),
    ),
    max_leaves=6,
)
"""Metadata a checkpoint can hold (``AgentSession`` refuses the rest): ``values`` without
sets, non-``str`` keys, lone surrogates, integers beyond 64 bits or live values."""


kept_states = st.dictionaries(
    st.sampled_from(["gone", "also.gone", "z"]),  # never "changing", the template's plugin
    st.dictionaries(text, values, max_size=3) | st.just({"__stripped__": "secret"}),
    max_size=2,
)
"""Restored states of plugins the template lacks: live values, markers, and what no
checkpoint can hold (then the resume itself is refused)."""


@dataclasses.dataclass
class Step:
    """One turn: what the user says, what the model does, how the mutable parts change."""

    user: str
    arguments: Any  # the tool call's arguments (None: no tool call)
    call_id: Any  # the tool call's id, as the model gives it (a model may give anything)
    answer: str
    fail: bool  # the model raises after the tool call: the turn is rolled back
    save_fails: bool  # the checkpointer raises after the turn's snapshot: rolled back too
    plugin: Any  # the plugin's new state value for key "v"
    provider: Any  # the provider state the model reports (None: unchanged)


steps = st.lists(
    st.builds(
        Step,
        user=text,
        arguments=st.none() | st.dictionaries(text, values, max_size=3),
        call_id=st.one_of(text, st.integers(0, 9), st.builds(lambda: lambda: 0)),
        answer=text,
        fail=st.booleans(),
        save_fails=st.booleans(),
        plugin=values,
        provider=st.none() | st.dictionaries(text, values, max_size=2),
    ),
    min_size=1,
    max_size=6,
)


class Planned:
    """A model that follows the current ``Step``; the plugin reads the same step."""

    model_string = "planned"

    def __init__(self) -> None:
        self.steps: deque[Step] = deque()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        step = self.steps[0]
        if messages[-1].role == "user" and step.arguments is not None:
            call = ToolCall(step.call_id, "missing_tool", step.arguments)
            return ModelResponse(Message.assistant(None, (call,)), Usage(1, 1))
        if step.fail:
            raise RuntimeError("model failed")
        return ModelResponse(Message.assistant(step.answer), Usage(1, 1), step.provider)


class Changing(Plugin):
    name = "changing"

    def __init__(self, model: Planned) -> None:
        self.model = model

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["v"] = self.model.steps[0].plugin


def _outcome(snapshot: Snapshot) -> bytes | str:
    try:
        return snapshot.serialize()
    except SnapshotEncodeError as exc:
        return f"SnapshotEncodeError: {exc}"


def _assert_same_as_full_walk(
    session: AgentSession, known: KnownLog | None, ours: Snapshot | None = None
) -> KnownLog | None:
    ours = session.snapshot("label") if ours is None else ours
    # Its encoding and its cut first, while its message list is not made (a checkpoint
    # makes none), then again once ``state`` has been read and made it.
    outcome = _outcome(ours)
    cut = None if isinstance(outcome, str) else split(ours, known)
    full = dataclasses.replace(
        Snapshot.new(session_id=session.session_id, state=session.state(), label=ours.label),
        checkpoint_id=ours.checkpoint_id,
        saved_at=ours.saved_at,
    )
    assert ours.state == full.state
    assert ours.stripped_fields == full.stripped_fields
    assert encoded_messages(full) is None
    assert outcome == _outcome(full) == _outcome(ours)
    if isinstance(outcome, str) or cut is None:
        return known
    assert encoded_messages(ours) is not None  # every message encodes: the shortcut applies
    made_cut, full_cut = split(ours, known), split(full, None)
    assert (made_cut.body, made_cut.size) == (cut.body, cut.size)
    assert cut.body == full_cut.body
    assert cut.parts == full_cut.parts
    assert cut.size == full_cut.size == len(outcome)
    log = None if cut.messages is None else bytes(cut.messages.whole())
    parts = [(part.kind, part.name, part.data) for part in cut.parts]
    assert join(cut.body, log, cut.count, None, parts) == Snapshot.deserialize(outcome)
    if full_cut.messages is None:  # no messages: the body holds the (empty) list
        assert cut.messages is None
        return known
    assert cut.messages is not None
    assert bytes(cut.messages.whole()) == bytes(full_cut.messages.whole())
    if known is not None and cut.extends:
        assert bytes(cut.messages.after(known.length)) == bytes(
            full_cut.messages.whole()[known.length :]
        )
    return cut.messages.known()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    steps=steps,
    metadata=st.one_of(  # what a checkpoint holds: the session refuses anything else
        st.dictionaries(storable_text, storable_values, max_size=2),
        st.dictionaries(storable_text, storable_leaves, max_size=2),  # flat: no walk, unless...
        st.just({"__stripped__": "earlier.Thing"}),  # ...it is a marker itself
    ),
    kept=kept_states,
)
def test_incremental_snapshot_is_the_full_walk(
    steps: list[Step], metadata: dict[str, Any], kept: dict[str, Any]
) -> None:
    model = Planned()
    template = AgentTemplate(model=model, plugins=[Changing(model)])
    restored = {"plugins": kept} if kept else None
    try:
        session = AgentSession(template, session_id="s", metadata=metadata, restored_state=restored)
    except SnapshotDecodeError:  # refused only if no checkpoint could hold a kept state
        with pytest.raises(SnapshotEncodeError):
            Snapshot.new(session_id="s", state={"plugins": kept}).serialize()
        return
    small_parts = mock.patch.object(_state_parts, "PART_MIN_BYTES", 8)  # cut out most states
    small_parts.start()
    try:
        _check_conversation(session, model, steps)
    finally:
        small_parts.stop()


def _check_conversation(session: AgentSession, model: Planned, steps: list[Step]) -> None:
    known = _assert_same_as_full_walk(session, None)
    first = session.snapshot()
    kept = {name: first.state["plugins"][name] for name in session.plugins.kept}
    kept_paths = [p for p in first.stripped_fields if any(_under(p, name) for name in kept)]

    def checkpointer(snapshot: Snapshot) -> None:  # runs inside send, after the turn
        nonlocal known
        known = _assert_same_as_full_walk(session, known, snapshot)
        if model.steps[0].save_fails:
            raise OSError("the store failed")

    session.checkpointer = checkpointer
    for step in steps:
        model.steps.append(step)
        # A failed turn is rolled back: the next snapshot must match the full walk again.
        # (TypeError: a call whose id or arguments are not JSON fails its turn.)
        with contextlib.suppress(RuntimeError, OSError, SnapshotEncodeError, ValueError, TypeError):
            session.send(step.user)
        model.steps.popleft()
        known = _assert_same_as_full_walk(session, known)
        later = session.snapshot()
        # Kept states: after the live one, unchanged, their markers listed as at first.
        assert list(later.state["plugins"]) == ["changing", *kept]
        assert {name: later.state["plugins"][name] for name in kept} == kept
        assert [p for p in later.stripped_fields if p in kept_paths] == kept_paths


def _under(path: str, plugin: str) -> bool:
    """Whether stripped path ``path`` lies in the state of ``plugin``."""
    root = f"plugins.{plugin}"
    return path == root or path.startswith((f"{root}.", f"{root}["))


def test_a_rolled_back_turn_leaves_every_list_handed_out_as_it_was() -> None:
    """A store remembers message bytes by their list (the lineage): a rollback must
    start a new list, never change one a snapshot already holds."""
    model = Planned()
    taken: list[Snapshot] = []

    def checkpointer(snapshot: Snapshot) -> None:
        taken.append(snapshot)
        if len(taken) == 2:
            raise OSError("disk full")

    session = AgentSession(AgentTemplate(model=model), session_id="s", checkpointer=checkpointer)
    answers = (Step("", None, "c1", f"answer {i}", False, False, None, None) for i in range(3))
    model.steps.extend(answers)
    session.send("one")
    model.steps.popleft()
    with pytest.raises(OSError, match="disk full"):
        session.send("two")
    model.steps.popleft()
    session.send("three")
    first, failed, third = (encoded_messages(snapshot) for snapshot in taken)
    assert first is not None
    assert failed is not None
    assert third is not None
    assert failed.parts is first.parts  # turns append to one lineage
    assert third.parts is not failed.parts  # the rollback started another
    assert b"".join(failed.parts[: failed.count]) == _messages_bytes(taken[1])
    assert [m.content for m in taken[2].messages()] == ["one", "answer 0", "three", "answer 2"]
    assert Snapshot.deserialize(taken[2].serialize()) == taken[2]


def _messages_bytes(snapshot: Snapshot) -> bytes:
    """The encodings of the snapshot's messages, back to back, by the full path."""
    cut = split(dataclasses.replace(snapshot, _encoded=None))
    assert cut.messages is not None
    return bytes(cut.messages.whole())
