"""``ModelRequest``: everything one model call gets, for models of the one-argument form.

A model with ``respond(request) -> ModelResponse`` (see ``actors.model``) gets
the prompt and tools, the session's identity (session and tenant id), the
``provider_state`` its last response left, the tenant's ``Credentials``, and a
way to stream (``emit``). The two-argument ``generate(messages, tools)`` form
gets the prompt and tools only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.streaming import Delta, StreamAssembler, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from actors.messages import Message
    from actors.tools import Tool

__all__ = ["Credentials", "ModelRequest"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a model needs to reach its provider on behalf of one tenant.

    An ``AgentHost`` asks its ``credentials`` callback for them at every start
    and resume of a session (``credentials=lambda tenant_id: Credentials(...)``),
    hands them to the model with each request, and never persists them: they
    are in no snapshot, event or log line. ``repr`` hides the values.
    Immutable and thread-safe.

    Attributes:
        api_key: The provider API key; ``None`` leaves the adapter's own (or the
            SDK's environment variable).
        headers: Extra HTTP headers for the provider (an organisation or
            project header, a gateway's key).
    """

    api_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise TypeError(f"Credentials.api_key must be a str or None, got {type(self.api_key)}")
        if self.api_key == "":
            raise ValueError("Credentials.api_key must not be empty; pass None to use the default")
        if not isinstance(self.headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
        ):
            raise TypeError("Credentials.headers must map str header names to str values")
        object.__setattr__(self, "headers", dict(self.headers))

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else "'***'"
        return f"Credentials(api_key={key}, headers={sorted(self.headers)})"


class ModelRequest:
    """One call of a model: what to answer, for whom, with what, and where to stream.

    Built by the session for each call and handed to ``model.respond``; a test
    or a script may build one to call a model directly. Not thread-safe: it
    belongs to one call, on the thread that makes it; ``emit`` publishes on
    the calling thread.

    Args:
        messages: The prompt: the system message (if any) first, then the
            conversation. Read it, do not keep it: it may be a view of the
            session's history.
        tools: The tools the model may call.
        session_id: The session it serves.
        tenant_id: That session's tenant (``None`` outside a host).
        provider_state: What the model's last response left in
            ``ModelResponse.provider_state`` (a continuation id, say), from the
            session's checkpoint after a resume; ``None`` at first. Treat it as
            read-only: return a new one in the response.
        credentials: The tenant's credentials from the host's callback, or ``None``.
        on_delta: Called with each delta emitted (the session publishes it as a
            ``delta`` event); ``None`` only assembles them.
    """

    __slots__ = (
        "_assembler",
        "_on_delta",
        "credentials",
        "messages",
        "provider_state",
        "session_id",
        "tenant_id",
        "tools",
    )

    def __init__(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] = (),
        *,
        session_id: str = "",
        tenant_id: str | None = None,
        provider_state: Mapping[str, Any] | None = None,
        credentials: Credentials | None = None,
        on_delta: Callable[[Delta], object] | None = None,
    ) -> None:
        self.messages = messages
        self.tools = tools
        self.session_id = session_id
        self.tenant_id = tenant_id
        self.provider_state = provider_state
        self.credentials = credentials
        self._on_delta = on_delta
        self._assembler: StreamAssembler | None = None

    def emit(self, delta: Delta) -> None:
        """Stream ``delta`` now: the session publishes it as a ``delta`` event before this
        returns (in a worker process it is written to the host at once), and keeps it for
        ``streamed_message``. An exception a subscriber raises never comes back here.

        Raises:
            TypeError: ``delta`` is neither a ``TextDelta`` nor a ``ToolCallDelta`` (a bare
                ``str`` failed the turn with ``'str' object has no attribute 'id'``).
        """
        if not isinstance(delta, TextDelta | ToolCallDelta):
            raise TypeError(
                f"emit() takes a TextDelta or a ToolCallDelta (from actors), got "
                f"{type(delta).__name__}: wrap answer text as TextDelta(text)"
            )
        assembler = self._assembler
        if assembler is None:
            assembler = self._assembler = StreamAssembler()
        assembler.add(delta)
        if self._on_delta is not None:
            self._on_delta(delta)

    @property
    def streamed(self) -> bool:
        """Whether anything was emitted."""
        return self._assembler is not None

    def streamed_message(self) -> Message:
        """The assistant message the deltas emitted so far make (``StreamAssembler``): what a
        streaming model returns in its ``ModelResponse``.

        Raises:
            ValueError: nothing was emitted, or a tool call never got its name.
        """
        if self._assembler is None:
            raise ValueError("streamed_message(): the model emitted no delta")
        return self._assembler.message()


for _cls in (Credentials, ModelRequest):
    _cls.__module__ = "actors"
