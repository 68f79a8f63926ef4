"""The JSON bodies of the ``/v1`` API, as pydantic models (they also make the OpenAPI
document). Requests are strict: unknown fields and wrong types answer 422."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "JSON_BODY_RESPONSES",
    "PROBLEM_RESPONSES",
    "CheckpointOut",
    "CheckpointRequest",
    "CheckpointsOut",
    "CreateSession",
    "HistoryOut",
    "MessageOut",
    "ProblemOut",
    "SendMessage",
    "SendResult",
    "SessionOut",
    "SessionsOut",
    "SteerMessage",
]

_STRICT = ConfigDict(extra="forbid", strict=True)

MAX_SESSION_ID = 200
"""Longest session id, in characters: a create refuses a longer one (422), and a path
naming one answers the 404 of an unknown session (``gateway._context.session_path``)."""
MAX_METADATA_ENTRIES = 64
MAX_METADATA_KEY = 200
MAX_METADATA_VALUE = 2_000


class CreateSession(BaseModel):
    """``POST /v1/sessions``."""

    model_config = _STRICT
    template: str = Field(min_length=1, description="A template name the server was started with")
    session_id: str | None = Field(
        default=None, min_length=1, max_length=MAX_SESSION_ID, pattern=r"^[A-Za-z0-9_.:-]+$"
    )
    metadata: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_METADATA_ENTRIES,
        description="Your own labels: text keys and values",
    )

    @field_validator("session_id")
    @classmethod
    def _addressable(cls, session_id: str | None) -> str | None:
        """Refuse ids that no URL can name: clients resolve ``.`` and ``..`` path segments."""
        if session_id is not None and not session_id.strip("."):
            raise ValueError(f"{session_id!r} cannot be a session id: a URL path cannot hold it")
        return session_id

    @field_validator("metadata")
    @classmethod
    def _storable(cls, metadata: dict[str, str]) -> dict[str, str]:
        """Refuse, before anything is created, text no store can hold (a lone surrogate,
        which JSON's ``\\ud800`` escapes can carry) and keys or values past their limits."""
        for key, value in metadata.items():
            if not 0 < len(key) <= MAX_METADATA_KEY:
                raise ValueError(f"a key must be 1 to {MAX_METADATA_KEY} characters, got {key!r}")
            if len(value) > MAX_METADATA_VALUE:
                raise ValueError(f"the value of {key!r} is over {MAX_METADATA_VALUE} characters")
            _utf8("a key", key)
            _utf8(f"the value of {key!r}", value)
        return metadata


def _utf8(what: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = f"a lone surrogate at index {exc.start}"
        raise ValueError(f"{what} holds {where}, which is not text: send UTF-8 text") from None


class SendMessage(BaseModel):
    """``POST /v1/sessions/{id}/messages``."""

    model_config = _STRICT
    text: str = Field(min_length=1)
    stream: bool = Field(default=False, description="Answer as Server-Sent Events")


class SteerMessage(BaseModel):
    """``POST /v1/sessions/{id}/steer``."""

    model_config = _STRICT
    text: str = Field(min_length=1)


class CheckpointRequest(BaseModel):
    """``POST /v1/sessions/{id}/checkpoints``."""

    model_config = _STRICT
    label: str | None = Field(default=None, min_length=1, max_length=200)


class UsageOut(BaseModel):
    """Token counts."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    total: int


class SessionOut(BaseModel):
    """One session of the caller's tenant."""

    session_id: str
    tenant_id: str
    template: str | None
    status: str
    model: str
    created_at: int = Field(description="ms since the Unix epoch")
    metadata: dict[str, str]
    usage: UsageOut


class SessionsOut(BaseModel):
    """``GET /v1/sessions``."""

    sessions: list[SessionOut]


class MessageOut(BaseModel):
    """One message of a conversation (``actors.Message.to_dict``)."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = None


class SendResult(BaseModel):
    """The answer of a turn."""

    message: MessageOut


class HistoryOut(BaseModel):
    """A page of the conversation, oldest first."""

    messages: list[MessageOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page")


class CheckpointOut(BaseModel):
    """One stored checkpoint (metadata only)."""

    checkpoint_id: str
    saved_at: str
    label: str | None
    size: int | None = None


class CheckpointsOut(BaseModel):
    """``GET /v1/sessions/{id}/checkpoints``, newest first."""

    checkpoints: list[CheckpointOut]


class ProblemOut(BaseModel):
    """An error answer: RFC 9457 problem details (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(description="/problems/<slug>: what kind of problem")
    title: str
    status: int
    detail: str = Field(description="This occurrence, for a human")
    retryable: bool = Field(description="Sending the same request again may succeed")
    instance: str | None = Field(
        default=None,
        description="The request's path, percent-encoded (no query); left out when over 512 "
        "characters",
    )


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "description": description}
    for status, description in (
        (400, "Malformed JSON, or a bad cursor"),
        (401, "No valid API key"),
        (404, "No such session (or another tenant's), or checkpoint"),
        (409, "The session exists already, was given up, or the tenant has too many"),
        (413, "The body is too large"),
        (422, "A body or parameter of the wrong shape, or unusable input"),
        (429, "Too many requests of this key at once (see Retry-After)"),
        (
            503,
            "The session is restarting, a store is busy, or this cluster node fenced "
            "itself or lost the session to another node (retryable: see Retry-After), or "
            "its template is not served here",
        ),
    )
}
"""The problem answers every ``/v1`` operation documents."""

JSON_BODY_RESPONSES: dict[int | str, dict[str, Any]] = {
    415: {
        "model": ProblemOut,
        "description": "The body is not JSON (send it with 'Content-Type: application/json')",
    }
}
"""The problem answers an operation taking a JSON body documents as well."""


def message_out(data: dict[str, Any]) -> MessageOut:
    """A ``Message.to_dict()`` as its response model."""
    return MessageOut.model_validate(data)
