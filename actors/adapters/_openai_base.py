"""What the two OpenAI adapters (Chat Completions and Responses) share: the SDK client.

Imports ``openai``: only the adapters' own modules import this one.
"""

from __future__ import annotations

from typing import Any

import openai

from actors.adapters._base import ProviderAdapter, api_key, merged_headers
from actors.request import Credentials

__all__ = ["OpenAIAdapter"]


class OpenAIAdapter(ProviderAdapter[openai.OpenAI]):
    """A ``ProviderAdapter`` on ``openai.OpenAI`` clients (thread-safe as its base says)."""

    def _new_http_client(self) -> Any:
        return openai.DefaultHttpxClient()

    def _new_client(self, http: Any, credentials: Credentials | None) -> openai.OpenAI:
        return openai.OpenAI(
            api_key=api_key(self.settings, credentials),
            default_headers=merged_headers(self.settings, credentials) or None,
            http_client=http,
            **self.sdk_options(),
        )
