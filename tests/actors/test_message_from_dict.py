"""``Message.from_dict``'s fast path for exactly typed dicts (what a resume rebuilds) gives
what the general path gives: the same message, or the same ``InvalidMessage``."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from actors import InvalidMessage, Message, ToolCall
from tests.actors.message_dicts import loose_message_dicts

text = st.text(max_size=5)
fields = st.one_of(st.none(), text, st.integers(0, 3), st.lists(text, max_size=1))
arguments = st.dictionaries(text, st.one_of(text, st.integers(), st.none()), max_size=2) | fields
messages = loose_message_dicts(fields, arguments)


def _outcome(data: Any) -> Message | str:
    try:
        return Message.from_dict(data)
    except InvalidMessage as exc:
        return str(exc)


@settings(max_examples=500, deadline=None)
@given(messages)
def test_the_fast_path_agrees_with_the_general_one(data: dict[str, Any]) -> None:
    fast = _outcome(data)
    general = _outcome(MappingProxyType(data))  # not a dict: always the general path
    assert fast == general
    if isinstance(fast, Message):
        assert type(fast.tool_calls) is tuple
        assert all(type(call) is ToolCall for call in fast.tool_calls)
        assert Message.from_dict(fast.to_dict()) == fast


def test_what_to_dict_writes_reads_back_equal() -> None:
    call = ToolCall("c1", "lookup", {"key": "k", "n": [1, {"a": None}]})
    for message in (
        Message.user("hi"),
        Message.assistant(None, (call,)),
        Message.tool(call, "K"),
        Message.assistant("done"),
        Message("assistant", "hey", name="bot"),
    ):
        rebuilt = Message.from_dict(message.to_dict())
        assert rebuilt == message
        assert rebuilt.tool_calls == message.tool_calls
