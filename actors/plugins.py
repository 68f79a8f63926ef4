"""Plugins: code that rides along a session's life through hooks.

Every hook runs on the session's actor thread, one at a time, in the order the
template lists the plugins. A plugin object may be shared by many sessions
(templates are shared), so per-session data belongs in ``ctx.state``: a plain
dict that is part of the session state and therefore of every snapshot. Live
values kept there (connections, files, handles) are stripped from snapshots
and listed in ``ctx.stripped``; ``session_start`` rebuilds them on resume.

A plugin may also offer tools to its session (``session_tools``), next to the
template's: tools that need a per-session live object, such as the connection
to an MCP server (``actors.mcp.MCPTools``), are built there, after
``session_start`` opened it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.events import RESERVED_EVENT_TYPES
from actors.messages import Message, ToolCall

if TYPE_CHECKING:
    from actors.events import EventBuffer
    from actors.model import ModelResponse
    from actors.tools import Tool

__all__ = ["Plugin", "PluginContext"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(slots=True)
class PluginContext:
    """What a hook gets about its session. Owned by the session's actor thread.

    Attributes:
        session_id: The session's id.
        state: This plugin's own state dict; mutate it in place. Persisted. The key
            ``"__stripped__"`` is the stripped marker's (``STRIPPED_KEY``): a state of that
            one key with a ``str`` value is refused (``SnapshotEncodeError``), and a dict of
            that form below it is listed in ``stripped`` on resume, as a marker is.
        resumed: ``True`` when the session was rebuilt from a snapshot.
        stripped: Keys of ``state`` (dotted below the plugin, e.g. ``conn`` or
            ``pool.conn``) whose live values were stripped from the snapshot
            this session resumed from; rebuild them in ``session_start``.
    """

    session_id: str
    plugin: str
    state: dict[str, Any]
    events: EventBuffer = field(repr=False)
    resumed: bool = False
    stripped: tuple[str, ...] = ()

    def emit(self, type_: str, /, **data: Any) -> None:
        """Publish a plugin event of type ``type_``; its data is ``data`` with ``plugin`` set
        to this plugin's name (how a consumer tells a plugin's events from the session's).

        Raises:
            TypeError: ``type_`` is not a ``str``, or ``data`` holds ``plugin`` or ``type_``
                (name that key otherwise).
            ValueError: ``type_`` is empty, or one the session or its host publishes
                (``RESERVED_EVENT_TYPES``: ``turn_finished``, ``crashed``, ...): their
                consumers act on them, so one from a plugin would end a turn early or
                hand back steering twice; choose another name.
        """
        if not isinstance(type_, str):
            raise TypeError(
                f"emit() takes the event type as a str, got {type(type_).__name__} {type_!r:.40}"
            )
        if "plugin" in data:
            raise TypeError(
                f"emit({type_!r:.60}) sets the event's 'plugin' to this plugin's name "
                f"({self.plugin!r}); give your 'plugin' value another key"
            )
        if "type_" in data:  # ``EventBuffer.publish`` (and a worker's) takes it as the type
            raise TypeError(
                f"emit({type_!r:.60}) cannot carry data named 'type_' (the event type's "
                "parameter); give that value another key"
            )
        if not type_ or type_ in RESERVED_EVENT_TYPES:
            raise ValueError(
                f"plugin {self.plugin!r} cannot emit an event of type {type_!r}: "
                + ("it is empty" if not type_ else "the session and its host publish it")
                + "; choose another name (e.g. prefixed with the plugin's name)"
            )
        self.events.publish(type_, plugin=self.plugin, **data)


class Plugin:
    """Base class of plugins; every hook is a no-op unless overridden.

    Subclasses set ``name`` (defaults to the class name in snake case); names
    must be unique within a template, and a plugin that may appear twice in one
    template (one per server, say) lets its constructor set ``self.name``. The
    name keys the plugin's state in snapshots, so keep it stable. Hooks that
    return ``None`` leave their input unchanged; hooks that may rewrite their
    input say so.

    An exception in ``session_start`` or ``session_tools`` makes the session
    fail to start with ``PluginError`` naming the plugin. An exception in any
    other hook is published as a ``plugin_error`` event and the session goes on
    as if the hook had returned ``None``; so is a replacement of the wrong type
    (``before_model`` must return a list of ``Message``, ``after_model`` a
    ``ModelResponse``, ``on_tool_call`` a ``ToolCall`` with ``str`` id and name and
    ``dict`` arguments).

    Threads: one plugin object serves every session of its template, each on its
    own thread, so its hooks run concurrently for different sessions (one
    session's hooks never overlap). Keep per-session values in ``ctx.state``, and
    guard anything shared on ``self`` with a lock. In process mode each worker
    has its own copy of the plugin (the template is pickled to it).
    """

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = _snake(cls.__name__)

    def session_start(self, ctx: PluginContext) -> None:
        """Set up or rebuild per-session live state; runs on first start and on every resume.

        Runs on the session's thread before it handles any message.
        ``ctx.state`` holds the restored state and ``ctx.stripped`` what must be rebuilt.
        """

    def session_tools(self, ctx: PluginContext) -> Sequence[Tool]:
        """Tools this plugin offers the model in this session, next to the template's.

        Runs on the session's thread right after this plugin's ``session_start``,
        on the first start and on every resume; the tools are the session's until
        it stops (they are live objects, never part of a snapshot). They may
        close over what ``session_start`` put in ``ctx.state``. Their names must
        not clash with the template's tools or another plugin's: a clash, a
        value that is not a ``Tool``, or an exception fails the start with
        ``PluginError`` (``session_end`` still runs, as the plugin started).
        """
        return ()

    def before_model(self, ctx: PluginContext, messages: list[Message]) -> list[Message] | None:
        """Before each model call; may return a replacement message list (system prompt first)."""
        return None

    def after_model(self, ctx: PluginContext, response: ModelResponse) -> ModelResponse | None:
        """After each model call; may return a replacement response. Its ``usage`` is not read:
        the session counts, and publishes with the ``model_response`` event, what the model
        itself spent."""
        return None

    def on_tool_call(self, ctx: PluginContext, call: ToolCall) -> ToolCall | None:
        """Before each tool call; may return a replacement call (e.g. rewritten arguments)."""
        return None

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        """After a turn answered; ``messages`` are the messages that turn added."""

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        """When the session stops; release live resources here.

        ``reason`` says why: ``normal`` (stopped, hibernated or shut down),
        ``error`` (it crashed) or ``host_lost`` (it ran in a worker process whose
        host process vanished, e.g. was SIGKILLed: no final checkpoint was taken;
        a new host can resume it from its last one). Runs on the session's
        thread, last started plugin first; an exception is published as a
        ``plugin_error`` event and the other plugins' hooks still run.
        """


for _cls in (Plugin, PluginContext):
    _cls.__module__ = "actors"
