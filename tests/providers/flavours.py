"""The three adapters, each with the wire dialect of its provider, for parametrised tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from actors.adapters import ProviderAdapter
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from tests.providers.wire import ANTHROPIC, CHAT, RESPONSES, Dialect, WireServer

__all__ = ["FLAVOURS", "AdapterFactory", "Flavour", "flavour", "make_adapter", "server"]


@dataclass(frozen=True)
class Flavour:
    """One adapter and how its provider looks: the dialect, the model string's parts, the
    SDK's error classes, and the header that carries the API key."""

    name: str
    dialect: Dialect
    cls: type[ProviderAdapter[Any]]
    provider: str
    api: str
    sdk: Any
    key_header: str

    def key_of(self, headers: dict[str, str]) -> str:
        """The API key a request carried (as a bearer token, or in the provider's header)."""
        value = headers.get(self.key_header) or headers.get("authorization", "")
        return value.removeprefix("Bearer ")


FLAVOURS = (
    Flavour("chat", CHAT, OpenAIChatModel, "openai", "chat", openai, "authorization"),
    Flavour(
        "responses", RESPONSES, OpenAIResponsesModel, "openai", "responses", openai, "authorization"
    ),
    Flavour(
        "anthropic", ANTHROPIC, AnthropicModel, "anthropic", "messages", anthropic, "x-api-key"
    ),
)

AdapterFactory = Callable[..., ProviderAdapter[Any]]


@pytest.fixture(params=FLAVOURS, ids=[f.name for f in FLAVOURS])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    """Each adapter in turn."""
    chosen: Flavour = request.param
    return chosen


@pytest.fixture
def server(flavour: Flavour) -> Iterator[WireServer]:
    """A wire server speaking ``flavour``'s protocol, closed after the test."""
    with WireServer(flavour.dialect) as wire:
        yield wire


@pytest.fixture
def make_adapter(flavour: Flavour, server: WireServer) -> Iterator[AdapterFactory]:
    """Build ``flavour``'s adapters pointed at ``server`` (``api_key="sk-wire"`` and no
    retries unless given); all closed after the test."""
    made: list[ProviderAdapter[Any]] = []

    def make(**settings: Any) -> ProviderAdapter[Any]:
        settings.setdefault("base_url", server.base_url)
        settings.setdefault("api_key", "sk-wire")
        settings.setdefault("max_retries", 0)
        adapter = flavour.cls("wire-model", **settings)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.close()


@pytest.fixture(name="chat")
def chat_server() -> Iterator[WireServer]:
    """A wire server speaking Chat Completions, closed after the test."""
    with WireServer(CHAT) as wire:
        yield wire


@pytest.fixture(name="responses")
def responses_server() -> Iterator[WireServer]:
    """A wire server speaking the Responses API, closed after the test."""
    with WireServer(RESPONSES) as wire:
        yield wire


@pytest.fixture(name="anthropic")
def anthropic_server() -> Iterator[WireServer]:
    """A wire server speaking Anthropic Messages, closed after the test."""
    with WireServer(ANTHROPIC) as wire:
        yield wire
