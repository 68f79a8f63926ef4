"""What every provider adapter shares: its settings, its lazily built SDK clients, pickling.

An adapter is configuration (a model id and ``AdapterSettings``) until its first
request, which builds the SDK client in the process that makes it. Pickled
(for a worker process), it is that configuration again: the client, its
connection pool and its lock stay behind, and the worker builds its own.
"""

from __future__ import annotations

import contextlib
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

from actors.model import ModelResponse
from actors.request import Credentials, ModelRequest

__all__ = ["AdapterSettings", "EndUser", "ProviderAdapter", "api_key", "merged_headers"]

EndUser = Literal["tenant", "session"]
"""What an adapter sends as the provider's end-user field (``end_user`` setting)."""

ClientT = TypeVar("ClientT")

_CLIENTS_KEPT = 64
"""Most SDK clients one adapter keeps (one per distinct credentials); the oldest goes."""


_OWN_OPTIONS = {
    "model": "it is the adapter's model_id (the model string's last part)",
    "stream": "use the stream setting, which also makes the adapter read the answer as a stream",
}
"""Create-call arguments ``options`` may not set, and what to use instead: the adapter
sets them, and reads the answer by them."""


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """How an adapter reaches its provider; plain data, so it travels to worker processes.

    Immutable and thread-safe. ``repr`` leaves out ``api_key``, hides the user, password and
    query of ``base_url``, and shows only the names of ``default_headers`` and
    ``options``: their values may be credentials (an ``api-key`` or
    ``Authorization`` header, ``extra_headers``), and a template's ``repr``
    includes its model's.

    Attributes:
        base_url: The API's URL (an OpenAI-compatible server, a proxy, a test
            server); ``None`` for the SDK's default.
        api_key: The key when the host gives no ``Credentials`` for the tenant;
            ``None`` leaves the SDK's environment variable (``OPENAI_API_KEY``,
            ``ANTHROPIC_API_KEY``).
        max_retries: The SDK's retry budget for rate limits, server errors and
            connection failures (with its own backoff, honouring ``retry-after``);
            ``None`` for the SDK's default (2).
        timeout: Seconds per request; ``None`` for the SDK's default.
        stream: Stream the answer: each piece becomes a ``delta`` event while the
            model runs.
        default_headers: Headers on every request.
        end_user: Send the session's ``tenant`` or ``session`` id as the
            provider's end-user field (OpenAI ``safety_identifier``, Anthropic
            ``metadata.user_id``); ``None`` sends none (the safe choice for
            OpenAI-compatible servers that refuse unknown fields).
        max_tokens: The output limit; required by Anthropic (default 4096 there).
        options: More keyword arguments for the SDK's create call
            (``temperature``, ``reasoning_effort``, ...), plain values only; not
            ``model`` or ``stream``, which the adapter sets.

    Raises:
        TypeError, ValueError: a setting of the wrong type or out of range; the
            message names it.
    """

    base_url: str | None = None
    api_key: str | None = None
    max_retries: int | None = None
    timeout: float | None = None
    stream: bool = False
    default_headers: Mapping[str, str] = field(default_factory=dict)
    end_user: EndUser | None = None
    max_tokens: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("base_url", "api_key"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"adapter setting {name} must be a non-empty str or None")
        for name, low in (("max_retries", 0), ("max_tokens", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"adapter setting {name} must be an int or None, got {value!r}")
            if value is not None and value < low:
                raise ValueError(f"adapter setting {name} must be >= {low}, got {value}")
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"adapter setting timeout must be a positive number, got {timeout!r}")
        if not isinstance(self.stream, bool):
            raise TypeError(f"adapter setting stream must be a bool, got {self.stream!r}")
        if self.end_user not in (None, "tenant", "session"):
            raise ValueError(
                f"adapter setting end_user must be 'tenant', 'session' or None, "
                f"got {self.end_user!r}"
            )
        headers = self.default_headers
        if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise TypeError("adapter setting default_headers must map str to str")
        if not isinstance(self.options, Mapping) or not all(
            isinstance(k, str) for k in self.options
        ):
            raise TypeError("adapter setting options must be a mapping with str keys")
        for name, instead in _OWN_OPTIONS.items():
            if name in self.options:
                raise ValueError(f"adapter setting options must not set {name!r}: {instead}")
        object.__setattr__(self, "default_headers", dict(headers))
        object.__setattr__(self, "options", dict(self.options))

    def __repr__(self) -> str:
        return (
            f"AdapterSettings(base_url={_shown_url(self.base_url)!r}, "
            f"max_retries={self.max_retries!r}, timeout={self.timeout!r}, "
            f"stream={self.stream!r}, default_headers={sorted(self.default_headers)}, "
            f"end_user={self.end_user!r}, max_tokens={self.max_tokens!r}, "
            f"options={sorted(self.options)})"
        )


def _shown_url(url: str | None) -> str | None:
    """``url`` without the parts that may hold credentials: user, password and query."""
    if url is None:
        return None
    parts = urlsplit(url)
    query = "..." if parts.query else ""
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, query, ""))


class ProviderAdapter(ABC, Generic[ClientT]):
    """A model of the ``respond`` form backed by a provider's official SDK.

    Thread-safe: sessions sharing one adapter (through a template) call it from
    their own threads at once; SDK clients are built once per distinct
    credentials, under a lock, and the SDKs' clients are thread-safe.

    Args:
        model_id: The provider's model name (``gpt-4.1-mini``, ``claude-sonnet-4-5``...).
        **settings: ``AdapterSettings`` fields.

    Raises:
        ValueError: ``model_id`` is empty.
        TypeError, ValueError: a setting is invalid (see ``AdapterSettings``).
    """

    provider: ClassVar[str]
    """The provider's name in model strings (``openai``, ``anthropic``)."""

    def __init__(self, model_id: str, **settings: Any) -> None:
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id must be a non-empty str, got {model_id!r}")
        self.model_id = model_id
        self.settings = AdapterSettings(**settings)
        self._lock = threading.Lock()
        self._clients: dict[tuple[Any, ...] | None, ClientT] = {}
        self._http: Any = None  # the SDK's HTTP client all our clients share

    @property
    def model_string(self) -> str:
        """``<provider>:<model_id>``, recorded in the session's state."""
        return f"{self.provider}:{self.model_id}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_id!r}, {self.settings!r})"

    def __getstate__(self) -> dict[str, Any]:
        """Configuration only: a worker process builds its own client."""
        return {"model_id": self.model_id, "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.model_id = state["model_id"]
        self.settings = state["settings"]
        self._lock = threading.Lock()
        self._clients = {}
        self._http = None

    def respond(self, request: ModelRequest) -> ModelResponse:
        """Call the provider (streaming if ``settings.stream``) and map its answer.

        Raises:
            Exception: the SDK's own errors, unchanged (after its retries); a stream
                cut off halfway is the SDK's connection error.
            ProviderError: the stream ended before the provider finished, or the
                provider marked the response failed.
        """
        client = self.client(request.credentials)
        if self.settings.stream:
            return self._stream(client, request)
        return self._once(client, request)

    def client(self, credentials: Credentials | None = None) -> ClientT:
        """The SDK client for ``credentials`` (the adapter's own settings when ``None``),
        built on first use; clients share one connection pool."""
        key = None
        if credentials is not None:
            key = (credentials.api_key, tuple(sorted(credentials.headers.items())))
        client = self._clients.get(key)  # a dict read is atomic: no lock on the usual path
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                if self._http is None:
                    self._http = self._new_http_client()
                client = self._new_client(self._http, credentials)
                if len(self._clients) >= _CLIENTS_KEPT:
                    del self._clients[next(iter(self._clients))]
                self._clients[key] = client
        return client

    def close(self) -> None:
        """Close the connection pool (open connections to the provider); the next request
        opens a new one. Thread-safe; call when the adapter is no longer used (one that is
        garbage-collected closes its pool itself)."""
        with self._lock:
            http, self._http = self._http, None
            self._clients.clear()
        if http is not None:
            http.close()

    def __del__(self) -> None:
        # An adapter nobody references any more (one a ProviderRegistry built for a
        # session that ended) closes its connections, as the SDKs' own clients do.
        http = getattr(self, "_http", None)
        if http is not None:
            with contextlib.suppress(Exception):
                http.close()

    def end_user(self, request: ModelRequest) -> str | None:
        """The end-user id to send for ``request`` (see ``AdapterSettings.end_user``)."""
        which = self.settings.end_user
        if which == "tenant":
            return request.tenant_id
        if which == "session":
            return request.session_id or None
        return None

    def sdk_options(self) -> dict[str, Any]:
        """The client options every SDK takes alike, from the settings."""
        settings = self.settings
        options: dict[str, Any] = {}
        if settings.base_url is not None:
            options["base_url"] = settings.base_url
        if settings.max_retries is not None:
            options["max_retries"] = settings.max_retries
        if settings.timeout is not None:
            options["timeout"] = settings.timeout
        return options

    @abstractmethod
    def _new_http_client(self) -> Any:
        """The SDK's default HTTP client, shared by every client of this adapter."""

    @abstractmethod
    def _new_client(self, http: Any, credentials: Credentials | None) -> ClientT:
        """An SDK client on ``http`` for ``credentials`` (or the settings' key)."""

    @abstractmethod
    def _once(self, client: ClientT, request: ModelRequest) -> ModelResponse:
        """One request, the whole answer at once."""

    @abstractmethod
    def _stream(self, client: ClientT, request: ModelRequest) -> ModelResponse:
        """One streamed request: ``request.emit`` each piece; the session assembles them."""


def merged_headers(settings: AdapterSettings, credentials: Credentials | None) -> dict[str, str]:
    """The settings' default headers with the tenant's on top."""
    if credentials is None or not credentials.headers:
        return dict(settings.default_headers)
    return {**settings.default_headers, **credentials.headers}


def api_key(settings: AdapterSettings, credentials: Credentials | None) -> str | None:
    """The tenant's key, else the settings' (``None``: the SDK's environment variable)."""
    if credentials is not None and credentials.api_key is not None:
        return credentials.api_key
    return settings.api_key


for _cls in (AdapterSettings, ProviderAdapter):
    _cls.__module__ = "actors.adapters"
