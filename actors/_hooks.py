"""Runs plugin hooks for one session with the failure policy of ``Plugin``.

``session_start`` and ``session_tools`` failures raise ``PluginError``;
failures of every other hook become ``plugin_error`` events and the hook's
result is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from actors.errors import PluginError
from actors.events import EventBuffer
from actors.plugins import Plugin, PluginContext
from actors.tools import Tool

__all__ = ["PluginRunner"]

logger = logging.getLogger("actors.plugins")
T = TypeVar("T")


class PluginRunner:
    """The plugins of one session and their contexts. Used only on the session's thread."""

    def __init__(
        self,
        plugins: Sequence[Plugin],
        *,
        session_id: str,
        states: Mapping[str, dict[str, Any]],
        stripped_fields: Sequence[str],
        resumed: bool,
        events: EventBuffer,
    ) -> None:
        self.plugins = tuple(plugins)
        self.events = events
        self.contexts: dict[str, PluginContext] = {}
        for plugin in self.plugins:
            prefix = f"plugins.{plugin.name}."
            self.contexts[plugin.name] = PluginContext(
                session_id=session_id,
                plugin=plugin.name,
                state=states.get(plugin.name, {}),
                events=events,
                resumed=resumed,
                stripped=tuple(p[len(prefix) :] for p in stripped_fields if p.startswith(prefix)),
            )
        self.started: list[Plugin] = []

    def states(self) -> dict[str, dict[str, Any]]:
        """Each plugin's live state dict, by plugin name."""
        return {name: ctx.state for name, ctx in self.contexts.items()}

    def start(self, taken: Collection[str] = ()) -> list[Tool]:
        """Run every ``session_start``, each followed by its ``session_tools``, in order;
        stop at the first failure.

        Args:
            taken: Names of the session's own tools (the template's), which no
                plugin's tool may reuse.

        Returns:
            The tools the plugins offer, in plugin order.

        Raises:
            PluginError: naming the plugin whose hook raised (a ``SystemExit`` or other
                ``BaseException`` included: it fails the start, never the thread), or
                whose ``session_tools`` returned a non-``Tool`` or a name already taken.
        """
        owners = dict.fromkeys(taken, "the template")
        offered: list[Tool] = []
        for plugin in self.plugins:
            ctx = self.contexts[plugin.name]
            try:
                plugin.session_start(ctx)
            except BaseException as exc:  # SystemExit too: it fails this start, nothing else
                raise PluginError(plugin.name, "session_start", exc) from exc
            self.started.append(plugin)
            try:
                tools = list(plugin.session_tools(ctx))
                for item in tools:
                    _claim(owners, item, plugin.name)
            except BaseException as exc:
                raise PluginError(plugin.name, "session_tools", exc) from exc
            offered += tools
        return offered

    def end(self, reason: str) -> None:
        """Run ``session_end`` of every plugin that started, last started first."""
        for plugin in reversed(self.started):
            self._guarded(plugin, "session_end", lambda p, c: p.session_end(c, reason))
        self.started.clear()

    def pipe(self, hook: str, value: T, call: Callable[[Plugin, PluginContext, T], T | None]) -> T:
        """Pass ``value`` through ``hook`` of every plugin; a ``None`` result keeps it."""
        if not self.plugins:
            return value
        for plugin in self.plugins:
            result = self._guarded(plugin, hook, call, value)
            if result is not None:
                value = result
        return value

    def notify(self, hook: str, call: Callable[[Plugin, PluginContext], object]) -> None:
        """Call ``hook`` of every plugin for its side effects."""
        if not self.plugins:
            return
        for plugin in self.plugins:
            self._guarded(plugin, hook, call)

    def _guarded(self, plugin: Plugin, hook: str, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(plugin, self.contexts[plugin.name], *args)
        except Exception as exc:
            logger.warning("plugin %r failed in %s: %r", plugin.name, hook, exc)
            self.events.publish("plugin_error", plugin=plugin.name, hook=hook, error=repr(exc))
            return None


def _claim(owners: dict[str, str], item: object, plugin: str) -> None:
    """Record ``plugin`` as the owner of tool ``item``'s name; refuse a non-tool or a clash."""
    if not isinstance(item, Tool):
        raise TypeError(f"session_tools must return Tool objects (use @tool), got {item!r}")
    owner = owners.get(item.name)
    if owner is not None:
        where = owner if owner == "the template" else f"plugin {owner!r}"
        raise ValueError(
            f"tool name {item.name!r} is already taken by {where}; tool names must be unique "
            "within a session: rename one of them (MCPTools takes a prefix= for this)"
        )
    owners[item.name] = plugin
