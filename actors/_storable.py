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
sees as well. Text of a ``str`` subclass (a ``StrEnum`` member) is stored as a
plain ``str``.

A response of the wrong types (``check_response``, ``storable_message``,
``check_provider_state``: a ``Message`` where a ``ModelResponse`` belongs, a message
whose role is not ``assistant``, an ``int`` call id, a set in the arguments, a float
token count, a provider state that is not a dict, a stop reason that is not a ``str``)
is a bug of the model's code, not an answer: it fails the turn with a
``TypeError`` naming the field, instead of entering a history that no
checkpoint, no resume or no provider could take.

The user's own text is refused instead (``AgentHost.send`` raises before the
turn starts): a caller can fix it, a tool result cannot be sent back. Pure
functions, thread-safe; each returns its input unchanged when it is already
storable, so the common case costs one check.
"""

from __future__ import annotations

from typing import Any

from actors._codec import INT_MAX, INT_MIN, join_path
from actors.messages import Message, ToolCall, Usage
from actors.model import ModelResponse
from actors.streaming import INVALID_ARGUMENTS

__all__ = [
    "check_provider_state",
    "check_response",
    "stop_reason_of",
    "storable_message",
    "storable_text",
    "user_text",
    "wrong_type",
]


def storable_text(text: str) -> str:
    """``text`` with every lone surrogate backslash-escaped (itself when it has none), as a
    plain ``str``: a subclass (a ``StrEnum`` member a tool returns) becomes a plain copy,
    since a checkpoint refuses it, and a history holding it would fail every later one."""
    if type(text) is not str:
        text = str.__str__(text)
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


def storable_message(message: Message) -> tuple[Message, dict[int, str]]:
    """A model's ``message`` made storable, and the calls not to run (arguments that held
    an integer out of range, or were not a JSON object): ``{position of the call in
    message.tool_calls: what to tell the model}``. By position, not id: a server may give
    every call the same id (``""``), and a refusal must reach its own call.

    Raises:
        TypeError: a field of the message has the wrong type (a model's bug, not its
            answer), naming the field: stored, it failed every later checkpoint, or made
            one no session could resume; failing the turn rolls it back.
    """
    _check_message(message)
    content = message.content
    fixed_content = content if content is None else storable_text(content)
    if not message.tool_calls:  # most answers: the text is all there is to make storable
        if fixed_content is content:
            return message, {}
        return Message(message.role, fixed_content, (), message.tool_call_id, message.name), {}
    calls: list[ToolCall] = []
    refused: dict[int, str] = {}
    for index, call in enumerate(message.tool_calls):
        arguments, problem = _storable_value(
            call.arguments, "", f"message.tool_calls[{index}].arguments"
        )
        if problem is not None:
            refused[index] = (
                f"error: argument {problem} is an integer beyond 64 bits, which this session "
                "cannot store; the tool was not run: send it as a string"
            )
        elif INVALID_ARGUMENTS in call.arguments:
            refused[index] = (
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


def wrong_type(field: str, value: object, must: str) -> TypeError:
    """The error for a model's response whose ``field`` is ``value`` instead of ``must``."""
    return TypeError(
        f"the model's response is malformed: {field} must be {must}, got "
        f"{type(value).__name__} ({value!r:.80})"
    )


def check_response(response: object) -> None:
    """Raise ``wrong_type`` if ``response`` is not a ``ModelResponse`` or its usage not a
    ``Usage`` of non-negative ``int`` counts: checked before the session adds the usage to
    its own, which every checkpoint holds (a float count saved well, then failed the
    resume). The message is checked by ``storable_message``, after ``after_model``."""
    if not isinstance(response, ModelResponse):
        raise wrong_type("the response", response, "a ModelResponse")
    usage = response.usage
    if not isinstance(usage, Usage):
        raise wrong_type("usage", usage, "a Usage")
    for name in _USAGE_FIELDS:
        count = getattr(usage, name)
        if type(count) is not int or count < 0:
            raise wrong_type(f"usage.{name}", count, "a non-negative int")


def check_provider_state(response: ModelResponse) -> None:
    """Raise ``wrong_type`` if ``response.provider_state`` is neither a dict nor ``None``.

    Checked on the response the session keeps (after ``after_model``): a bare continuation
    id (``"resp_1"``) or a list was kept, saved in every checkpoint and handed to the next
    request, and ``Snapshot.provider_state`` raised ``SnapshotDecodeError`` on each of the
    session's own snapshots."""
    state = response.provider_state
    if state is not None and not isinstance(state, dict):
        raise wrong_type("provider_state", state, "a dict or None")


def stop_reason_of(response: ModelResponse) -> str | None:
    """``response.stop_reason`` as a plain ``str`` (or ``None``), or ``wrong_type``.

    Checked on the response the session keeps (after ``after_model``): it is published
    with the ``model_response`` event, which a worker encodes to its host and a gateway
    to its clients; an SDK's enum or a live object there failed them far from the cause.
    A ``str`` subclass (a ``StrEnum`` member) becomes a plain copy, as text does."""
    reason = response.stop_reason
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise wrong_type("stop_reason", reason, "a str or None")
    return storable_text(reason)


_USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")


def _check_message(message: object) -> None:
    """Raise ``wrong_type`` for the first field of ``message`` of the wrong type."""
    if not isinstance(message, Message):
        raise wrong_type("message", message, "a Message")
    if message.role != "assistant":  # a user or tool message as the answer misled every request
        raise wrong_type("message.role", message.role, "'assistant'")
    if message.content is not None and not isinstance(message.content, str):
        raise wrong_type("message.content", message.content, "a str or None")
    for index, call in enumerate(message.tool_calls):
        where = f"message.tool_calls[{index}]"
        if not isinstance(call, ToolCall):
            raise wrong_type(where, call, "a ToolCall")
        for name, value in (("id", call.id), ("name", call.name)):
            if not isinstance(value, str):
                raise wrong_type(f"{where}.{name}", value, "a str")
        if not isinstance(call.arguments, dict):
            raise wrong_type(f"{where}.arguments", call.arguments, "a dict (a JSON object)")


def _storable_value(value: Any, path: str, root: str) -> tuple[Any, str | None]:
    """``value`` made storable, and the path of its first out-of-range integer, if any.

    Raises:
        TypeError: ``value`` holds what is not JSON (a set, an object, a key that is not a
            ``str``), named by its path below ``root``.
    """
    if isinstance(value, str):
        return storable_text(value), None
    if value is None or isinstance(value, bool):
        return value, None
    if isinstance(value, float):
        return (value if type(value) is float else float(value)), None
    if isinstance(value, int):
        if type(value) is not int:  # an IntEnum member: the plain number
            value = int(value)
        if INT_MIN <= value <= INT_MAX:
            return value, None
        return str(value), repr(path or "value")
    if not isinstance(value, dict | list | tuple):
        raise wrong_type(join_path(root, path) if path else root, value, "a JSON value")
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str:
                raise wrong_type(
                    f"a key of {join_path(root, path) if path else root}", key, "a str"
                )
        items = list(value.items())
    else:
        items = list(enumerate(value))
    changed, problem = {}, None
    for key, item in items:
        fixed, found = _storable_value(item, join_path(path, key), root)
        problem = problem or found
        if fixed is not item:
            changed[key] = fixed
    if not changed and type(value) in (dict, list, tuple):
        return value, problem
    if isinstance(value, dict):
        return {**value, **changed}, problem
    return [changed.get(i, item) for i, item in enumerate(value)], problem
