"""The text of a tool message: what a tool returned (``tool_output``), or how it failed
(``tool_error``); never raises, as the tool has run."""

from __future__ import annotations

import json

from actors._storable import storable_text

__all__ = ["tool_error", "tool_output"]


def tool_error(exc: BaseException) -> str:
    """The text of a tool message for a tool that raised ``exc``: ``error: <class>: <text>``,
    or ``error: <class>`` when its text cannot be had (a ``__str__`` that raises too)."""
    try:
        detail = str(exc)
    except Exception:  # the tool failed all the same: say how, as far as can be told
        return f"error: {type(exc).__name__}"
    return storable_text(f"error: {type(exc).__name__}: {detail}")


def tool_output(result: object) -> str:
    """A tool's ``result`` as the text of its tool message: a ``str`` as it is, anything
    else as JSON (``str`` for what JSON lacks), else as ``repr`` shows it (a dict with
    tuple keys, a cycle). Never raises: the tool ran, and an error here read to the model
    as the tool's failure, inviting it to run the tool (and its side effects) again."""
    if isinstance(result, str):
        return storable_text(result)
    try:
        text = json.dumps(result, default=str)
    except Exception:  # any failure of JSON or of a __str__ it called
        try:
            text = repr(result)
        except Exception:  # a __repr__ that raises too
            text = f"<{type(result).__name__} object>"
    return storable_text(text)
