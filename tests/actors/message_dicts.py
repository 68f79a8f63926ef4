"""Hypothesis strategies of message dicts as a checkpoint might hold them: any keys a
``Message.to_dict`` writes, each with a well-formed value or a wrong one; and of
well-formed ``Message`` objects."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from actors import Message, ToolCall

__all__ = ["loose_call_dicts", "loose_message_dicts", "messages"]


def messages(
    text: st.SearchStrategy[str], calls: st.SearchStrategy[ToolCall]
) -> st.SearchStrategy[Message]:
    """Valid messages of any role, texts from ``text``, up to two tool calls from ``calls``."""
    return st.builds(
        Message,
        st.sampled_from(["user", "assistant", "tool", "system"]),
        st.none() | text,
        st.lists(calls, max_size=2).map(tuple),
        st.none() | text,
        st.none() | text,
    )


def loose_call_dicts(
    fields: st.SearchStrategy[Any], arguments: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """Tool call dicts of ``loose_message_dicts``."""
    return st.fixed_dictionaries(
        {}, optional={"id": fields, "name": fields, "arguments": arguments, "extra": fields}
    )


def loose_message_dicts(
    fields: st.SearchStrategy[Any], arguments: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """Message dicts whose every key is optional and may hold ``fields`` (any plain value)
    instead of its type; tool calls' ``arguments`` come from ``arguments``."""
    calls = loose_call_dicts(fields, arguments)
    return st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "assistant", "tool", "system", "robot"]) | fields,
            "content": fields,
            "tool_calls": st.lists(calls, max_size=2) | fields,
            "tool_call_id": fields,
            "name": fields,
            "extra": fields,
        },
    )
