"""``@tool``: JSON schemas from signatures and docstrings, and ``Tool`` itself.

No ``from __future__ import annotations`` here on purpose: the hints are real
objects, as in most user code (the session tests cover string annotations).
"""

import dataclasses
import typing
from collections import abc
from typing import Any, Literal, Optional

import pytest

from actors import ActorsError, Tool, ToolDefinitionError, tool


def test_scalar_parameters() -> None:
    @tool
    def f(s: str, i: int, x: float, b: bool) -> str:
        """Do things."""
        return ""

    assert f.name == "f"
    assert f.description == "Do things."
    assert f.parameters == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "x": {"type": "number"},
            "b": {"type": "boolean"},
        },
        "required": ["s", "i", "x", "b"],
    }


def test_defaults_are_optional_and_recorded() -> None:
    @tool
    def f(q: str, limit: int = 10, scale: float = 0.5, exact: bool = False, tag: str = "x") -> str:
        return q

    props = f.parameters["properties"]
    assert f.parameters["required"] == ["q"]
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["scale"] == {"type": "number", "default": 0.5}
    assert props["exact"] == {"type": "boolean", "default": False}
    assert props["tag"] == {"type": "string", "default": "x"}


def test_non_plain_default_is_not_recorded() -> None:
    @tool
    def f(items: list[int] = [1, 2]) -> None:  # noqa: B006
        return None

    assert f.parameters["properties"]["items"] == {"type": "array", "items": {"type": "integer"}}
    assert "required" not in f.parameters


@pytest.mark.parametrize("style", ["pipe", "optional"])
def test_optional_parameters(style: str) -> None:
    if style == "pipe":

        def f(n: int | None = None) -> None:
            return None

    else:

        def f(n: Optional[int] = None) -> None:  # noqa: UP045
            return None

    made = tool(f)
    assert made.parameters == {
        "type": "object",
        "properties": {
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        },
    }


def test_required_optional_without_default() -> None:
    @tool
    def f(n: str | None) -> None:
        return None

    assert f.parameters["required"] == ["n"]
    assert f.parameters["properties"]["n"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}


def test_union_of_scalars() -> None:
    @tool
    def f(v: int | str) -> None:
        return None

    assert f.parameters["properties"]["v"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}


def test_literal_becomes_enum() -> None:
    @tool
    def f(unit: Literal["c", "f"] = "c", level: Literal[1, 2, 3] = 1) -> None:
        return None

    props = f.parameters["properties"]
    assert props["unit"] == {"enum": ["c", "f"], "default": "c"}
    assert props["level"] == {"enum": [1, 2, 3], "default": 1}


def test_containers() -> None:
    @tool
    def f(
        *,
        ids: list[int],
        weights: dict[str, float],
        names: list[str],
        anything: list,  # type: ignore[type-arg]
        mapping: dict,  # type: ignore[type-arg]
        seq: tuple[int, ...],
        nested: list[dict[str, list[bool]]],
    ) -> None:
        return None

    props = f.parameters["properties"]
    assert props["ids"] == {"type": "array", "items": {"type": "integer"}}
    assert props["weights"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["names"] == {"type": "array", "items": {"type": "string"}}
    assert props["anything"] == {"type": "array"}
    assert props["mapping"] == {"type": "object"}
    assert props["seq"] == {"type": "array"}
    assert props["nested"] == {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "boolean"}},
        },
    }


def test_any_is_unconstrained() -> None:
    @tool
    def f(value: Any) -> None:
        return None

    assert f.parameters["properties"]["value"] == {}


def test_no_parameters() -> None:
    @tool
    def now() -> str:
        """The current time."""
        return "noon"

    assert now.parameters == {"type": "object", "properties": {}}
    assert "required" not in now.parameters
    assert now() == "noon"


def test_keyword_only_parameters_are_allowed() -> None:
    @tool
    def f(*, a: int, b: int = 2) -> int:
        return a + b

    assert f.parameters["required"] == ["a"]
    assert f(a=1) == 3


def test_google_docstring_gives_description_and_argument_docs() -> None:
    @tool
    def weather(city: str, unit: Literal["c", "f"] = "c", days: int = 1) -> str:
        """Get the weather forecast
        for a city.

        Longer explanation that is not part of the summary.

        Args:
            city: The city name, e.g. Paris.
            unit (str): Temperature unit.
            days: How many days ahead.

        Returns:
            A short forecast.
        """
        return city

    assert weather.description == "Get the weather forecast for a city."
    props = weather.parameters["properties"]
    assert props["city"]["description"] == "The city name, e.g. Paris."
    assert props["unit"]["description"] == "Temperature unit."
    assert props["days"]["description"] == "How many days ahead."
    assert props["unit"]["enum"] == ["c", "f"]


def test_docstring_args_stop_at_next_section() -> None:
    @tool
    def f(a: int) -> int:
        """Summary.

        Args:
            a: The number.

        Raises:
            b: not a parameter.
        """
        return a

    assert f.parameters["properties"]["a"]["description"] == "The number."
    assert set(f.parameters["properties"]) == {"a"}


def test_an_argument_description_over_several_lines_is_kept_whole() -> None:
    @tool
    def read(path: str, limit: int = 100) -> str:
        """Read a file.

        Args:
            path: The file to read, relative to the project root;
                never an absolute path: those are refused.
            limit: At most this many lines.
        """
        return path

    props = read.parameters["properties"]
    assert props["path"]["description"] == (
        "The file to read, relative to the project root; never an absolute path: those are refused."
    )
    assert props["limit"]["description"] == "At most this many lines."
    assert set(props) == {"path", "limit"}


def test_no_docstring_gives_empty_description() -> None:
    @tool
    def f(a: int) -> int:
        return a

    assert f.description == ""
    assert "description" not in f.parameters["properties"]["a"]


def test_custom_name_and_description() -> None:
    @tool(name="sum_two", description="Sum of two numbers.")
    def add(a: int, b: int) -> int:
        """Ignored summary."""
        return a + b

    assert add.name == "sum_two"
    assert add.description == "Sum of two numbers."
    assert add(a=2, b=3) == 5


def test_custom_name_keeps_docstring_description() -> None:
    @tool(name="renamed")
    def f(a: int) -> int:
        """Original summary."""
        return a

    assert f.name == "renamed"
    assert f.description == "Original summary."


def test_tool_call_and_schema() -> None:
    @tool
    def greet(name: str, punctuation: str = "!") -> str:
        """Greet someone."""
        return f"hello {name}{punctuation}"

    assert isinstance(greet, Tool)
    assert greet(name="ada") == "hello ada!"
    assert greet(name="ada", punctuation="?") == "hello ada?"
    assert greet.schema() == {
        "name": "greet",
        "description": "Greet someone.",
        "parameters": greet.parameters,
    }
    with pytest.raises(TypeError):
        greet(nobody="x")


def test_closures_are_tools() -> None:
    calls: list[int] = []

    def make_counter(step: int) -> Tool:
        @tool
        def bump(by: int = 1) -> int:
            """Bump the counter."""
            calls.append(by * step)
            return sum(calls)

        return bump

    tens, ones = make_counter(10), make_counter(1)
    assert tens(by=2) == 20
    assert ones() == 21
    assert calls == [20, 1]
    assert tens.parameters == ones.parameters


def test_tool_is_immutable_and_compares_without_fn() -> None:
    @tool
    def f(a: int) -> int:
        return a

    with pytest.raises(dataclasses.FrozenInstanceError):
        f.name = "g"  # type: ignore[misc]
    other = Tool(f.name, f.description, f.parameters, lambda **_: None)
    assert other == f
    assert "fn" not in repr(f)


# -- definition errors -------------------------------------------------------------


def _definition_error(fn: Any) -> ToolDefinitionError:
    with pytest.raises(ToolDefinitionError) as info:
        tool(fn)
    error = info.value
    assert isinstance(error, TypeError)
    assert isinstance(error, ActorsError)
    return error


def test_missing_type_hint() -> None:
    def f(a: int, b) -> int:  # type: ignore[no-untyped-def]
        return a

    error = _definition_error(f)
    assert "'f'" in str(error)
    assert "'b'" in str(error)
    assert "type hint" in str(error)


def test_var_positional_and_keyword_rejected() -> None:
    def star(*args: int) -> None:
        return None

    def kwargs(**options: int) -> None:
        return None

    def positional(a: int, /) -> None:
        return None

    assert "'args'" in str(_definition_error(star))
    assert "'options'" in str(_definition_error(kwargs))
    assert "'a'" in str(_definition_error(positional))


class Opaque:
    pass


@pytest.mark.parametrize(
    "hint",
    [Opaque, bytes, set[int], list[Opaque], dict[str, bytes], int | Opaque],
    ids=["class", "bytes", "set", "list-of-class", "dict-of-bytes", "union-with-class"],
)
def test_unsupported_type(hint: Any) -> None:
    def f(value: int) -> None:
        return None

    f.__annotations__["value"] = hint
    error = _definition_error(f)
    assert "'value'" in str(error)
    assert "has no JSON schema" in str(error)


def test_unresolvable_forward_reference() -> None:
    def f(value: "NoSuchType") -> None:  # type: ignore[name-defined]  # noqa: F821
        return None

    error = _definition_error(f)
    assert "cannot resolve type hints" in str(error)


def test_decorator_form_reports_custom_name() -> None:
    with pytest.raises(ToolDefinitionError, match="'custom'"):

        @tool(name="custom")
        def f(*args: int) -> None:
            return None


def test_abstract_containers_and_fixed_tuples() -> None:
    # typing.Sequence/Mapping and their collections.abc forms are what typed code takes;
    # a fixed-length tuple types each position, so the model is not told (str, int) is
    # two integers.
    @tool
    def f(
        *,
        tags: typing.Sequence[str],
        more: abc.Sequence[int],
        limits: typing.Mapping[str, int],
        pair: tuple[int, str],
    ) -> None:
        return None

    props = f.parameters["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["more"] == {"type": "array", "items": {"type": "integer"}}
    assert props["limits"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
