"""Tool names the providers refuse are refused where the tool is made, found by a bug hunt.

OpenAI (function names) and Anthropic (tool names) both accept only ``^[a-zA-Z0-9_-]{1,64}$``
and the adapters send ``Tool.name`` as it is. A tool named ``notes.read`` or ``get weather``
(or a ``@tool`` lambda, named ``<lambda>``) was taken, and then every model call of every
session on its template failed with the provider's 400, far from the tool and its name. Now
``Tool(...)`` and ``tool(...)`` raise ``ToolDefinitionError`` naming the tool and the rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import ActorsError, AgentTemplate, Tool, ToolDefinitionError, tool

_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

_REFUSED = [
    "notes.read",
    "get weather",
    "a/b",
    "x" * 65,
    "café",  # a letter, but not an ASCII one
    "name\n",  # ``$`` of a regular expression would let a trailing newline through
    "\uff11\uff12",  # fullwidth digits: digits to Unicode, not to the providers
    "tool:call",
]


def _noop(**_: Any) -> None:
    return None


@pytest.mark.parametrize("name", _REFUSED)
def test_a_tool_made_by_hand_with_a_name_providers_refuse_is_refused(name: str) -> None:
    with pytest.raises(ToolDefinitionError) as info:
        Tool(name, "d", _SCHEMA, _noop)
    message = str(info.value)
    assert repr(name) in message
    assert "^[a-zA-Z0-9_-]{1,64}$" in message
    assert isinstance(info.value, ActorsError)


@pytest.mark.parametrize("name", _REFUSED)
def test_tool_refuses_a_name_passed_to_it(name: str) -> None:
    def f(a: int) -> int:
        return a

    with pytest.raises(ToolDefinitionError) as info:
        tool(name=name)(f)
    assert repr(name) in str(info.value)
    assert "^[a-zA-Z0-9_-]{1,64}$" in str(info.value)


@pytest.mark.parametrize("name", ["a", "x" * 64, "get_weather", "notes-read", "A1_b-2"])
def test_names_providers_accept_are_taken(name: str) -> None:
    assert Tool(name, "d", _SCHEMA, _noop).name == name

    def f(a: int) -> int:
        return a

    assert tool(name=name)(f).name == name


def test_a_lambda_is_refused_with_a_hint_to_name_it() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        tool(lambda a: a)
    message = str(info.value)
    assert "'<lambda>'" in message
    assert "^[a-zA-Z0-9_-]{1,64}$" in message
    assert "name=" in message


def test_a_lambda_given_a_name_is_a_tool() -> None:
    two = tool(name="two")(lambda: 2)

    assert two.name == "two"
    assert two() == 2


def test_a_function_whose_own_name_is_too_long_is_told_to_pass_name() -> None:
    def f(a: int) -> int:
        return a

    f.__name__ = "y" * 70
    with pytest.raises(ToolDefinitionError, match=r"name="):
        tool(f)
    assert tool(name="short")(f).name == "short"


def test_a_name_that_is_not_a_str_is_still_refused_as_before() -> None:
    with pytest.raises(ToolDefinitionError, match="non-empty str"):
        Tool(7, "d", _SCHEMA, _noop)  # type: ignore[arg-type]


def test_two_tools_of_one_name_in_a_template_are_refused() -> None:
    first = Tool("same", "d", _SCHEMA, _noop)
    second = Tool("same", "other", _SCHEMA, _noop)

    with pytest.raises(ValueError, match="two tools are named 'same'"):
        AgentTemplate(tools=[first, second])


@pytest.mark.parametrize("name", ["", 123], ids=repr)
def test_a_name_passed_that_is_no_name_is_refused_as_such(name: Any) -> None:
    # "" fell back to the function's name silently; 123 read as "has no __name__".
    def f(a: int) -> int:
        return a

    with pytest.raises(ToolDefinitionError, match=r"name must be a non-empty str"):
        tool(name=name)(f)
