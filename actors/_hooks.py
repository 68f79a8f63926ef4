"""Runs plugin hooks for one session with the failure policy of ``Plugin``.

``session_start`` and ``session_tools`` failures raise ``PluginError``;
failures of every other hook become ``plugin_error`` events and the hook's
result is ignored: a ``BaseException`` such as ``asyncio.CancelledError`` too,
but for ``SystemExit``, ``KeyboardInterrupt`` and a group holding one, which
keep their meaning (``actors._loop.ends_session``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from actors._codec import encode_plain
from actors._loop import ends_session
from actors._strip import is_stripped_marker, strip_live
from actors.errors import PluginError
from actors.events import EventBuffer
from actors.messages import Message, ToolCall
from actors.model import ModelResponse
from actors.plugins import Plugin, PluginContext
from actors.tools import Tool

__all__ = ["PROMPT", "RESPONSE", "TOOL_CALL", "PluginRunner", "Returns"]

logger = logging.getLogger("actors.plugins")
T = TypeVar("T")

Returns = tuple[Callable[[object], bool], str]
"""What a piped hook may return besides ``None``: a test of the result, and its words."""


class PluginRunner:
    """The plugins of one session and their contexts. Used only on the session's thread.

    A restored state whose plugin the template does not list (a deploy took the plugin
    out, for a while or for good) is *kept*: held in ``kept`` as a checkpoint holds it (a
    checkpoint's state unchanged, markers included; a hand-made one with its live values
    stripped, as any snapshot strips them), never handed to a hook, and written after the
    live plugins' states into every later checkpoint (``AgentSession._plugin_states``), so
    a template that lists the plugin again gives it back in ``ctx.state``. Dropping it
    instead lost the user's data silently.

    Raises:
        TypeError: a restored state of one of the plugins, kept ones included, is not a
            dict, or a kept one holds what no checkpoint can (``SnapshotEncodeError``, a
            ``TypeError``: a damaged or wrongly redacted checkpoint, or a hand-made state;
            the session reports it as ``SnapshotDecodeError``).
        ValueError, RecursionError: a kept state holds a cycle or nests too deep (likewise).
    """

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
        self.session_id = session_id
        self.events = events
        self.contexts: dict[str, PluginContext] = {}
        for plugin in self.plugins:
            prefix = f"plugins.{plugin.name}."
            state = states.get(plugin.name, {})
            if is_stripped_marker(state):
                # The whole state was stripped (a checkpoint written when ``strip_secrets``
                # judged plugin names as keys): the plugin starts afresh, without the marker's
                # key in its state for good.
                state = {}
            elif type(state) is not dict:  # the checkpoint's fault, not the plugin's
                raise TypeError(
                    f"state.plugins.{plugin.name} must be a dict (the plugin's ctx.state), "
                    f"got {type(state).__name__}"
                )
            self.contexts[plugin.name] = PluginContext(
                session_id=session_id,
                plugin=plugin.name,
                state=state,
                events=events,
                resumed=resumed,
                stripped=tuple(p[len(prefix) :] for p in stripped_fields if p.startswith(prefix)),
            )
        # Restored states of plugins the template lacks, by name, in the checkpoint's order;
        # plain (as a snapshot holds them) and never changed (``AgentSession`` copies them out).
        self.kept: dict[str, dict[str, Any]] = {
            name: _kept_state(name, state)
            for name, state in states.items()
            if name not in self.contexts
        }
        self.started: list[Plugin] = []

    def states(self) -> dict[str, dict[str, Any]]:
        """Each plugin's live state dict, by plugin name (the kept states are not there)."""
        return {name: ctx.state for name, ctx in self.contexts.items()}

    def announce_kept(self) -> None:
        """Say once per start that states are kept without their plugin, so that an operator
        sees a plugin went missing from the template: a warning naming the session and the
        plugins, and a ``plugin_state_kept`` event (``plugins``: their names)."""
        if not self.kept:
            return
        names = list(self.kept)
        logger.warning(
            "session %r: the template lacks plugin(s) %s; their saved state is kept "
            "unchanged in every checkpoint and given back when a template lists them again",
            self.session_id,
            ", ".join(repr(name) for name in names),
        )
        self.events.publish("plugin_state_kept", plugins=names)

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
        """Run ``session_end`` of every plugin that started, last started first, once each.

        A plugin is taken off ``started`` before its hook runs, and a ``SystemExit`` (or
        ``KeyboardInterrupt``, or a group holding one) a hook raises is raised again only
        once every other plugin's ``session_end`` has run: it ends the session, but must
        not leave the other plugins' resources open, nor have the failure path that
        follows (``on_failure``) run the same hook again. Any other exception is a
        ``plugin_error`` event, as in every hook but ``session_start``.
        """
        pending: BaseException | None = None
        while self.started:
            plugin = self.started.pop()
            try:
                self._guarded(plugin, "session_end", lambda p, c: p.session_end(c, reason))
            except BaseException as exc:  # SystemExit: the others still end first
                pending = pending or exc
        if pending is not None:
            raise pending

    def pipe(
        self,
        hook: str,
        value: T,
        call: Callable[[Plugin, PluginContext, T], T | None],
        returns: Returns,
    ) -> T:
        """Pass ``value`` through ``hook`` of every plugin; a ``None`` result keeps it.

        ``returns`` says what the hook may return instead: a result it does not accept
        is that hook's failure (a ``plugin_error`` event naming the plugin, the hook and
        what it must return), and ``value`` goes on unchanged, as when a hook raises.
        Without this check the wrong value failed the turn later, far from the plugin,
        with an error that named neither (``'dict' object has no attribute 'to_dict'``).
        """
        if not self.plugins:
            return value
        accepts, what = returns
        for plugin in self.plugins:
            result = self._guarded(plugin, hook, call, value)
            if result is None:
                continue
            if not accepts(result):
                self._failed(
                    plugin,
                    hook,
                    TypeError(
                        f"{hook} must return {what} or None, got {type(result).__name__}; "
                        "its result was ignored"
                    ),
                )
                continue
            value = result
        return value

    def notify(self, hook: str, call: Callable[[Plugin, PluginContext], object]) -> None:
        """Call ``hook`` of every plugin for its side effects."""
        if not self.plugins:
            return
        for plugin in self.plugins:
            self._guarded(plugin, hook, call)

    def _guarded(self, plugin: Plugin, hook: str, call: Callable[..., Any], *args: Any) -> Any:
        """Call ``hook``; a failure is reported (``_failed``) and the result is ``None``. A
        ``BaseException`` fails the hook as an ``Exception`` does (``asyncio.CancelledError``
        of an asyncio call inside it), unless it ends the session (``ends_session``)."""
        try:
            return call(plugin, self.contexts[plugin.name], *args)
        except Exception as exc:
            self._failed(plugin, hook, exc)
            return None
        except BaseException as exc:
            if ends_session(exc):
                raise
            self._failed(plugin, hook, exc)
            return None

    def _failed(self, plugin: Plugin, hook: str, exc: BaseException) -> None:
        """Report a failure of ``plugin``'s ``hook``: a warning and a ``plugin_error`` event."""
        logger.warning("plugin %r failed in %s: %r", plugin.name, hook, exc)
        self.events.publish("plugin_error", plugin=plugin.name, hook=hook, error=repr(exc))


def _kept_state(name: str, state: object) -> dict[str, Any]:
    """``state``, restored for plugin ``name`` that the template lacks, as a checkpoint holds
    it: live values stripped to markers (a checkpoint's state has none; a hand-made one may),
    containers made plain. Checked now, as a live plugin's state is at start: a kept state
    no checkpoint can hold would fail every turn of the session, far from its cause.

    Raises:
        TypeError: ``state`` is not a dict, or holds a value or key no checkpoint can hold
            (``SnapshotEncodeError``, naming the path).
        ValueError, RecursionError: ``state`` holds a cycle, or nests too deep.
    """
    if type(state) is not dict:  # the checkpoint's fault, as for a live plugin
        raise TypeError(
            f"state.plugins.{name} must be a dict (the plugin's ctx.state), "
            f"got {type(state).__name__}"
        )
    plain: dict[str, Any] = strip_live(state)[0]
    encode_plain({name: plain}, root="state.plugins")  # as a checkpoint's error names it
    return plain


def _is_prompt(value: object) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(m, Message) for m in value)


PROMPT: Returns = (_is_prompt, "a list of Message (the system prompt first)")
"""What ``before_model`` may return."""
RESPONSE: Returns = (lambda value: isinstance(value, ModelResponse), "a ModelResponse")
"""What ``after_model`` may return."""


def _is_call(value: object) -> bool:
    """A ``ToolCall`` a session can run and publish: a ``str`` id and name, and ``dict``
    arguments (``ToolCall`` checks none of them; arguments given as JSON text failed the
    turn with ``dictionary update sequence element #0 ...``, naming no plugin)."""
    return (
        isinstance(value, ToolCall)
        and isinstance(value.id, str)
        and isinstance(value.name, str)
        and isinstance(value.arguments, dict)
    )


TOOL_CALL: Returns = (_is_call, "a ToolCall (a str id and name, dict arguments)")
"""What ``on_tool_call`` may return."""


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
