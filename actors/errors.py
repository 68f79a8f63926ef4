"""Every error the ``actors`` package raises, in one place.

Siblings are told apart by what the caller should do next: a malformed message
dict (fix the input) vs a snapshot that cannot be decoded (the bytes are bad)
vs one from a newer schema (upgrade the code); a profile that is missing
(re-register it) vs a model that failed on a turn (retry or report; a model call
that ended in a ``BaseException`` such as ``asyncio.CancelledError`` is a
``ModelCallAborted``, a ``ProviderError``).
"""

from __future__ import annotations

__all__ = [
    "ActorsError",
    "CheckpointAborted",
    "InvalidMessage",
    "ModelCallAborted",
    "ModelScriptExhausted",
    "PluginError",
    "ProviderError",
    "RegistryProfileMissing",
    "SnapshotDecodeError",
    "SnapshotEncodeError",
    "SteeringQueueFull",
    "ToolDefinitionError",
    "TurnLimitExceeded",
    "UnknownModel",
    "UnsendableRequest",
]


class ActorsError(Exception):
    """Base class of every error raised by the ``actors`` package."""


class InvalidMessage(ActorsError, ValueError):
    """A dict handed to ``Message/ToolCall/Usage.from_dict`` is malformed.

    ``field`` names the offending field so the producer can be fixed.
    """

    def __init__(self, kind: str, field: str, problem: str) -> None:
        self.kind = kind
        self.field = field
        super().__init__(f"invalid {kind}: field {field!r} {problem}")


class RegistryProfileMissing(ActorsError, LookupError):
    """A ``registry:<profile>:...`` model string names a profile nobody registered.

    Differs from a provider that failed: the fix is to ``register`` the profile
    (for example at host start-up) and try again.
    """

    def __init__(self, profile: str) -> None:
        self.profile = profile
        super().__init__(
            f"provider profile {profile!r} is not registered; "
            "register it with ProviderRegistry.register() and try again"
        )


class UnknownModel(ActorsError, LookupError):
    """A model string names no registered plain model, is a malformed ``registry:``
    string, or names a profile registered for another provider.

    Differs from ``RegistryProfileMissing``: the profile exists or was never
    needed; the string itself is wrong.
    """


class ModelScriptExhausted(ActorsError, RuntimeError):
    """A ``ScriptedModel`` was asked for more responses than it was given."""

    def __init__(self, given: int) -> None:
        self.given = given
        super().__init__(
            f"ScriptedModel ran out of responses after {given}; "
            "give it one response per expected model call"
        )


class ToolDefinitionError(ActorsError, TypeError):
    """A function cannot be turned into a tool (for example a parameter without a type hint
    that maps to JSON schema, or ``*args``)."""


class TurnLimitExceeded(ActorsError, RuntimeError):
    """A turn needed more model calls than ``max_steps``; the model keeps calling tools.

    The tools the last allowed model call asked for are not run: no model call is left
    to read their results. Like any failed turn it is rolled back: the history is as
    before ``send`` (usage still counts the tokens spent). Raise ``max_steps`` or fix
    the tool loop.
    """

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        super().__init__(
            f"turn stopped after max_steps={max_steps} model calls without a final answer"
        )


class SteeringQueueFull(ActorsError, RuntimeError):
    """``steer`` was refused because ``max_steering_queue`` messages are already waiting."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"steering queue is full ({limit} messages waiting); "
            "wait for the next model call or raise max_steering_queue"
        )


class PluginError(ActorsError, RuntimeError):
    """A plugin's ``session_start`` hook raised, so the session could not start.

    The original exception is the ``__cause__``. Exceptions in any other hook
    never raise this: they are reported as ``plugin_error`` events instead.
    """

    def __init__(self, plugin: str, hook: str, error: BaseException) -> None:
        self.plugin = plugin
        self.hook = hook
        self.error = error
        super().__init__(f"plugin {plugin!r} failed in {hook}: {error!r}")
        self.__cause__ = error  # also after a pickle round trip (from a worker process)

    def __reduce__(self) -> tuple[type[PluginError], tuple[str, str, BaseException]]:
        # Pickles (to cross from a worker process) with the plugin's own exception.
        return (PluginError, (self.plugin, self.hook, self.error))


class ProviderError(ActorsError, RuntimeError):
    """A provider's answer that an adapter cannot use although its SDK raised nothing: a
    stream that ended before the provider finished it (the connection closed cleanly
    halfway), a response the provider marked failed, or a tool call without a tool name.
    Like any model error it fails the turn, which is rolled back.

    Differs from the SDK's own errors (``openai.RateLimitError``,
    ``anthropic.APIConnectionError``, ...), which adapters let through unchanged.
    """


class UnsendableRequest(ProviderError, ValueError):
    """The conversation holds what the model's provider cannot be sent, found by its adapter
    before any request: the Anthropic Messages API takes no user message without text, and
    with the user's empty text left out a request would end with the model's own last answer,
    which the API continues as a prefill instead of answering. The turn fails and is rolled
    back, as for any model error; the message says what to send instead.
    """


class ModelCallAborted(ProviderError):
    """A model's ``generate`` or ``respond`` raised a ``BaseException`` that is not an
    ``Exception``: ``asyncio.CancelledError`` (an asyncio call inside the model was
    cancelled, by a timeout say) or a library's own. The call failed, not the session: the
    turn fails and is rolled back, as for any model error, and the session goes on (a
    ``SystemExit``, ``KeyboardInterrupt`` or a ``BaseExceptionGroup`` holding one keeps its
    meaning instead). ``error`` is the exception, also the ``__cause__``. Retry the send.
    """

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(f"the model call ended with {error!r}; the turn was rolled back")
        self.__cause__ = error

    def __reduce__(self) -> tuple[type[ModelCallAborted], tuple[BaseException]]:
        return (ModelCallAborted, (self.error,))


class CheckpointAborted(ActorsError, RuntimeError):
    """A session's ``checkpointer`` raised a ``BaseException`` that is not an ``Exception``:
    ``asyncio.CancelledError`` (an asyncio store's save was cancelled, by a timeout say) or
    a library's own. The save failed, not the session: the turn is rolled back, as when
    the checkpointer raises an ``Exception`` (which reaches the caller as it is), and the
    session goes on (a ``SystemExit``, ``KeyboardInterrupt`` or a ``BaseExceptionGroup``
    holding one keeps its meaning instead). ``error`` is the exception, also the
    ``__cause__``. The answer is not durable: send the same text again.
    """

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(f"the checkpointer ended with {error!r}; the turn was rolled back")
        self.__cause__ = error

    def __reduce__(self) -> tuple[type[CheckpointAborted], tuple[BaseException]]:
        return (CheckpointAborted, (self.error,))


class SnapshotEncodeError(ActorsError, TypeError):
    """A snapshot holds a value strict serialization refuses; ``path`` says where it sits."""

    def __init__(self, path: str, value: object, problem: str | None = None) -> None:
        self.path = path
        detail = problem or f"{type(value).__qualname__} is not a plain value"
        super().__init__(f"cannot serialize snapshot value at {path or '<root>'}: {detail}")


class SnapshotDecodeError(ActorsError, ValueError):
    """Bytes cannot be read as a snapshot: malformed, truncated, wrong types, or from a
    newer schema than this code supports. ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"cannot decode snapshot: {reason}")


for _cls in (
    ActorsError,
    InvalidMessage,
    RegistryProfileMissing,
    UnknownModel,
    ModelScriptExhausted,
    ToolDefinitionError,
    TurnLimitExceeded,
    SteeringQueueFull,
    PluginError,
    ProviderError,
    UnsendableRequest,
    ModelCallAborted,
    CheckpointAborted,
    SnapshotEncodeError,
    SnapshotDecodeError,
):
    _cls.__module__ = "actors"
