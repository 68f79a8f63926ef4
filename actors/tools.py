"""Tools a model may call, and the ``@tool`` decorator that describes them.

The JSON schema of a tool's parameters is built from the function's signature
and type hints, and its description from the docstring, so a plain Python
function becomes a tool with one line. Tools may be closures over live objects:
they belong to the agent template and are never serialized.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import types
import typing
from collections import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from actors.errors import ToolDefinitionError

__all__ = ["Tool", "tool"]

_NAME_RULE = "^[a-zA-Z0-9_-]{1,64}$"
"""The tool names OpenAI (function names) and Anthropic (tool names) accept; the adapters
send ``Tool.name`` as it is, so a name outside it failed every model call of a session."""

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""``_NAME_RULE`` for ``fullmatch`` (``$`` would let a trailing newline through)."""

_NAME_HELP = (
    f"names must match {_NAME_RULE} (1 to 64 ASCII letters, digits, '_' or '-'), "
    "the rule OpenAI and Anthropic hold tool names to"
)


def _name_problem(name: str) -> str | None:
    """What is wrong with tool name ``name`` for the providers, or ``None`` if nothing."""
    if TOOL_NAME.fullmatch(name):
        return None
    if len(name) > 64:
        return f"it has {len(name)} characters; {_NAME_HELP}"
    return _NAME_HELP


_SCALARS: dict[object, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    Any: {},
}


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may ask for, with its name, description and JSON schema.

    Immutable; calling it is as thread-safe as the wrapped function. Built by hand (a
    dynamic tool), its fields are checked (``ToolDefinitionError`` naming the wrong one).

    Attributes:
        name: What the model calls it: 1 to 64 ASCII letters, digits, ``_`` or ``-``
            (``^[a-zA-Z0-9_-]{1,64}$``, what OpenAI and Anthropic accept).
        description: What it does, for the model.
        parameters: JSON schema of its keyword arguments; its top must say
            ``"type": "object"`` (what Anthropic and OpenAI require of a tool's input).
        fn: The function run with the call's arguments.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any] = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        """Refuse a field of the wrong type, or a name the providers refuse, where the tool
        is built (a tool made by hand): taken, it failed every model call of its sessions,
        in the adapter or at the provider, naming neither the tool nor the field
        (``parameters=None``: "'NoneType' object is not iterable"; ``name="notes.read"``
        or a ``parameters`` schema whose top ``type`` is not ``"object"``: the
        provider's 400).

        Raises:
            ToolDefinitionError: naming the field (for the name, the rule it breaks).
        """
        if not isinstance(self.name, str) or not self.name:
            raise ToolDefinitionError(f"a tool's name must be a non-empty str, got {self.name!r}")
        where = f"tool {self.name!r}"
        problem = _name_problem(self.name)
        if problem is not None:
            raise ToolDefinitionError(f"{where}: a name the providers refuse: {problem}")
        if not isinstance(self.description, str):
            raise ToolDefinitionError(
                f"{where}: description must be a str, got {type(self.description).__name__}"
            )
        if not isinstance(self.parameters, Mapping):
            raise ToolDefinitionError(
                f"{where}: parameters must be a JSON schema as a mapping "
                f"({{'type': 'object', 'properties': ...}}), got "
                f"{type(self.parameters).__name__} {self.parameters!r:.60}"
            )
        if self.parameters.get("type") != "object":
            raise ToolDefinitionError(
                f'{where}: parameters must be a JSON schema with "type": "object" at '
                "its top (the tool's keyword arguments), which Anthropic and OpenAI require "
                f"of a tool's input, got {_top_type(self.parameters)}"
            )
        if not callable(self.fn):
            raise ToolDefinitionError(f"{where}: fn must be callable, got {self.fn!r:.60}")

    def __call__(self, /, **arguments: Any) -> Any:
        """Run the tool with keyword ``arguments`` (``self`` among them: an MCP tool may
        take one) and return what it returned.

        Raises:
            TypeError: the function returned a coroutine or a generator, so its body never
                ran (a session neither awaits nor iterates a tool's result); it is closed,
                and the model reads the error instead of an object's ``repr`` as a result.
        """
        result = self.fn(**arguments)
        if isinstance(result, _UNRUN):
            raise _unrun(self.name, result)
        return result

    def schema(self) -> dict[str, Any]:
        """The tool in the function-calling shape most model APIs accept."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def _top_type(schema: Mapping[str, Any]) -> str:
    """The top ``type`` of ``schema`` in words, for an error."""
    if "type" not in schema:
        return 'no "type"'
    return f'"type": {schema["type"]!r:.40}'


_UNRUN = (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)
"""Results whose code has not run: what a tool returned instead of doing its work."""


def _unrun(name: str, result: Any) -> TypeError:
    """The error for tool ``name`` that returned ``result``, one of ``_UNRUN``, closed now
    (an unclosed coroutine warns "never awaited" when it is collected)."""
    if isinstance(result, types.AsyncGeneratorType):
        what, fix = "an async generator", "define it with def and return a list"
    else:
        result.close()
        if isinstance(result, types.CoroutineType):
            what = "a coroutine"
            fix = "define it with def (run what it awaits with asyncio.run, or a loop of your own)"
        else:
            what, fix = "a generator", "return a list instead of yielding"
    return TypeError(
        f"tool {name!r} returned {what}, which the session never awaited or iterated, so "
        f"the tool did not run: {fix}"
    )


def _type_schema(hint: Any, where: str) -> dict[str, Any]:
    """JSON schema for one type hint; ``where`` names the parameter for errors."""
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a, where) for a in args]
        return options[0] if len(options) == 1 else {"anyOf": options}
    # ``typing.Sequence[int]`` and ``typing.Mapping[...]`` have the ``collections.abc``
    # classes as their origin, as the ``collections.abc`` forms do.
    if hint in (list, tuple, abc.Sequence) or origin in (list, tuple, abc.Sequence):
        schema: dict[str, Any] = {"type": "array"}
        if origin is tuple and args and args[-1] is not Ellipsis:
            # A fixed-length tuple: each position has its own type.
            schema["prefixItems"] = [_type_schema(a, where) for a in args]
            schema["minItems"] = schema["maxItems"] = len(args)
        elif args and args[-1] is not Ellipsis:
            schema["items"] = _type_schema(args[0], where)
        return schema
    if hint in (dict, abc.Mapping) or origin in (dict, abc.Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _type_schema(args[1], where)
        return schema
    raise ToolDefinitionError(
        f"{where}: type {hint!r} has no JSON schema; use str, int, float, bool, "
        "None, Literal, list, tuple, Sequence, dict, Mapping or a union of these"
    )


def _json_default(value: object) -> bool:
    """Whether a parameter's default goes into its schema: ``None``, a ``str``, ``int`` or
    ``bool``, or a finite ``float``. ``inf`` and ``nan`` have no JSON spelling: a schema
    holding one was sent as ``Infinity``, which a provider refuses on every call."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary paragraph and per-argument descriptions of a Google-style docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_SECTION.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    in_args = False
    current: str | None = None  # the argument whose description may go on
    indent = 0  # its line's indentation: deeper lines continue its description
    for line in lines:
        depth = len(line) - len(line.lstrip())
        if _ARGS_SECTION.match(line):
            in_args = True
        elif in_args and line and not line[0].isspace():
            in_args = False
        elif in_args and current is not None and line.strip() and depth > indent:
            described[current] += " " + line.strip()
        elif in_args and (match := _ARG_LINE.match(line)):
            current, indent = match.group(1), depth
            described[current] = match.group(2).strip()
        else:
            current = None
    return " ".join(summary), described


def _annotated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Where ``fn``'s type hints are: itself, or for a ``functools.partial`` the function
    it wraps, or for a callable object its class's ``__call__`` (``get_type_hints`` of
    either object itself raised, though its signature is what a model calls)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - the class's, for its hints
    return call if call is not None else fn


def _check_runs(fn: Callable[..., Any], where: str) -> None:
    """Refuse ``fn`` if calling it would not run its body: an ``async def`` function (or an
    object whose ``__call__`` is one) returns a coroutine, a generator function a generator.
    Tools run on the session's thread and their result is taken as it is: such a tool never
    ran, and the model got ``<coroutine object ...>`` as its result (``Tool.__call__`` fails
    such a result too, for a wrapper this cannot see through)."""
    code = _annotated(fn)
    for candidate in (fn, code):
        if inspect.iscoroutinefunction(candidate) or inspect.isasyncgenfunction(candidate):
            raise ToolDefinitionError(
                f"{where}: an async def function cannot be a tool, since tools are called on "
                "the session's thread and never awaited; define it with def (and run what it "
                "awaits with asyncio.run, or a loop of your own)"
            )
        if inspect.isgeneratorfunction(candidate):
            raise ToolDefinitionError(
                f"{where}: a generator function (a def with yield) cannot be a tool, since "
                "the session never iterates a tool's result, so its body would never run; "
                "return a list instead"
            )


def _tool_name(fn: Callable[..., Any], name: object) -> str:
    """The name of ``fn``'s tool: ``name`` when given, else ``fn.__name__``; refused (with
    the fix) if it is not one the providers accept (``_NAME_RULE``), before anything else
    about ``fn`` is looked at: a lambda's ``<lambda>`` is the first thing to mend."""
    if name is not None:
        if not isinstance(name, str) or not name:
            raise ToolDefinitionError(f"a tool's name must be a non-empty str, got {name!r}")
        problem = _name_problem(name)
        if problem is not None:
            raise ToolDefinitionError(f"tool {name!r}: a name the providers refuse: {problem}")
        return name
    own = getattr(fn, "__name__", None)
    if not isinstance(own, str) or not own:
        raise ToolDefinitionError(
            f"{fn!r} has no __name__ to name its tool (a callable object or a "
            "functools.partial): pass one, tool(name=...)(fn)"
        )
    problem = _name_problem(own)
    if problem is not None:
        raise ToolDefinitionError(
            f"tool {own!r} (the function's __name__) is a name the providers refuse: "
            f"{problem}; pass one, tool(name='...')(fn)"
        )
    return own


def _build(fn: Callable[..., Any], name: str | None, description: str | None) -> Tool:
    tool_name = _tool_name(fn, name)
    where = f"tool {tool_name!r}"
    _check_runs(fn, where)
    try:
        hints = typing.get_type_hints(_annotated(fn))
    except Exception as exc:  # a forward reference that cannot be resolved
        raise ToolDefinitionError(f"{where}: cannot resolve type hints: {exc}") from exc
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDefinitionError(
                f"{where}: parameter {param.name!r} must be a named parameter "
                "(no *args, **kwargs or positional-only), since models call tools by keyword"
            )
        if param.name not in hints:
            raise ToolDefinitionError(
                f"{where}: parameter {param.name!r} needs a type hint to build its JSON schema"
            )
        prop = _type_schema(hints[param.name], f"{where}, parameter {param.name!r}")
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _json_default(param.default):
            prop["default"] = param.default
        properties[param.name] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return Tool(tool_name, description or summary, parameters, fn)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a ``Tool``; usable as ``@tool`` or ``@tool(name=...)``.

    Args:
        fn: The function; every parameter needs a JSON-compatible type hint.
        name: Tool name; defaults to the function's name. Either must match
            ``^[a-zA-Z0-9_-]{1,64}$`` (pass one for a lambda).
        description: Defaults to the docstring's first paragraph; the docstring's
            ``Args:`` section describes each parameter.

    Raises:
        ToolDefinitionError: the name (``name``, else ``fn.__name__``: a lambda's is
            ``<lambda>``) does not match ``^[a-zA-Z0-9_-]{1,64}$``, as OpenAI and Anthropic
            require; ``fn`` is an ``async def`` function (or an object whose
            ``__call__`` is one) or a generator function, whose body a call would not run;
            or a parameter has no hint, an unsupported hint, or is
            ``*args``/``**kwargs``/positional-only.
    """
    if fn is not None:
        return _build(fn, name, description)
    return lambda f: _build(f, name, description)


Tool.__module__ = "actors"
