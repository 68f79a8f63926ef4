"""Conversation values: ``Message``, ``ToolCall`` and ``Usage``.

All three are frozen dataclasses (immutable, hence safe to share between
threads) with ``to_dict``/``from_dict`` that round-trip losslessly through
msgpack and JSON, since they are what a snapshot persists. ``from_dict``
checks every field and raises ``InvalidMessage`` naming the one that is wrong,
because these dicts come from disk and from other processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from actors.errors import InvalidMessage

__all__ = ["Message", "Role", "ToolCall", "Usage"]

Role = Literal["system", "user", "assistant", "tool"]
_ROLES: frozenset[str] = frozenset(get_args(Role))


def _is_json(value: object) -> bool:
    """Whether ``value`` is JSON-compatible: what tool arguments may hold."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _require_mapping(kind: str, data: object) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InvalidMessage(kind, "<root>", f"must be a dict, got {type(data).__name__}")
    return data


def _get_str(kind: str, data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        need = "a string or null" if optional else "a string"
        raise InvalidMessage(kind, key, f"must be {need}, got {type(value).__name__}")
    return value


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _get_count(kind: str, data: Mapping[str, Any], key: str) -> int:
    if key not in data:
        raise InvalidMessage(kind, key, "is missing")
    value = data[key]
    if not isinstance(value, int) or not _is_count(value):
        raise InvalidMessage(kind, key, f"must be a non-negative integer, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to call one tool. Immutable and thread-safe.

    Attributes:
        id: Identifier the model gave the call; the tool's answer carries it back
            as ``Message.tool_call_id``.
        name: Name of the tool to call.
        arguments: Keyword arguments, JSON-compatible values only.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of this call, safe for msgpack and JSON."""
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: object) -> ToolCall:
        """Rebuild a call from ``to_dict`` output.

        Raises:
            InvalidMessage: a field is missing or of the wrong type.
        """
        d = _require_mapping("ToolCall", data)
        arguments = d.get("arguments", {})
        if not isinstance(arguments, Mapping) or not _is_json(arguments):
            raise InvalidMessage(
                "ToolCall", "arguments", "must be a JSON object (str keys, JSON-compatible values)"
            )
        return cls(
            id=_get_str("ToolCall", d, "id"),
            name=_get_str("ToolCall", d, "name"),
            arguments=dict(arguments),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation. Immutable and thread-safe.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: The text; ``None`` for an assistant message that only calls tools.
        tool_calls: Calls an assistant message asks for, in order.
        tool_call_id: On a ``tool`` message, the id of the call it answers.
        name: On a ``tool`` message, the tool's name; otherwise an optional author name.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidMessage("Message", "role", f"must be one of {sorted(_ROLES)}")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    # The four makers build a ``Message`` as its constructor would, without the frozen
    # dataclass's per-field ``object.__setattr__`` (``_made``): a session makes one for
    # each user text, tool result and model answer. A subclass goes through its own.

    @classmethod
    def system(cls, content: str) -> Message:
        """A system (instructions) message."""
        if cls is Message:
            return _made("system", content, (), None, None)
        return cls("system", content)

    @classmethod
    def user(cls, content: str) -> Message:
        """A user message."""
        if cls is Message:
            return _made("user", content, (), None, None)
        return cls("user", content)

    @classmethod
    def assistant(cls, content: str | None, tool_calls: tuple[ToolCall, ...] = ()) -> Message:
        """An assistant message, optionally asking for tool calls."""
        if cls is Message and type(tool_calls) is tuple:
            return _made("assistant", content, tool_calls, None, None)
        return cls("assistant", content, tool_calls)

    @classmethod
    def tool(cls, call: ToolCall, content: str) -> Message:
        """The answer of a tool to ``call``."""
        if cls is Message:
            return _made("tool", content, (), call.id, call.name)
        return cls("tool", content, tool_call_id=call.id, name=call.name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of this message, safe for msgpack and JSON; empty optionals omitted."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: object) -> Message:
        """Rebuild a message from ``to_dict`` output.

        Raises:
            InvalidMessage: a field is missing, of the wrong type, or the role is unknown.
        """
        if cls is Message and type(data) is dict and data.keys() <= _MESSAGE_KEYS:
            message = _exact_message(data)
            if message is not None:
                return message
        d = _require_mapping("Message", data)
        role = d.get("role")
        if not isinstance(role, str) or role not in _ROLES:  # (a list is not even hashable)
            raise InvalidMessage(
                "Message", "role", f"must be one of {sorted(_ROLES)}, got {role!r}"
            )
        raw_calls = d.get("tool_calls", [])
        if not isinstance(raw_calls, list | tuple):
            raise InvalidMessage("Message", "tool_calls", "must be a list")
        for index, raw in enumerate(raw_calls):
            if not isinstance(raw, Mapping):
                raise InvalidMessage(
                    "Message", f"tool_calls[{index}]", f"must be a dict, got {type(raw).__name__}"
                )
        return cls(
            role=cast(Role, role),
            content=_get_str("Message", d, "content", optional=True),
            tool_calls=tuple(ToolCall.from_dict(c) for c in raw_calls),
            tool_call_id=_get_str("Message", d, "tool_call_id", optional=True),
            name=_get_str("Message", d, "name", optional=True),
        )


_MESSAGE_KEYS = frozenset(("role", "content", "tool_calls", "tool_call_id", "name"))
_CALL_KEYS = frozenset(("id", "name", "arguments"))
_new = object.__new__


def _exact_call(data: object) -> ToolCall | None:
    """``ToolCall.from_dict`` of an exactly typed dict (what ``to_dict`` writes), or ``None``
    for the general path to check."""
    if type(data) is not dict or not data.keys() <= _CALL_KEYS:
        return None
    call_id, name, arguments = data.get("id"), data.get("name"), data.get("arguments", {})
    if type(call_id) is not str or type(name) is not str or type(arguments) is not dict:
        return None
    return _made_call(call_id, name, dict(arguments)) if _is_json(arguments) else None


def _exact_message(data: dict[str, Any]) -> Message | None:
    """``Message.from_dict`` of a dict whose fields are exactly typed (what ``to_dict``
    writes), or ``None`` for the general path to check and name what is wrong.

    A resumed session rebuilds its whole history: this path builds a message at
    about a third of the general path's cost.
    """
    role = data.get("role")
    content = data.get("content")
    call_id = data.get("tool_call_id")
    name = data.get("name")
    if not (
        type(role) is str
        and role in _ROLES
        and (content is None or type(content) is str)
        and (call_id is None or type(call_id) is str)
        and (name is None or type(name) is str)
    ):
        return None
    calls: tuple[ToolCall, ...] = ()
    if "tool_calls" in data:
        raw_calls = data["tool_calls"]
        if type(raw_calls) is not list:
            return None
        calls = tuple(map(_exact_call, raw_calls))  # type: ignore[arg-type]  # Nones: below
        if None in calls:
            return None
    return _made(role, content, calls, call_id, name)


# The slots' own setters: a frozen dataclass's fields, set without its ``__setattr__``.
_SET_ROLE, _SET_CONTENT, _SET_CALLS, _SET_CALL_ID, _SET_NAME = (
    Message.__dict__[name].__set__
    for name in ("role", "content", "tool_calls", "tool_call_id", "name")
)


_SET_ID, _SET_CALL_NAME, _SET_ARGUMENTS = (
    ToolCall.__dict__[name].__set__ for name in ("id", "name", "arguments")
)


def _made_call(call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    """A ``ToolCall`` of fields already checked."""
    call: ToolCall = _new(ToolCall)
    _SET_ID(call, call_id)
    _SET_CALL_NAME(call, name)
    _SET_ARGUMENTS(call, arguments)
    return call


def _made(
    role: str,
    content: str | None,
    calls: tuple[ToolCall, ...],
    call_id: str | None,
    name: str | None,
) -> Message:
    """A ``Message`` of fields already checked (``__post_init__``'s work is done)."""
    message: Message = _new(Message)
    _SET_ROLE(message, role)
    _SET_CONTENT(message, content)
    _SET_CALLS(message, calls)
    _SET_CALL_ID(message, call_id)
    _SET_NAME(message, name)
    return message


def checked_message(data: dict[str, Any]) -> Message:
    """The ``Message`` that ``Message.from_dict(data)`` returns, for a ``data`` already
    checked to be exactly typed (``actors._restored`` checks a whole history at once).

    Checks nothing itself: call it only on what such a check accepted.
    """
    raw_calls = data.get("tool_calls")
    calls: tuple[ToolCall, ...] = ()
    if raw_calls:
        calls = tuple(
            [_made_call(c["id"], c["name"], dict(c.get("arguments", {}))) for c in raw_calls]
        )
    return _made(
        data["role"], data.get("content"), calls, data.get("tool_call_id"), data.get("name")
    )


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call or, summed with ``+``, of a whole session.

    Immutable and thread-safe. The two details are parts of the counts they
    refine, as providers bill them: ``cached_input_tokens`` of
    ``input_tokens``, ``reasoning_tokens`` of ``output_tokens``.

    Every count is checked when the usage is built: a count that is not a non-negative
    ``int`` (a float, a bool, ``None``, a negative number) is refused there, naming the
    field, instead of breaking a sum, a metric or a checkpoint later. An ``int``
    subclass is kept as a plain ``int``.

    Attributes:
        input_tokens: Prompt tokens, cached ones included.
        output_tokens: Generated tokens, reasoning included.
        cached_input_tokens: Prompt tokens read from the provider's prompt cache
            (billed cheaper).
        reasoning_tokens: Generated tokens the model spent reasoning, not shown
            in its answer.

    Raises:
        TypeError: a count is not an ``int`` (``bool`` included).
        ValueError: a count is negative.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    def __post_init__(self) -> None:
        for name in _USAGE_COUNTS:
            value = getattr(self, name)
            if type(value) is int:
                if value < 0 or value > MAX_TOKEN_COUNT:
                    raise _count_error(name, value)
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(
                    f"Usage.{name} must be a non-negative int, got {_shown(value)} "
                    f"({type(value).__name__})"
                )
            count = int(value)  # an int subclass (an IntEnum...): kept as a plain int
            if count < 0 or count > MAX_TOKEN_COUNT:
                raise _count_error(name, count)
            object.__setattr__(self, name, count)

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # Sums of checked counts, held at MAX_TOKEN_COUNT: a session's usage is never rolled
        # back, and one past what a checkpoint stores would fail every later checkpoint.
        i = self.input_tokens + other.input_tokens
        o = self.output_tokens + other.output_tokens
        c = self.cached_input_tokens + other.cached_input_tokens
        r = self.reasoning_tokens + other.reasoning_tokens
        if max(i, o, c, r) > MAX_TOKEN_COUNT:  # (one call, not four: a sum per model call)
            top = MAX_TOKEN_COUNT
            i, o, c, r = min(i, top), min(o, top), min(c, top), min(r, top)
        return _made_usage(i, o, c, r)

    def to_dict(self) -> dict[str, int]:
        """Plain dict with every count and the total."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total": self.total,
        }

    @classmethod
    def from_dict(cls, data: object) -> Usage:
        """Rebuild usage from ``to_dict`` output; ``total``, when present, must be consistent.

        ``cached_input_tokens`` and ``reasoning_tokens`` may be absent (0): usage
        written before snapshot schema 2 has neither (its migration adds them).

        Raises:
            InvalidMessage: a count is missing, negative, not an integer, or the total disagrees.
        """
        if type(data) is dict:  # the usual case, what ``to_dict`` made: checked in one go
            i, o = data.get("input_tokens"), data.get("output_tokens")
            c, r = data.get("cached_input_tokens"), data.get("reasoning_tokens")
            t = data.get("total")
            if (
                type(i) is int
                and type(o) is int
                and type(c) is int
                and type(r) is int
                and min(i, o, c, r) >= 0
                and ((t is None and "total" not in data) or (type(t) is int and t == i + o))
            ):
                return _made_usage(i, o, c, r) if cls is Usage else cls(i, o, c, r)
        d = _require_mapping("Usage", data)  # anything else: the checks that name the problem
        usage = cls(
            _get_count("Usage", d, "input_tokens"),
            _get_count("Usage", d, "output_tokens"),
            _get_count("Usage", d, "cached_input_tokens") if "cached_input_tokens" in d else 0,
            _get_count("Usage", d, "reasoning_tokens") if "reasoning_tokens" in d else 0,
        )
        if "total" in d and (not _is_count(d["total"]) or d["total"] != usage.total):
            raise InvalidMessage(
                "Usage", "total", f"is {d['total']!r} but input + output is {usage.total}"
            )
        return usage


_USAGE_COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")

_SET_COUNTS = tuple(Usage.__dict__[name].__set__ for name in _USAGE_COUNTS)


MAX_TOKEN_COUNT = 2**63 - 1
"""The largest count a ``Usage`` holds: far past any real one, and every count (and the
total of two) stays one a checkpoint's msgpack stores (64 bits)."""


def _count_error(name: str, value: int) -> ValueError:
    return ValueError(
        f"Usage.{name} must be a non-negative int of at most 2**63 - 1, got {_shown(value)}"
    )


def _made_usage(i: int, o: int, c: int, r: int) -> Usage:
    """A ``Usage`` of counts already checked (``__post_init__``'s work is done)."""
    usage: Usage = _new(Usage)
    set_i, set_o, set_c, set_r = _SET_COUNTS
    set_i(usage, i)
    set_o(usage, o)
    set_c(usage, c)
    set_r(usage, r)
    return usage


def _shown(value: object) -> str:
    """``repr(value)`` cut to 60 characters (or a placeholder if it raises), for an error."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    return text if len(text) <= 60 else f"{text[:57]}..."


for _cls in (ToolCall, Message, Usage):
    _cls.__module__ = "actors"
