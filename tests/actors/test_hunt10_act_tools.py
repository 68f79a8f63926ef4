"""Tools whose body never runs, found by a bug hunt.

A session calls a tool on its own thread and takes what it returns as the result. A tool
that hands back a coroutine (an object with an ``async def __call__``, or a plain function
wrapping an ``async def`` one, as many decorators do) or a generator (a ``def`` with
``yield``) never ran its body: the model was told the call succeeded, with
``"<coroutine object ...>"`` as its result, and the coroutine leaked a "never awaited"
warning. Such a callable is refused where ``tool`` can tell (``ToolDefinitionError``),
and such a result fails the call (a tool error the model reads, ``ok`` false).

A tool also took its arguments as ``Tool.__call__(self, **arguments)``: a model's call
with an argument named ``self`` (an MCP server's tool may have one) failed with
"got multiple values for argument 'self'" instead of reaching the tool.

A ``Tool`` built by hand with a field of the wrong type (``parameters=None``) was taken,
then failed every model call of its sessions, naming neither the tool nor the field.

And a turn's last allowed model call (``max_steps``) that asked for tools had them run
before the turn failed with ``TurnLimitExceeded``: side effects whose results no model
call could read, for a turn rolled back (a retry ran them again).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from actors import (
    AgentSession,
    AgentTemplate,
    Message,
    ScriptedModel,
    Tool,
    ToolCall,
    ToolDefinitionError,
    TurnLimitExceeded,
    tool,
)


class _AsyncCallable:
    """A callable object whose ``__call__`` is a coroutine function."""

    async def __call__(self, x: int) -> int:
        return x


def _run_one_call(item: Tool, arguments: dict[str, Any]) -> tuple[str, bool]:
    """Run a session whose model calls ``item`` once; the tool message's text and ``ok``."""
    model = ScriptedModel(
        [Message.assistant(None, (ToolCall("c1", item.name, arguments),)), "done"]
    )
    ref = AgentSession.start(AgentTemplate(model=model, tools=[item]))
    try:
        proxy = ref.proxy()
        assert proxy.send("go").get(timeout=10).content == "done"
        results = [e for e in proxy.events().get(timeout=10).events if e.type == "tool_result"]
        tool_messages = [m for m in proxy.history().get(timeout=10) if m.role == "tool"]
    finally:
        ref.stop()
    assert len(results) == len(tool_messages) == 1
    assert results[0].data["content"] == tool_messages[0].content
    return tool_messages[0].content or "", bool(results[0].data["ok"])


def test_a_callable_object_with_an_async_call_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="async def"):
        tool(name="fetch")(_AsyncCallable())


def test_a_generator_function_is_refused() -> None:
    def numbers(n: int) -> Iterator[int]:
        yield from range(n)

    with pytest.raises(ToolDefinitionError, match="generator"):
        tool(numbers)


def test_a_tool_returning_a_coroutine_fails_the_call_without_a_warning() -> None:
    async def fetch(x: int) -> int:
        return x

    def wrapped(x: int) -> Any:  # what a decorator that forgot async def leaves
        return fetch(x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text, ok = _run_one_call(tool(name="fetch")(wrapped), {"x": 1})
        gc.collect()  # an unclosed coroutine warns when it is collected
    assert not ok
    assert text.startswith("error: TypeError: tool 'fetch' returned a coroutine")
    assert "never awaited" in text
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_a_tool_returning_a_generator_fails_the_call() -> None:
    ran: list[int] = []

    def body(n: int) -> Iterator[int]:
        ran.append(n)
        yield n

    def listing(n: int) -> Any:
        return body(n)

    text, ok = _run_one_call(tool(listing), {"n": 3})
    assert not ok
    assert text.startswith("error: TypeError: tool 'listing' returned a generator")
    assert ran == []


def test_an_argument_named_self_reaches_the_tool() -> None:
    seen: list[dict[str, Any]] = []

    def remote(**arguments: Any) -> str:  # as an MCP tool's function takes them
        seen.append(arguments)
        return "ok"

    schema = {"type": "object", "properties": {"self": {"type": "string"}}}
    text, ok = _run_one_call(Tool("who", "Who.", schema, remote), {"self": "me"})
    assert (text, ok) == ("ok", True)
    assert seen == [{"self": "me"}]


def test_a_turn_at_its_step_limit_runs_no_tool_whose_result_no_model_call_reads() -> None:
    # The last model call a turn may make (max_steps) asked for tools: they ran, then the
    # turn failed with TurnLimitExceeded and was rolled back. No model call could read
    # their results, yet their side effects happened (and a retry runs them again).
    ran: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        ran.append(amount)
        return "charged"

    call = Message.assistant(None, (ToolCall("c", "charge", {"amount": 5}),))
    model = ScriptedModel([call, call])
    ref = AgentSession.start(AgentTemplate(model=model, tools=[charge]), max_steps=2)
    try:
        proxy = ref.proxy()
        with pytest.raises(TurnLimitExceeded):
            proxy.send("pay").get(timeout=10)
        events = [e.type for e in proxy.events().get(timeout=10).events]
        assert proxy.history().get(timeout=10) == []
    finally:
        ref.stop()
    assert ran == [5]  # the first step's call only
    assert events.count("tool_call") == events.count("tool_result") == 1
    assert events[-1] == "error"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"parameters": None}, "parameters"),
        ({"parameters": '{"type": "object"}'}, "parameters"),
        ({"name": ""}, "name"),
        ({"name": None}, "name"),
        ({"description": None}, "description"),
        ({"fn": "not callable"}, "fn"),
    ],
)
def test_a_tool_built_by_hand_with_a_wrong_field_is_refused_where_it_is_built(
    fields: dict[str, Any], named: str
) -> None:
    # A Tool made directly (a dynamic tool) with parameters=None or JSON text was taken,
    # then failed every model call of its sessions ("'NoneType' object is not iterable"
    # from the adapter), naming neither the tool nor the field.
    good: dict[str, Any] = {
        "name": "lookup",
        "description": "Look up.",
        "parameters": {"type": "object", "properties": {}},
        "fn": lambda: "ok",
    }
    with pytest.raises(ToolDefinitionError, match=named):
        Tool(**{**good, **fields})
