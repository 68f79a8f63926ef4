"""Message, ToolCall and Usage: lossless round trips and every ``from_dict`` error path."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import InvalidMessage, Message, ToolCall, Usage
from actors.messages import Role

# Deterministic runs (same examples every time) and no example database in the repo.
DETERMINISTIC = settings(derandomize=True, database=None, deadline=None, max_examples=100)

ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

# Text msgpack and JSON can both carry: no lone surrogates (msgpack encodes UTF-8).
text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
# msgpack integers are 64-bit; NaN is excluded because NaN != NaN breaks equality.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | text
)
# Nested JSON-compatible values; lists, not tuples, since both codecs decode arrays as lists.
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)
tool_calls = st.builds(
    ToolCall,
    id=text,
    name=text,
    arguments=st.dictionaries(text, json_values, max_size=5),
)
messages = st.builds(
    Message,
    role=st.sampled_from(ROLES),
    content=st.none() | text,
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    tool_call_id=st.none() | text,
    name=st.none() | text,
)
counts = st.integers(min_value=0, max_value=2**60)  # sums of a few stay below MAX_TOKEN_COUNT
usages = st.builds(
    Usage,
    input_tokens=counts,
    output_tokens=counts,
    cached_input_tokens=counts,
    reasoning_tokens=counts,
)


def _via_msgpack(data: dict[str, Any]) -> Any:
    return msgpack.unpackb(msgpack.packb(data))


def _via_json(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


CODECS = (_via_msgpack, _via_json)


# -- round trips -------------------------------------------------------------------


@DETERMINISTIC
@given(message=messages)
def test_message_round_trips(message: Message) -> None:
    data = message.to_dict()
    assert Message.from_dict(data) == message
    for codec in CODECS:
        assert Message.from_dict(codec(data)) == message


@DETERMINISTIC
@given(call=tool_calls)
def test_tool_call_round_trips(call: ToolCall) -> None:
    data = call.to_dict()
    assert ToolCall.from_dict(data) == call
    for codec in CODECS:
        assert ToolCall.from_dict(codec(data)) == call


@DETERMINISTIC
@given(usage=usages)
def test_usage_round_trips(usage: Usage) -> None:
    data = usage.to_dict()
    assert data["total"] == usage.input_tokens + usage.output_tokens
    for restored in (Usage.from_dict(data), *(Usage.from_dict(c(data)) for c in CODECS)):
        assert restored == usage
        assert restored.total == usage.total


@pytest.mark.parametrize("role", ROLES)
def test_every_role_round_trips_with_every_optional_field(role: Role) -> None:
    call = ToolCall("c1", "lookup", {"q": "x", "deep": {"a": [1, 2.5, None, True]}})
    for message in (
        Message(role),
        Message(role, "hello"),
        Message(role, None, (call,)),
        Message(role, "result", tool_call_id="c1", name="lookup"),
    ):
        for codec in CODECS:
            assert Message.from_dict(codec(message.to_dict())) == message


def test_to_dict_omits_empty_optionals_and_keeps_content() -> None:
    assert Message.user("hi").to_dict() == {"role": "user", "content": "hi"}
    assert Message.assistant(None).to_dict() == {"role": "assistant", "content": None}
    call = ToolCall("c1", "add", {"a": 1})
    assert Message.tool(call, "2").to_dict() == {
        "role": "tool",
        "content": "2",
        "tool_call_id": "c1",
        "name": "add",
    }


def test_constructors_build_the_documented_roles() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    assert Message.system("s") == Message("system", "s")
    assert Message.user("u") == Message("user", "u")
    assert Message.assistant(None, (call,)) == Message("assistant", None, (call,))
    assert Message.tool(call, "1") == Message("tool", "1", tool_call_id="c1", name="add")


def test_tool_calls_given_as_list_are_stored_as_tuple() -> None:
    call = ToolCall("c1", "add")
    message = Message("assistant", None, [call])  # type: ignore[arg-type]
    assert message.tool_calls == (call,)
    assert isinstance(message.tool_calls, tuple)


def test_to_dict_does_not_share_arguments() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    out = call.to_dict()
    out["arguments"]["a"] = 99
    assert call.arguments == {"a": 1}


def test_constructor_rejects_unknown_role() -> None:
    with pytest.raises(InvalidMessage) as info:
        Message("robot")  # type: ignore[arg-type]
    assert info.value.field == "role"


# -- Usage arithmetic --------------------------------------------------------------


def test_usage_addition_and_total() -> None:
    total = Usage(3, 4) + Usage(10, 20)
    assert total == Usage(13, 24)
    assert total.total == 37
    assert Usage().total == 0
    assert Usage(1, 2) + Usage() == Usage(1, 2)


def test_usage_addition_with_non_usage_is_type_error() -> None:
    with pytest.raises(TypeError):
        Usage(1, 1) + 1  # type: ignore[operator]


@DETERMINISTIC
@given(a=usages, b=usages, c=usages)
def test_usage_addition_is_associative_and_commutative(a: Usage, b: Usage, c: Usage) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert (a + b).total == a.total + b.total


# -- from_dict error paths ---------------------------------------------------------


def _raises(cls: Any, data: object, field: str) -> InvalidMessage:
    with pytest.raises(InvalidMessage) as info:
        cls.from_dict(data)
    error = info.value
    assert isinstance(error, ValueError)
    assert error.field == field
    assert repr(field) in str(error)
    assert error.kind == cls.__name__
    return error


@pytest.mark.parametrize("cls", [Message, ToolCall, Usage])
@pytest.mark.parametrize("data", [None, [], "x", 3, ("role", "user")], ids=repr)
def test_from_dict_rejects_non_dict(cls: Any, data: object) -> None:
    error = _raises(cls, data, "<root>")
    assert type(data).__name__ in str(error)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param({"content": "x"}, "role", id="missing-role"),
        pytest.param({"role": "robot", "content": "x"}, "role", id="bad-role"),
        pytest.param({"role": None}, "role", id="null-role"),
        pytest.param({"role": 1}, "role", id="int-role"),
        pytest.param({"role": "user", "content": 5}, "content", id="int-content"),
        pytest.param({"role": "user", "content": ["a"]}, "content", id="list-content"),
        pytest.param({"role": "tool", "tool_call_id": 7}, "tool_call_id", id="int-tool-call-id"),
        pytest.param({"role": "tool", "name": b"x"}, "name", id="bytes-name"),
        pytest.param({"role": "assistant", "tool_calls": "c1"}, "tool_calls", id="str-calls"),
        pytest.param(
            {"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls", id="dict-calls"
        ),
        pytest.param({"role": "assistant", "tool_calls": None}, "tool_calls", id="null-calls"),
    ],
)
def test_message_from_dict_names_the_bad_field(data: dict[str, Any], field: str) -> None:
    _raises(Message, data, field)


def test_message_bad_role_lists_the_valid_roles() -> None:
    error = _raises(Message, {"role": "robot"}, "role")
    assert "'robot'" in str(error)
    for role in ROLES:
        assert role in str(error)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param({"name": "f"}, "id", id="missing-id"),
        pytest.param({"id": "c", "name": 3}, "name", id="int-name"),
        pytest.param({"id": "c", "name": "f", "arguments": [1]}, "arguments", id="list-args"),
    ],
)
def test_message_rejects_malformed_nested_tool_call(call: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        Message.from_dict({"role": "assistant", "tool_calls": [call]})
    assert info.value.kind == "ToolCall"
    assert info.value.field == field


def test_message_non_dict_tool_call_entry_names_tool_calls() -> None:
    with pytest.raises(InvalidMessage) as info:
        Message.from_dict({"role": "assistant", "tool_calls": [1]})
    assert "tool_calls" in str(info.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param({"name": "f"}, "id", id="missing-id"),
        pytest.param({"id": None, "name": "f"}, "id", id="null-id"),
        pytest.param({"id": 1, "name": "f"}, "id", id="int-id"),
        pytest.param({"id": "c"}, "name", id="missing-name"),
        pytest.param({"id": "c", "name": ["f"]}, "name", id="list-name"),
        pytest.param({"id": "c", "name": "f", "arguments": "{}"}, "arguments", id="str-args"),
        pytest.param({"id": "c", "name": "f", "arguments": None}, "arguments", id="null-args"),
        pytest.param({"id": "c", "name": "f", "arguments": [["a", 1]]}, "arguments", id="list"),
        pytest.param({"id": "c", "name": "f", "arguments": {1: "a"}}, "arguments", id="int-key"),
        pytest.param(
            {"id": "c", "name": "f", "arguments": {"a": 1, None: 2}}, "arguments", id="none-key"
        ),
        pytest.param({"id": "c", "name": "f", "arguments": {b"a": 1}}, "arguments", id="bytes-key"),
    ],
)
def test_tool_call_from_dict_names_the_bad_field(data: dict[Any, Any], field: str) -> None:
    _raises(ToolCall, data, field)


def test_tool_call_missing_arguments_defaults_to_empty() -> None:
    assert ToolCall.from_dict({"id": "c", "name": "f"}) == ToolCall("c", "f", {})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param({"input_tokens": -1, "output_tokens": 0}, "input_tokens", id="neg-input"),
        pytest.param({"input_tokens": 0, "output_tokens": -5}, "output_tokens", id="neg-output"),
        pytest.param({"input_tokens": True, "output_tokens": 0}, "input_tokens", id="bool-input"),
        pytest.param({"input_tokens": 0, "output_tokens": False}, "output_tokens", id="bool-out"),
        pytest.param({"input_tokens": 1.0, "output_tokens": 0}, "input_tokens", id="float-input"),
        pytest.param({"input_tokens": "1", "output_tokens": 0}, "input_tokens", id="str-input"),
        pytest.param({"input_tokens": None, "output_tokens": 0}, "input_tokens", id="null-input"),
        pytest.param({"input_tokens": 1, "output_tokens": 2, "total": 4}, "total", id="bad-total"),
        pytest.param({"input_tokens": 1, "output_tokens": 2, "total": "3"}, "total", id="str-tot"),
        pytest.param({"input_tokens": 1, "output_tokens": 2, "total": None}, "total", id="null"),
        pytest.param(
            {"input_tokens": 1, "output_tokens": 2, "cached_input_tokens": -1},
            "cached_input_tokens",
            id="neg-cached",
        ),
        pytest.param(
            {"input_tokens": 1, "output_tokens": 2, "reasoning_tokens": "1"},
            "reasoning_tokens",
            id="str-reasoning",
        ),
    ],
)
def test_usage_from_dict_names_the_bad_field(data: dict[str, Any], field: str) -> None:
    _raises(Usage, data, field)


def test_usage_inconsistent_total_says_what_it_should_be() -> None:
    error = _raises(Usage, {"input_tokens": 1, "output_tokens": 2, "total": 4}, "total")
    assert "4" in str(error)
    assert "3" in str(error)


def test_usage_without_total_is_accepted() -> None:
    assert Usage.from_dict({"input_tokens": 1, "output_tokens": 2}) == Usage(1, 2)


def test_usage_details_sum_and_default_to_zero_when_absent() -> None:
    # Usage written before snapshot schema 2 has no details: they read as 0.
    assert Usage.from_dict({"input_tokens": 5, "output_tokens": 1}) == Usage(5, 1, 0, 0)
    total = Usage(10, 4, cached_input_tokens=6, reasoning_tokens=3) + Usage(2, 1, 1, 0)
    assert total == Usage(12, 5, cached_input_tokens=7, reasoning_tokens=3)
    assert total.total == 17  # details are parts of input and output, not added again


_FULL = {
    "input_tokens": 5,
    "output_tokens": 3,
    "cached_input_tokens": 2,
    "reasoning_tokens": 1,
    "total": 8,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"input_tokens": True}, "input_tokens"),
        ({"output_tokens": -1}, "output_tokens"),
        ({"cached_input_tokens": 1.0}, "cached_input_tokens"),
        ({"reasoning_tokens": None}, "reasoning_tokens"),
        ({"total": 9}, "total"),
        ({"total": None}, "total"),
        ({"total": True}, "total"),
    ],
)
def test_usage_from_dict_checks_the_shape_to_dict_writes(
    change: dict[str, Any], field: str
) -> None:
    # The shape ``to_dict`` writes (every count and the total) is read by a fast path:
    # it refuses exactly what the field-by-field checks refuse, naming the field.
    assert Usage.from_dict(dict(_FULL)) == Usage(5, 3, 2, 1)
    _raises(Usage, {**_FULL, **change}, field)


@pytest.mark.parametrize("missing", ["input_tokens", "output_tokens"])
def test_usage_from_dict_rejects_missing_count(missing: str) -> None:
    data = {"input_tokens": 1, "output_tokens": 2}
    del data[missing]
    _raises(Usage, data, missing)


_CALL = ToolCall("c1", "lookup", {"key": "a"})
_LISTED: Any = [_CALL]  # calls in a list, not the tuple the signature says: made a tuple


@pytest.mark.parametrize(
    ("made", "built"),
    [
        (lambda: Message.system("be brief"), lambda: Message("system", "be brief")),
        (lambda: Message.user("hi"), lambda: Message("user", "hi")),
        (lambda: Message.assistant(None, (_CALL,)), lambda: Message("assistant", None, (_CALL,))),
        (lambda: Message.assistant("a", _LISTED), lambda: Message("assistant", "a", (_CALL,))),
        (
            lambda: Message.tool(_CALL, "A"),
            lambda: Message("tool", "A", tool_call_id="c1", name="lookup"),
        ),
    ],
)
def test_the_makers_build_what_the_constructor_builds(
    made: Callable[[], Message], built: Callable[[], Message]
) -> None:
    message, expected = made(), built()
    assert message == expected
    assert repr(message) == repr(expected)
    assert type(message.tool_calls) is tuple
    assert message.to_dict() == expected.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]


def test_a_subclass_maker_builds_the_subclass() -> None:
    class Tagged(Message):
        pass

    assert type(Tagged.user("hi")) is Tagged
    assert type(Tagged.assistant("a", _LISTED).tool_calls) is tuple
