"""``ProviderRegistry``: turns model strings into live models.

Snapshots store a model *string*, never a live model. On resume the string is
looked up again here, so a host that re-registers its provider profiles at
start-up can resume every saved session. Two forms exist:

- a plain name (``echo``), registered with ``add_model``;
- ``registry:<profile>:<provider>:<model_id>``: the named profile's factory is
  called with the model id. A missing profile raises ``RegistryProfileMissing``
  (register it and try again). A profile of a built-in provider (``openai``,
  ``anthropic``; see ``actors.adapters``) needs no factory, only its settings:
  ``register("prod", "openai", base_url=..., stream=True)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.adapters import builtin_factory
from actors.errors import RegistryProfileMissing, UnknownModel
from actors.model import EchoModel, Model

__all__ = ["ModelFactory", "ProviderRegistry"]

ModelFactory = Callable[[str], Model]
"""Builds a live model for a model id (``registry:`` strings) or a plain name."""

REGISTRY_PREFIX = "registry:"


@dataclass(frozen=True, slots=True)
class _Profile:
    provider: str
    factory: ModelFactory


class ProviderRegistry:
    """Named provider profiles and plain model names. Thread-safe.

    A new registry knows the plain name ``echo`` (``EchoModel``) so the embedded
    defaults work without set-up; pass ``builtins=False`` for an empty one.
    """

    def __init__(self, *, builtins: bool = True) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[str, _Profile] = {}
        self._models: dict[str, ModelFactory] = {}
        if builtins:
            self._models["echo"] = lambda _name: EchoModel()

    def register(
        self, profile: str, provider: str, factory: ModelFactory | None = None, **settings: Any
    ) -> None:
        """Register (or replace) ``profile``, served by ``provider`` through ``factory``.

        Without a factory, ``provider`` must be built in (``openai``, ``anthropic``)
        and ``settings`` configure its adapter: ``AdapterSettings`` fields
        (``base_url``, ``max_retries``, ``stream``, ...) and, for ``openai``,
        ``api="chat"`` (the default) or ``"responses"``. The adapter's SDK is
        imported when the first model is built.

        Raises:
            ValueError: ``profile`` or ``provider`` is empty or contains ``:``; no
                factory for a provider that is not built in; a factory and settings.
            TypeError: a setting is invalid (the message names it).
        """
        for label, value in (("profile", profile), ("provider", provider)):
            if not value or ":" in value:
                raise ValueError(f"{label} must be a non-empty name without ':', got {value!r}")
        if factory is None:
            factory = builtin_factory(provider, settings)
        elif settings:
            raise ValueError(
                f"settings {sorted(settings)} configure built-in adapters only; "
                "a factory configures its own models"
            )
        with self._lock:
            self._profiles[profile] = _Profile(provider, factory)

    def unregister(self, profile: str) -> None:
        """Forget ``profile``; a no-op when it is not registered."""
        with self._lock:
            self._profiles.pop(profile, None)

    def add_model(self, name: str, factory: ModelFactory) -> None:
        """Register a plain model name; ``factory`` receives the name."""
        if not name or name.startswith(REGISTRY_PREFIX):
            raise ValueError(
                f"plain model names must be non-empty and not start with "
                f"{REGISTRY_PREFIX!r}, got {name!r}"
            )
        with self._lock:
            self._models[name] = factory

    def profiles(self) -> list[str]:
        """Names of the registered profiles, sorted."""
        with self._lock:
            return sorted(self._profiles)

    def lookup(self, model_string: str) -> Model:
        """Build the live model ``model_string`` names.

        Raises:
            RegistryProfileMissing: a ``registry:`` string names an unregistered profile.
            UnknownModel: a plain name nobody registered, a malformed ``registry:``
                string, or a profile registered for another provider.
        """
        if not model_string.startswith(REGISTRY_PREFIX):
            with self._lock:
                factory = self._models.get(model_string)
            if factory is None:
                raise UnknownModel(
                    f"no model named {model_string!r}; register it with add_model() "
                    f"or use a 'registry:<profile>:<provider>:<model_id>' string"
                )
            return factory(model_string)
        parts = model_string[len(REGISTRY_PREFIX) :].split(":", 2)
        if len(parts) != 3 or not all(parts):
            raise UnknownModel(
                f"malformed model string {model_string!r}; "
                "expected 'registry:<profile>:<provider>:<model_id>'"
            )
        profile_name, provider, model_id = parts
        with self._lock:
            profile = self._profiles.get(profile_name)
        if profile is None:
            raise RegistryProfileMissing(profile_name)
        if profile.provider != provider:
            raise UnknownModel(
                f"profile {profile_name!r} serves provider {profile.provider!r}, "
                f"not {provider!r} (model string {model_string!r})"
            )
        return profile.factory(model_id)


ProviderRegistry.__module__ = "actors"
