"""``AgentTemplate``: the live half of a session (model, tools, instructions, plugins).

A snapshot carries only the conversation; on start and on resume the template
supplies everything that cannot or must not be persisted. One template can
serve many sessions at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actors._storable import user_text
from actors.model import Model, model_string_of
from actors.plugins import Plugin
from actors.tools import Tool

__all__ = ["AgentTemplate"]


_MODEL_STRING = "a registered name such as 'echo', or 'registry:<profile>:<provider>:<model_id>'"


def _check_model(model: object) -> None:
    """Refuse what no session could call: a model is a model string (resolved by a
    ``ProviderRegistry`` when a session starts) or an object of either ``Model`` form."""
    if isinstance(model, str):
        if not model.strip():
            raise ValueError(
                f"model must be a non-empty model string ({_MODEL_STRING}), got {model!r}"
            )
        return
    if isinstance(model, type):
        raise TypeError(
            f"model must be a model object, not the class {model.__name__}: pass an instance, "
            f"such as {model.__name__}()"
        )
    if callable(getattr(model, "respond", None)) or callable(getattr(model, "generate", None)):
        return
    shown = repr(model)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise TypeError(
        f"model must be a model string ({_MODEL_STRING}) or an object with a "
        "generate(messages, tools) or respond(request) method (actors.GenerateModel, "
        f"actors.RespondModel), got {type(model).__name__} {shown}"
    )


def _check_plugin_name(plugin: Plugin) -> None:
    """Refuse a plugin whose name cannot key its state in a checkpoint
    (``state.plugins.<name>``): every session on the template failed its start, with an
    error naming neither the plugin nor its name (``object of type 'int' has no len()``).
    ``""`` is a name (a bare ``Plugin()``'s)."""
    name = plugin.name
    if not isinstance(name, str):
        raise TypeError(
            f"plugin {type(plugin).__qualname__}: its name must be a str (it keys the "
            f"plugin's state in every checkpoint), got {type(name).__name__} {name!r:.40}"
        )
    user_text(name, f"the name of plugin {type(plugin).__qualname__}")


def _unique(kind: str, names: Sequence[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"two {kind}s are named {name!r}; {kind} names must be unique")
        seen.add(name)


@dataclass(frozen=True)
class AgentTemplate:
    """Model, tools, instructions and plugins shared by the sessions built on it.

    Immutable; as thread-safe as the model, tools and plugins it holds, since
    sessions on different threads use them concurrently.

    Attributes:
        model: A live ``Model`` or a model string resolved through a
            ``ProviderRegistry`` (``echo`` or ``registry:<profile>:<provider>:<id>``).
        tools: Tools the model may call; names must be unique.
        instructions: The system prompt, sent first on every model call.
        plugins: Plugins, run in this order; names must be unique.

    Raises:
        TypeError: ``model`` is neither a model string nor a model object (one with a
            ``generate`` or ``respond`` method), a tool or plugin is not one, a plugin's
            name is not a ``str``, or ``instructions`` is neither a ``str`` nor ``None``.
        ValueError: ``model`` is an empty string, two tools or plugins share a name, or a
            plugin's name or ``instructions`` holds a lone surrogate (every checkpoint
            holds them, and none could store it).
    """

    model: Model | str = "echo"
    tools: Sequence[Tool] = ()
    instructions: str | None = None
    plugins: Sequence[Plugin] = ()

    def __post_init__(self) -> None:
        _check_model(self.model)
        if self.instructions is not None:  # in every checkpoint's state: storable text only
            if not isinstance(self.instructions, str):
                raise TypeError(
                    f"instructions must be a str or None, got {type(self.instructions).__name__}"
                )
            object.__setattr__(
                self, "instructions", user_text(self.instructions, "the template's instructions")
            )
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "plugins", tuple(self.plugins))
        for item in self.tools:
            if not isinstance(item, Tool):
                raise TypeError(f"tools must be Tool objects (use @tool), got {item!r}")
        for plugin in self.plugins:
            if not isinstance(plugin, Plugin):
                raise TypeError(f"plugins must be Plugin instances, got {plugin!r}")
            _check_plugin_name(plugin)
        _unique("tool", [t.name for t in self.tools])
        _unique("plugin", [p.name for p in self.plugins])

    @property
    def model_string(self) -> str:
        """The model string a session on this template records in its state."""
        return model_string_of(self.model)


AgentTemplate.__module__ = "actors"
