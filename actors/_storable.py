"""Making what enters a session storable, where it enters.

A session's history is checkpointed after every turn; a value no checkpoint can
hold would make that checkpoint fail on this turn and on every later one. So
what comes from outside the session's control is made storable as it enters:

- **text** from a tool's result, a tool's error or the model (content, tool-call
  arguments): a lone surrogate (what ``os.listdir`` returns for a file name whose
  bytes are not UTF-8) is backslash-escaped, ``'report-\\udcff.txt'`` becoming
  the text ``report-\\\\udcff.txt``;
- **integers** in a model's tool-call arguments beyond 64 bits: the call's
  arguments keep them as decimal text, and the call itself becomes an error the
  model sees (the tool is not run), so the model can send the value as a string.

A tool call whose JSON arguments an adapter could not read (``INVALID_ARGUMENTS``,
see ``actors.streaming``) is stored as it came and becomes an error the model
sees as well.

The user's own text is refused instead (``AgentHost.send`` raises before the
turn starts): a caller can fix it, a tool result cannot be sent back. Pure
functions, thread-safe; each returns its input unchanged when it is already
storable, so the common case costs one check.
"""

from __future__ import annotations

from typing import Any

from actors._codec import join_path
from actors.messages import Message, ToolCall
from actors.streaming import INVALID_ARGUMENTS

__all__ = ["storable_message", "storable_text", "user_text"]

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def storable_text(text: str) -> str:
    """``text`` with every lone surrogate backslash-escaped (itself when it has none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def user_text(text: str, name: str) -> str:
    """The user's ``text`` (a ``str`` checked by the caller) as a plain ``str`` a checkpoint
    can hold, or ``ValueError``: what a session's ``send`` and its steering queue take in.

    A ``str`` subclass becomes a plain copy (a checkpoint refuses the subclass). Text with a
    lone surrogate is refused, not escaped: the caller can fix it, and once in the history
    (or in the steering queue, which a failed turn fills again) it would fail every later
    checkpoint of the session.

    Raises:
        ValueError: ``text`` holds a lone surrogate; ``name`` says whose text it is.
    """
    if type(text) is not str:
        text = str.__str__(text)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} holds a lone surrogate at index {exc.start} ({text[exc.start]!r}), which "
            "no checkpoint can store; escape it first, e.g. "
            "text.encode('utf-8', 'backslashreplace').decode()"
        ) from None
    return text


def storable_message(message: Message) -> tuple[Message, dict[str, str]]:
    """A model's ``message`` made storable, and the calls whose arguments held an integer
    out of range: ``{call id: what to tell the model}`` (those calls are not run)."""
    content = message.content
    fixed_content = content if content is None else storable_text(content)
    calls, refused = [], {}
    for call in message.tool_calls:
        arguments, problem = _storable_value(call.arguments, "")
        if problem is not None:
            refused[call.id] = (
                f"error: argument {problem} is an integer beyond 64 bits, which this session "
                "cannot store; the tool was not run: send it as a string"
            )
        elif INVALID_ARGUMENTS in call.arguments:
            refused[call.id] = (
                "error: the arguments are not a JSON object; the tool was not run: call it "
                "again with its arguments as one JSON object"
            )
        calls.append(
            call if arguments is call.arguments else ToolCall(call.id, call.name, arguments)
        )
    if fixed_content is content and all(
        a is b for a, b in zip(calls, message.tool_calls, strict=True)
    ):
        return message, refused
    return Message(
        message.role, fixed_content, tuple(calls), message.tool_call_id, message.name
    ), refused


def _storable_value(value: Any, path: str) -> tuple[Any, str | None]:
    """``value`` made storable, and the path of its first out-of-range integer, if any."""
    if isinstance(value, str):
        return storable_text(value), None
    if isinstance(value, bool) or not isinstance(value, int | dict | list):
        return value, None
    if isinstance(value, int):
        if _INT_MIN <= value <= _INT_MAX:
            return value, None
        return str(value), repr(path or "value")
    items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    changed, problem = {}, None
    for key, item in items:
        fixed, found = _storable_value(item, join_path(path, key))
        problem = problem or found
        if fixed is not item:
            changed[key] = fixed
    if not changed:
        return value, problem
    if isinstance(value, dict):
        return {**value, **changed}, problem
    return [changed.get(i, item) for i, item in enumerate(value)], problem
