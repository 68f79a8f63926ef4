"""Provider adapters: models of the ``respond`` form backed by providers' official SDKs.

Each adapter lives in its own module, which imports its SDK (an optional extra):

- ``actors.adapters.openai_chat.OpenAIChatModel``: OpenAI Chat Completions, and
  every OpenAI-compatible server through ``base_url`` (``sessionvisor[openai]``);
- ``actors.adapters.openai_responses.OpenAIResponsesModel``: the OpenAI Responses
  API, continuing with ``previous_response_id`` (``sessionvisor[openai]``);
- ``actors.adapters.anthropic_messages.AnthropicModel``: the Anthropic Messages
  API (``sessionvisor[anthropic]``).

This package itself imports no SDK. ``builtin_factory`` is how a
``ProviderRegistry`` builds them from model strings
(``registry:<profile>:openai:<model_id>``, ``...:anthropic:...``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from actors.adapters._base import AdapterSettings as AdapterSettings
from actors.adapters._base import EndUser as EndUser
from actors.adapters._base import ProviderAdapter as ProviderAdapter

if TYPE_CHECKING:
    from actors.model import Model

__all__ = ["BUILTIN_PROVIDERS", "AdapterSettings", "EndUser", "ProviderAdapter", "builtin_factory"]

BUILTIN_PROVIDERS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "openai": {
        "chat": ("actors.adapters.openai_chat", "OpenAIChatModel"),
        "responses": ("actors.adapters.openai_responses", "OpenAIResponsesModel"),
    },
    "anthropic": {"messages": ("actors.adapters.anthropic_messages", "AnthropicModel")},
}
"""The providers a ``ProviderRegistry`` serves without a factory: provider -> API -> the
adapter's module and class. The first API listed is the provider's default."""


def builtin_factory(provider: str, settings: Mapping[str, Any]) -> Callable[[str], Model]:
    """A ``ModelFactory`` building the built-in adapter of ``provider`` for a model id.

    ``settings`` are ``AdapterSettings`` fields plus, for ``openai``, ``api``
    (``chat``, the default, or ``responses``). They are checked now; the
    adapter's module (and with it the SDK) is imported by the first model built.

    Raises:
        ValueError: ``provider`` is not built in, or ``api`` is not one of its APIs.
        TypeError, ValueError: a setting is invalid (see ``AdapterSettings``).
    """
    apis = BUILTIN_PROVIDERS.get(provider)
    if apis is None:
        raise ValueError(
            f"no built-in provider {provider!r} (built in: {sorted(BUILTIN_PROVIDERS)}); "
            "pass a factory to register it"
        )
    options = dict(settings)
    api = options.pop("api", next(iter(apis)))
    if api not in apis:
        raise ValueError(f"provider {provider!r} has no api {api!r}; choose one of {sorted(apis)}")
    AdapterSettings(**options)  # refuse a bad setting now, not at the first session
    return functools.partial(_build, apis[api], options)


def _build(where: tuple[str, str], options: dict[str, Any], model_id: str) -> Model:
    module, name = where
    cls = getattr(importlib.import_module(module), name)
    model: Model = cls(model_id, **options)
    return model
