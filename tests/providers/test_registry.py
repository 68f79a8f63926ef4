"""Model strings of the built-in providers, and adapter settings."""

from __future__ import annotations

from typing import Any

import pytest

from actors import ProviderRegistry, UnknownModel
from actors.adapters import AdapterSettings
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel


def test_built_in_providers_need_only_settings() -> None:
    registry = ProviderRegistry()
    registry.register("local", "openai", base_url="http://127.0.0.1:9/v1", stream=True)
    registry.register("resp", "openai", api="responses", max_retries=5)
    registry.register("claude", "anthropic", timeout=30.0, max_tokens=1024)
    chat = registry.lookup("registry:local:openai:llama-3")
    assert isinstance(chat, OpenAIChatModel)
    assert chat.model_id == "llama-3"
    assert chat.settings == AdapterSettings(base_url="http://127.0.0.1:9/v1", stream=True)
    responses = registry.lookup("registry:resp:openai:gpt-x")
    assert isinstance(responses, OpenAIResponsesModel)
    assert responses.settings.max_retries == 5
    claude = registry.lookup("registry:claude:anthropic:claude-x")
    assert isinstance(claude, AnthropicModel)
    assert claude.settings.max_tokens == 1024
    assert registry.lookup("registry:local:openai:other") is not chat  # one adapter per lookup
    with pytest.raises(UnknownModel, match="serves provider 'openai'"):
        registry.lookup("registry:local:anthropic:claude-x")


@pytest.mark.parametrize(
    ("provider", "settings", "error", "match"),
    [
        ("mistral", {}, ValueError, "no built-in provider 'mistral'"),
        ("openai", {"api": "assistants"}, ValueError, "has no api 'assistants'"),
        ("anthropic", {"api": "responses"}, ValueError, "has no api 'responses'"),
        ("openai", {"max_retries": -1}, ValueError, "max_retries must be >= 0"),
        ("openai", {"max_retries": "3"}, TypeError, "max_retries must be an int"),
        ("openai", {"timeout": 0}, ValueError, "timeout must be a positive number"),
        ("openai", {"end_user": "user"}, ValueError, "end_user must be"),
        ("openai", {"stream": "yes"}, TypeError, "stream must be a bool"),
        ("openai", {"base_url": ""}, TypeError, "base_url must be a non-empty str"),
        ("openai", {"default_headers": {"X": 1}}, TypeError, "default_headers"),
        ("openai", {"temperature": 0.2}, TypeError, "unexpected keyword argument"),
    ],
)
def test_a_bad_profile_is_refused_when_registered(
    provider: str, settings: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        ProviderRegistry().register("p", provider, **settings)


def test_settings_configure_built_in_providers_only() -> None:
    with pytest.raises(ValueError, match="configure built-in adapters only"):
        ProviderRegistry().register("p", "openai", OpenAIChatModel, stream=True)


def test_options_pass_through_to_the_create_call() -> None:
    settings = AdapterSettings(options={"temperature": 0.2})
    assert settings.options == {"temperature": 0.2}
    assert "api_key" not in repr(AdapterSettings(api_key="sk-hidden-0123456789abcdef"))
