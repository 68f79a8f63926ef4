"""What a turn changed in a session, recorded before it, so a failed turn is undone in place
(``AgentSession._rollback``); and the copy of plain containers a snapshot's mutable parts
are made of."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors._record import record

__all__ = ["TurnMark", "Undo", "copy_containers"]


@record
class TurnMark:
    """What a turn changes in a session, as it was before the turn (see ``_rollback``)."""

    messages: int
    turns: int
    provider_state: Any
    plugin_states: Undo | None  # None: no plugins, or too deep to record


@record
class Undo:
    """The plugins' states as a turn found them, to be put back in place (``restore``).

    ``states`` is each plugin's ``ctx.state`` dict object; ``contents`` holds every dict,
    list and set found in them with a shallow copy of what it held. Restoring puts each
    container's own items back into it, so a rolled-back state is made of the very
    objects it was made of before the turn: a plugin's tool that closes over a list or
    dict of its state (``notes = ctx.state["notes"]``) still writes into the state
    afterwards. Copies swapped in instead left such a tool writing into a container no
    checkpoint held any more, and what it wrote after the first failed turn was lost.
    """

    states: dict[str, dict[str, Any]]
    contents: list[tuple[Any, Any]]

    @classmethod
    def record(cls, states: dict[str, dict[str, Any]]) -> Undo:
        """Record ``states`` (``RecursionError`` if they nest too deep)."""
        contents: list[tuple[Any, Any]] = []
        seen: set[int] = set()
        for state in states.values():
            _record_containers(state, contents, seen)
        return cls(dict(states), contents)

    def restore(self, contexts: Mapping[str, Any]) -> None:
        """Put every recorded container's items back, and each plugin's ``ctx.state`` dict."""
        for container, items in self.contents:
            try:
                if isinstance(container, list):
                    container[:] = items
                else:  # a dict or a set (a subclass's own methods: an OrderedDict keeps order)
                    container.clear()
                    container.update(items)
            except Exception:  # an immutable subclass: the turn could not change it either
                continue
        for name, state in self.states.items():
            ctx = contexts.get(name)
            if ctx is not None:
                ctx.state = state


def _record_containers(value: Any, contents: list[tuple[Any, Any]], seen: set[int]) -> None:
    """Add every dict, list and set under ``value`` (itself included, tuples walked) to
    ``contents`` with a shallow copy of its items, once each; leaves are not copied.

    Subclasses too (a ``Counter``, ``defaultdict`` or ``OrderedDict`` a plugin counts in):
    recording only the exact types left what a failed turn wrote into those in place."""
    if not isinstance(value, _WALKED):
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, dict):
        contents.append((value, dict(value)))
        children: Any = value.values()
    elif isinstance(value, list):
        contents.append((value, list(value)))
        children = value
    elif isinstance(value, set):
        contents.append((value, set(value)))
        return
    else:
        children = value
    for child in children:
        if isinstance(child, _WALKED):
            _record_containers(child, contents, seen)


_WALKED = (dict, list, set, tuple)


def copy_containers(value: Any) -> Any:
    """Copy dicts and lists all the way down; leave leaves (live or not) as they are."""
    if isinstance(value, dict):
        return {k: copy_containers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [copy_containers(v) for v in value]
    return value
