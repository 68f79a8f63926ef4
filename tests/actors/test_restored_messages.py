"""A resumed session's history (``actors._restored``): the whole-list check accepts and
rejects exactly what ``Message.from_dict`` does, the messages built later are the same,
and a snapshot taken from the restored dicts is byte for byte the full walk's."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    InvalidMessage,
    Message,
    Snapshot,
    SnapshotDecodeError,
    SnapshotEncodeError,
    ToolCall,
)
from actors._codec import cut_items, pack_each, pack_plain
from actors._restored import RestoredMessages
from actors._strip import strip_live
from actors.snapshot import encoded_messages
from tests.actors.message_dicts import loose_call_dicts, loose_message_dicts, messages

text = st.text(max_size=4)
fields = st.one_of(st.none(), text, st.integers(0, 3), st.lists(text, max_size=1))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), text),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(text, inner, max_size=2),
    max_leaves=4,
)
arguments = st.dictionaries(text, json_values, max_size=2) | fields
live_arguments = st.dictionaries(text, json_values | st.builds(threading.Lock), max_size=3)
calls = loose_call_dicts(fields, arguments)
loose = loose_message_dicts(fields, arguments)
tool_calls = st.builds(ToolCall, text, text, st.dictionaries(text, json_values, max_size=2))
written = messages(text, tool_calls).map(Message.to_dict)


@st.composite
def nearly_written(draw: st.DrawFn) -> dict[str, Any]:
    """What ``to_dict`` writes with one field replaced by anything: one flaw at a time."""
    data = dict(draw(written))
    key = draw(st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name"]))
    data[key] = draw(fields | st.lists(calls, max_size=2))
    return data


histories = st.lists(written, max_size=6) | st.lists(written | loose | nearly_written(), max_size=4)


def _outcome(make: Any) -> list[Message] | str:
    try:
        return list(make())
    except InvalidMessage as exc:
        return str(exc)


@settings(max_examples=400, deadline=None)
@given(histories)
def test_the_restored_messages_are_from_dicts(raw: list[dict[str, Any]]) -> None:
    expected = _outcome(lambda: [Message.from_dict(m) for m in raw])
    got = _outcome(lambda: RestoredMessages(raw).messages())
    assert got == expected
    if isinstance(got, list):
        assert all(type(m.tool_calls) is tuple for m in got)
        restored = RestoredMessages(raw)
        assert len(restored) == len(raw)
        if restored.canonical:  # a snapshot may hold the dicts as they are
            assert [list(m.to_dict().items()) for m in got] == [list(d.items()) for d in raw]


def test_what_to_dict_writes_is_canonical_and_anything_else_is_not() -> None:
    call = ToolCall("c1", "lookup", {"key": "k", "n": [1, {"a": None}]})
    history = [Message.user("hi"), Message.assistant(None, (call,)), Message.tool(call, "K")]
    assert RestoredMessages([m.to_dict() for m in history]).canonical
    odds: list[dict[str, Any]] = [
        {"content": "hi", "role": "user"},  # another key order
        {"role": "user"},  # no content written
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "K", "name": None},
    ]
    for odd in odds:
        restored = RestoredMessages([odd])
        assert not restored.canonical
        assert restored.messages() == [Message.from_dict(odd)]


def test_a_malformed_message_is_named_as_from_dict_names_it() -> None:
    good = Message.user("hi").to_dict()
    with pytest.raises(InvalidMessage, match="role"):
        RestoredMessages([good, {"role": "wizard", "content": "x"}])
    with pytest.raises(InvalidMessage, match="arguments"):
        RestoredMessages(
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "name": "t", "arguments": {"k": {1, 2}}}],
                }
            ]
        )


def test_arguments_too_deep_to_check_are_a_decode_error_of_the_resume() -> None:
    deep: dict[str, Any] = {}
    for _ in range(5000):
        deep = {"a": deep}
    state = {
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "name": "t", "arguments": deep}],
            }
        ]
    }
    with pytest.raises(SnapshotDecodeError, match="not a valid session state"):
        AgentSession(AgentTemplate(model=EchoModel()), session_id="s", restored_state=state)


def _session(state: dict[str, Any]) -> AgentSession:
    return AgentSession(AgentTemplate(model=EchoModel()), session_id="s", restored_state=state)


@pytest.mark.parametrize("canonical", [True, False], ids=["as-written", "hand-made"])
def test_a_resumed_sessions_snapshot_is_the_full_walk(canonical: bool) -> None:
    call = ToolCall("c1", "lookup", {"key": "k"})
    written = [Message.user("hi"), Message.assistant(None, (call,)), Message.tool(call, "K")]
    raw: list[dict[str, Any]] = [m.to_dict() for m in written]
    if not canonical:
        raw[0] = {"content": "hi", "role": "user", "tool_calls": []}
    session = _session({"session_id": "s", "messages": raw})

    first = session.snapshot()  # before anything read the history
    full = Snapshot.new(session_id="s", state=session.state())
    assert first.state == full.state
    same_id = dataclasses.replace(full, checkpoint_id=first.checkpoint_id, saved_at=first.saved_at)
    assert first.serialize() == same_id.serialize()
    assert [pack_plain(m) for m in first.state["messages"]] == [
        pack_plain(m.to_dict()) for m in written
    ]
    assert session.history() == written
    assert session.send("more").content == "echo: more"
    again = session.snapshot()
    assert again.state == Snapshot.new(session_id="s", state=session.state()).state
    assert Snapshot.deserialize(again.serialize()).messages() == session.history()


def _packed_one_by_one(values: list[Any]) -> list[bytes] | None:
    try:
        return [pack_plain(value) for value in values]
    except SnapshotEncodeError:
        return None


@settings(max_examples=300, deadline=None)
@given(st.lists(written, max_size=8))
def test_a_resumed_history_is_encoded_as_each_message_alone(raw: list[dict[str, Any]]) -> None:
    """The first snapshot encodes a restored history in one call (``pack_each``): the bytes
    of every message are still exactly its own encoding, and one that cannot be encoded
    (an integer past 64 bits) leaves the snapshot without encodings, as before."""
    session = _session({"session_id": "s", "messages": raw})
    first = session.snapshot()
    encoded = encoded_messages(first)
    expected = _packed_one_by_one(raw)
    if expected is None:
        assert encoded is None
        with pytest.raises(SnapshotEncodeError):
            first.serialize()
        return
    assert encoded is not None
    assert encoded.parts[: encoded.count] == expected
    full = Snapshot.new(session_id="s", state=session.state())
    same_id = dataclasses.replace(full, checkpoint_id=first.checkpoint_id, saved_at=first.saved_at)
    assert first.serialize() == same_id.serialize()


def test_pack_each_is_pack_plain_of_each_or_none() -> None:
    values: list[Any] = [{"a": [1, 2.5, None]}, "text", b"bytes", 2**63, [], {}]
    assert pack_each(values) == [pack_plain(value) for value in values]
    assert pack_each([]) == []
    assert pack_each([{"a": 1}, 2**64]) is None  # past msgpack's integers
    assert pack_each([{"a": 1}, {1, 2}]) is None  # not plain


def test_cut_items_cuts_exactly_count_items_or_gives_none() -> None:
    values: list[Any] = [{"a": [1, 2.5, None]}, "text", b"bytes", 2**63, [], {}]
    parts = [pack_plain(value) for value in values]
    joined = b"".join(parts)
    assert cut_items(joined, len(values)) == parts
    assert cut_items(pack_plain(values), len(values), array=True) == parts
    assert cut_items(b"", 0) == []
    assert cut_items(joined, len(values) - 1) is None  # bytes left over
    assert cut_items(joined, len(values) + 1) is None  # too few items
    assert cut_items(joined[:-1], len(values)) is None  # truncated
    assert cut_items(pack_plain(values), len(values) - 1, array=True) is None  # other count
    assert cut_items(b"\xc1", 1) is None  # a byte msgpack never writes


@settings(max_examples=200, deadline=None)
@given(st.lists(messages(text, st.builds(ToolCall, text, text, live_arguments)), max_size=6))
def test_markers_stripped_in_an_earlier_life_are_listed_as_the_full_walk_lists_them(
    history: list[Message],
) -> None:
    """A resumed history holds the markers its live values left; the first snapshot (which
    encodes the restored dicts without walking them) lists their paths in
    ``stripped_fields`` exactly as a walk of the whole state does, in the same order."""
    written, _ = strip_live([m.to_dict() for m in history])
    if _packed_one_by_one(written) is None:  # an integer past 64 bits: never checkpointed
        return
    session = _session({"session_id": "s", "messages": written})
    first = session.snapshot()
    full = Snapshot.new(session_id="s", state=session.state())
    assert first.stripped_fields == full.stripped_fields
    same_id = dataclasses.replace(full, checkpoint_id=first.checkpoint_id, saved_at=first.saved_at)
    assert first.serialize() == same_id.serialize()
