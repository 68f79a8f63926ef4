"""RFC 9457 problem details: every error answer of the gateway, and the mapping of
every library error to a status and a problem type.

A problem's ``type`` is a relative URI, ``/problems/<slug>``; ``retryable`` (an
extension member) says whether sending the same request again may succeed, and
retryable answers carry ``Retry-After``. Details never name internals: an
unexpected error answers 500 with a fixed text (and is logged).
"""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from actors import (
    InvalidMessage,
    PluginError,
    ProviderError,
    RegistryProfileMissing,
    SnapshotDecodeError,
    SnapshotEncodeError,
    SteeringQueueFull,
    TurnLimitExceeded,
    UnknownModel,
    UnsendableRequest,
)
from gateway.schemas import MAX_SESSION_ID
from supervisor import (
    CheckpointNotFound,
    CredentialsUnavailable,
    HostShutDown,
    Killed,
    NodeFenced,
    NotDelivered,
    OwnershipLost,
    SessionAlreadyExists,
    SessionCrashed,
    SessionFailed,
    SessionNotFound,
    SessionOwnedElsewhere,
    SnapshotTooLarge,
    StoreBusy,
    StoreFull,
    StoreUnavailable,
    StoreUnreachable,
    TemplateNotLoadable,
    TemplateNotPicklable,
    WorkerStartError,
)

__all__ = [
    "PROBLEM_JSON",
    "Problem",
    "ProblemError",
    "UnexpectedErrors",
    "instance_of",
    "problem_data",
    "problem_for",
    "problem_response",
    "problem_responses",
    "shown",
    "unauthorized",
]

PROBLEM_JSON: Final = "application/problem+json"
_SHOWN_ID: Final = 40
"""Characters of an over-long session id a 404's detail shows."""
RETRY_AFTER_S: Final = 1
_SHOWN_TEXT: Final = 100
"""Characters of a name the client sent (a field, a template) an answer echoes (``shown``)."""
_SHOWN_MESSAGE: Final = 500
"""Characters of a validation message (which may quote what was sent) an answer shows."""
MAX_INSTANCE: Final = 512
"""Longest ``instance`` a problem answers with (the request's path, percent-encoded): a
longer path (any client may send one of kilobytes) is left out rather than echoed."""
_METHODS: Final = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
"""The methods a 405 may name as allowed (``Allow``): those a route may take."""
_PATH_SAFE: Final = "/!$&'()*+,;=:@-._~"
"""What a path segment may hold unescaped besides letters and digits (RFC 3986 ``pchar``)."""

logger = logging.getLogger("gateway")


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem-details answer. Immutable, thread-safe.

    Attributes:
        status: The HTTP status.
        slug: The last part of its ``type`` URI (``/problems/<slug>``).
        title: Short, the same for every problem of this type.
        detail: This occurrence, for a human.
        retry_after: Seconds for ``Retry-After`` (retryable problems), else ``None``.
        extra: More members of the body (e.g. validation ``errors``).
        headers: More headers of the answer (a 401's ``WWW-Authenticate``).
    """

    status: int
    slug: str
    title: str
    detail: str
    retry_after: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class ProblemError(Exception):
    """Raised by the gateway's own checks to answer with ``problem``."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def instance_of(path: str | None) -> str | None:
    """The ``instance`` member for a request to ``path`` (its decoded path, as ASGI's
    ``scope["path"]`` and ``Request.url.path`` have it): the path percent-encoded, so that
    it is a URI reference whose ``?`` and ``#`` (sent as ``%3F``, ``%23``) are no query or
    fragment, and whose control characters are escaped; ``None`` (left out) when there is
    none, or it is longer than ``MAX_INSTANCE`` characters."""
    if not path:
        return None
    encoded = urllib.parse.quote(path, safe=_PATH_SAFE, errors="replace")
    return encoded if len(encoded) <= MAX_INSTANCE else None


def problem_response(
    problem: Problem, path: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``problem`` as a JSON response with ``application/problem+json`` and ``headers``;
    its ``instance`` is the request's ``path``, as ``instance_of`` makes it (nothing but
    the path, bounded)."""
    body: dict[str, Any] = {
        "type": f"/problems/{problem.slug}",
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
        "retryable": problem.retry_after is not None,
        **problem.extra,
    }
    instance = instance_of(path)
    if instance is not None:
        body["instance"] = instance
    sent = {**problem.headers, **(headers or {})}
    if problem.retry_after is not None:
        sent["Retry-After"] = str(problem.retry_after)
    return JSONResponse(body, status_code=problem.status, headers=sent, media_type=PROBLEM_JSON)


def problem_data(problem: Problem) -> dict[str, Any]:
    """``problem`` as the data of an SSE ``error`` frame the gateway sends (a streamed
    send's failure, an owner node lost mid-stream): the members a JSON answer's body has
    (``status``, ``type`` and ``detail`` first, then ``title`` and ``retryable``). A
    browser's ``EventSource`` fires its own ``error`` event, without ``data``, when the
    connection fails; a session's ``error`` event has ``turn``, ``error`` and ``seq``
    instead, so a client's ``error`` listener tells the three apart."""
    return {
        "status": problem.status,
        "type": f"/problems/{problem.slug}",
        "detail": problem.detail,
        "title": problem.title,
        "retryable": problem.retry_after is not None,
    }


def problem_responses(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the problem answers of one operation beyond those every
    ``/v1`` operation documents (``schemas.PROBLEM_RESPONSES``): status -> description,
    each a ``ProblemOut`` under ``application/problem+json``, the type it is sent with."""
    schema = {"$ref": "#/components/schemas/ProblemOut"}
    return {
        status: {"description": description, "content": {PROBLEM_JSON: {"schema": schema}}}
        for status, description in descriptions.items()
    }


def unauthorized(detail: str, *, realm: str = "sessionvisor", invalid: bool = False) -> Problem:
    """A 401 with the ``WWW-Authenticate`` challenge a 401 must carry (RFC 9110), of the
    bearer scheme (RFC 6750): ``error="invalid_token"`` when a token was sent but is not
    valid (``invalid``), none when none was sent."""
    challenge = f'Bearer realm="{realm}"' + (', error="invalid_token"' if invalid else "")
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": challenge}
    )


def _retry(status: int, slug: str, title: str, detail: str) -> Problem:
    return Problem(status, slug, title, detail, retry_after=RETRY_AFTER_S)


def not_found(session_id: str) -> Problem:
    """The one answer for a session that is missing *or* another tenant's. An id longer
    than any session's (``MAX_SESSION_ID``) is named by its start only, not echoed whole."""
    if len(session_id) <= MAX_SESSION_ID:
        detail = f"no session {session_id!r}"
    else:
        detail = (
            f"no session {session_id[:_SHOWN_ID]!r}... (an id of {len(session_id)} "
            f"characters: a session id has at most {MAX_SESSION_ID})"
        )
    return Problem(404, "session-not-found", "Session not found", detail)


def problem_for(error: BaseException, session_id: str | None = None) -> Problem:
    """The problem a library error answers with (500 ``internal`` for unknown ones).

    A session the error names is named by the id its client knows, never by the
    host's ``tenant/id``.
    """
    problem = _problem_for(error, session_id)
    internal = getattr(error, "session_id", None)
    if isinstance(internal, str) and "/" in internal:
        detail = problem.detail.replace(internal, internal.rpartition("/")[2])
        problem = dataclasses.replace(problem, detail=detail)
    return problem


def _problem_for(error: BaseException, session_id: str | None) -> Problem:
    """``problem_for``'s answer, before the session's id is made public.

    The order matters: subclasses before their bases (``WorkerCrashed`` is a
    ``SessionCrashed``).
    """
    match error:
        case ProblemError():
            return error.problem
        case SessionNotFound():
            return not_found(session_id or error.session_id)
        case CheckpointNotFound():
            return Problem(404, "checkpoint-not-found", "Checkpoint not found", str(error))
        case SessionAlreadyExists():
            detail = f"session {error.session_id!r} already exists; use another id, or delete it"
            return Problem(409, "session-exists", "Session already exists", detail)
        case SessionFailed():
            detail = (
                f"{_which(error, session_id)} was given up after repeated crashes (the server "
                "logged why); its checkpoints are kept: the server's operator can resume it "
                "once the cause is fixed, or DELETE it"
            )
            return Problem(409, "session-failed", "Session given up after repeated crashes", detail)
        case SessionCrashed() | NotDelivered() | Killed():
            detail = (
                f"{_which(error, session_id)} crashed (the server logged why); send again "
                "once it is back, from its last checkpoint"
            )
            return _retry(503, "session-crashed", "Session crashed; send again", detail)
        case HostShutDown():
            detail = "this server is shutting down; send again once it is back (or to another node)"
            return _retry(503, "shutting-down", "Server shutting down", detail)
        case StoreBusy():  # a TimeoutError of the store's, not the session's
            return _retry(503, "unavailable", "Temporarily unavailable", "StoreBusy")
        case StoreFull():
            return _retry(503, "store-full", "Checkpoint store full", "StoreFull")
        case TimeoutError():
            return _retry(503, "timeout", "No answer in time", "the session did not answer in time")
        case WorkerStartError() | StoreUnavailable() | StoreUnreachable() | OwnershipLost():
            return _retry(503, "unavailable", "Temporarily unavailable", type(error).__name__)
        case NodeFenced():
            detail = (  # why and which node are the operator's to read in the log
                "this server lost its lease on the cluster's database and serves no session "
                "until it renews it; send again: another node takes the session over"
            )
            return _retry(503, "node-fenced", "Server not serving sessions", detail)
        case SessionOwnedElsewhere():
            detail = (  # the owner's address is the cluster's own, not the client's to call
                f"{_which(error, session_id)} is served by another node ({error.node!r}) "
                "right now; send again: this server routes the request there"
            )
            return _retry(503, "owned-elsewhere", "Session served by another node", detail)
        case CredentialsUnavailable():
            return _retry(503, "credentials-unavailable", "Credentials unavailable", str(error))
        case SteeringQueueFull():
            return _retry(429, "steering-queue-full", "Too many steering messages", str(error))
        case UnsendableRequest():  # before ProviderError: the client's input, not retryable
            return Problem(422, "invalid-input", "Invalid input", str(error))
        case ProviderError():
            return _retry(502, "provider-error", "The model provider failed", str(error))
        case TurnLimitExceeded():
            return Problem(422, "turn-limit", "Turn took too many model calls", str(error))
        case SnapshotTooLarge():
            return Problem(507, "snapshot-too-large", "Session state too large", str(error))
        case RegistryProfileMissing() | UnknownModel() | PluginError():
            return Problem(500, "template-unusable", "The agent template failed", str(error))
        case TemplateNotLoadable() | TemplateNotPicklable():  # before TypeError
            return _not_usable_in_workers(error)
        case SnapshotDecodeError():
            return _unreadable(error, session_id)
        case SnapshotEncodeError():
            return Problem(500, "checkpoint-unreadable", "A checkpoint cannot be used", str(error))
        case InvalidMessage() | ValueError() | TypeError():
            return Problem(422, "invalid-input", "Invalid input", str(error))
    logger.error("unexpected error answering a request", exc_info=error)
    return Problem(500, "internal", "Internal error", "an unexpected error; the server logged it")


def _which(error: BaseException, session_id: str | None) -> str:
    """The session a crash's answer names, never by what the crash said: its reason (an
    exception's text, which may hold anything the session held) and the actor that died
    are the server's, and logged there."""
    named = session_id or getattr(error, "session_id", None)
    return "the session" if named is None else f"session {named!r}"


def _not_usable_in_workers(error: TemplateNotLoadable | TemplateNotPicklable) -> Problem:
    """The server cannot send its agent template to its worker processes (a part
    cloudpickle refuses), or they cannot load it (a module they cannot import): the
    operator's configuration, so not retryable (a ``TemplateNotPicklable`` was a 422
    "invalid input", as if the client had sent something wrong); logged, and answered
    without the error's words, which name the server's modules and processes."""
    logger.error("answering that the agent template cannot run in the workers: %s", error)
    detail = (
        "the server cannot run its agent template in its worker processes (a configuration "
        "error of the server; it logged why)"
    )
    return Problem(500, "template-unusable", "The agent template failed", detail)


def _unreadable(error: SnapshotDecodeError, session_id: str | None) -> Problem:
    """A stored checkpoint that cannot be read: logged, and answered without the store's
    words, which name the server's files (a damaged page's database path) and the host's
    ``tenant/id`` of the session."""
    logger.error("answering that a checkpoint cannot be read: %s", error)
    detail = (
        f"a checkpoint of {_which(error, session_id)} cannot be read (damaged, or saved by "
        "a newer version); the server logged which, and why"
    )
    return Problem(500, "checkpoint-unreadable", "A checkpoint cannot be used", detail)


def shown(text: str, limit: int = _SHOWN_TEXT) -> str:
    """``text`` as an answer echoes what the client sent: whole up to ``limit`` characters,
    else its start and its length (a body of a megabyte came back whole, twice)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def validation_problem(error: RequestValidationError) -> Problem:
    """Malformed JSON answers 400; a body or parameter of the wrong shape 422. What the
    errors echo of the request (an unknown field's name in ``loc``, a value quoted in
    ``msg``) is shortened (``shown``)."""
    errors = [
        {
            "loc": [p if isinstance(p, int) else shown(str(p)) for p in e.get("loc", ())],
            "msg": shown(str(e.get("msg", "")), _SHOWN_MESSAGE),
            "type": str(e.get("type")),
        }
        for e in error.errors()
    ]
    if any(e["type"] == "json_invalid" for e in errors):
        return Problem(400, "malformed-json", "Malformed JSON", "the body is not valid JSON")
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    where = ".".join(str(part) for part in first["loc"])
    return Problem(
        422,
        "invalid-request",
        "Invalid request",
        f"{where}: {first['msg']}",
        extra={"errors": errors},
    )


async def handle_problem(request: Request, error: Exception) -> JSONResponse:
    """Exception handler for every error a route raises."""
    session_id = request.path_params.get("session_id")
    return problem_response(problem_for(error, session_id), request.scope.get("path"))


async def handle_validation(request: Request, error: Exception) -> JSONResponse:
    """Exception handler for FastAPI's request validation."""
    assert isinstance(error, RequestValidationError)
    return problem_response(validation_problem(error), request.scope.get("path"))


async def handle_http(request: Request, error: Exception) -> JSONResponse:
    """Exception handler for routing errors (unknown path, wrong method)."""
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400 and isinstance(error.__cause__, ValueError | RecursionError):
        # FastAPI's "error parsing the body": bytes that are not UTF-8, JSON nested past
        # what the parser takes (json's own errors answer through handle_validation)
        detail = "the body is not valid JSON: UTF-8 text, nested a few hundred levels at most"
        problem = Problem(400, "malformed-json", "Malformed JSON", detail)
        return problem_response(problem, request.scope.get("path"))
    if error.status_code == 405:
        return _method_not_allowed(request)
    slug = {404: "not-found"}.get(error.status_code, "http-error")
    detail = str(error.detail)
    path = str(request.scope.get("path", ""))
    if error.status_code == 404 and len(path) > 1 and path.endswith("/"):
        # no redirect (``api_app``): say what to send instead
        detail = f"no such path; the API's paths end without '/': {shown(path.rstrip('/'))}"
    problem = Problem(error.status_code, slug, str(error.detail), detail)
    return problem_response(problem, request.scope.get("path"))


def _method_not_allowed(request: Request) -> JSONResponse:
    """A 405 naming the methods the path allows, in its detail and in ``Allow``, which
    a 405 must carry (RFC 9110): each method some route takes on the path (asked of the
    routes themselves), where Starlette's own ``Allow`` named the first route's methods
    only (``GET`` for ``/v1/sessions/{id}``, which takes ``DELETE`` too), and this
    handler dropped even that."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    ]
    listed = ", ".join(allowed)
    detail = f"{request.method[:20]!r} is not allowed here; this path allows {listed}"
    problem = Problem(405, "method-not-allowed", "Method Not Allowed", detail)
    return problem_response(problem, request.scope.get("path"), headers={"Allow": listed})


class UnexpectedErrors:
    """ASGI middleware, inside the app's own: an exception no handler took (a bug, a
    database driver's own error) answers a logged problem-details 500 when nothing of the
    response was sent yet, and the connection stays open for the client's next request.
    Starlette's last resort answered ``text/plain`` and raised it on to the server, which
    closed the connection. Stateless, so safe for concurrent requests.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # too late for another answer: the server ends the response
                raise
            session_id = scope.get("path_params", {}).get("session_id")
            response = problem_response(problem_for(exc, session_id), scope.get("path"))
            await response(scope, receive, send)
