"""Runs plugin hooks for one session with the failure policy of ``Plugin``.

``session_start`` failures raise ``PluginError``; failures of every other hook
become ``plugin_error`` events and the hook's result is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from actors.errors import PluginError
from actors.events import EventBuffer
from actors.plugins import Plugin, PluginContext

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

    def start(self) -> None:
        """Run every ``session_start`` in order; stop at the first failure.

        Raises:
            PluginError: naming the plugin whose hook raised (a ``SystemExit`` or other
                ``BaseException`` included: it fails the start, never the thread).
        """
        for plugin in self.plugins:
            try:
                plugin.session_start(self.contexts[plugin.name])
            except BaseException as exc:  # SystemExit too: it fails this start, nothing else
                raise PluginError(plugin.name, "session_start", exc) from exc
            self.started.append(plugin)

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
