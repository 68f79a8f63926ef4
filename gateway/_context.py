"""What every route needs: the ``Gateway`` (host, templates, keys, limits), the caller's
key, and the mapping between the ids clients see and the host's session ids.

Session ids are per tenant: the host runs the session a client calls ``x`` as
``<tenant>/x``. Two tenants may then both have an ``x``, and creating one never
tells a tenant that another tenant's session exists.
"""

from __future__ import annotations

import asyncio
import email.message
import weakref
from dataclasses import dataclass, field
from typing import Annotated, NamedTuple

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from actors import AgentTemplate
from gateway.keys import ApiKey, ApiKeys
from gateway.limits import Limits
from gateway.problems import Problem, ProblemError, not_found, unauthorized
from gateway.schemas import MAX_SESSION_ID
from supervisor import AsyncAgentHost, EventStream, SessionInfo, SessionNotFound
from supervisor.metrics import HostMetrics

__all__ = [
    "AUTHENTICATED",
    "Call",
    "Caller",
    "CallerCheck",
    "Gateway",
    "GatewayDep",
    "JsonCaller",
    "SessionCaller",
    "SessionJsonCaller",
    "authenticated",
    "gateway_of",
    "host_id",
    "is_json",
    "json_body",
    "public_id",
    "session_path",
]


@dataclass
class Gateway:
    """The parts a running gateway serves from, all thread-safe (host, keys, limits,
    metrics); and its open event streams and per-id locks (``id_lock``), which only its
    event loop touches.

    Attributes:
        ahost: The host, driven without a thread per waiting request.
        templates: Template name -> template, as given to ``serve``.
        keys: API keys, and which template each session was created from.
        limits: See ``Limits``.
        metrics: The host's Prometheus metrics, served at ``/metrics``.
        metrics_token: The bearer token ``/metrics`` asks for, or ``None`` (open).
    """

    ahost: AsyncAgentHost
    templates: dict[str, AgentTemplate]
    keys: ApiKeys
    limits: Limits
    metrics: HostMetrics
    metrics_token: str | None = None
    _streams: weakref.WeakSet[EventStream] = field(
        default_factory=weakref.WeakSet, init=False, repr=False
    )  # weak: a stream whose answer never started (its client left) is freed, unsubscribed
    _streams_ended: bool = field(default=False, init=False, repr=False)
    _ending: asyncio.Event | None = field(default=None, init=False, repr=False)
    _id_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary, init=False, repr=False
    )  # weak: a lock lives while a request holds or awaits it

    def id_lock(self, internal: str) -> asyncio.Lock:
        """The lock of the host's session id ``internal``: a create and a delete of one id
        hold it through their steps (the key store's record, the host's session, its
        checkpoints), so neither runs between the other's; without it a delete's
        ``forget_session`` could drop the record of a session created after its stop.
        Keep a reference while holding it; use it on the server's event loop."""
        lock = self._id_locks.get(internal)
        if lock is None:
            lock = asyncio.Lock()
            self._id_locks[internal] = lock
        return lock

    async def follow(self, stream: EventStream) -> None:
        """Count ``stream`` (an ``/events`` answer's) among the open ones, which
        ``end_streams`` ends; ended at once if they were ended already. Call it and
        ``unfollow`` on the server's event loop."""
        self._streams.add(stream)
        if self._streams_ended:
            await stream.aclose()

    def unfollow(self, stream: EventStream) -> None:
        """``stream`` is closed: no longer one of the open ones."""
        self._streams.discard(stream)

    async def end_streams(self) -> None:
        """End every open ``/events`` stream, and those opened from now on, cleanly (the
        answer's body ends; the client reconnects with ``Last-Event-ID``). A stopping
        server calls it first: an event stream ends only when its session does, so the
        graceful stop would wait for them until its timeout, then cut them off. Call it
        on the server's event loop."""
        self._streams_ended = True
        if self._ending is not None:
            self._ending.set()
        for stream in list(self._streams):
            await stream.aclose()

    async def streams_end(self) -> None:
        """Return once ``end_streams`` has run (at once if it has): an event stream this
        server relays from another node (``gateway.routing``) ends then as its own do.
        Call it on the server's event loop."""
        if self._streams_ended:
            return
        if self._ending is None:
            self._ending = asyncio.Event()
        await self._ending.wait()

    def owned(self, tenant_id: str, session_id: str) -> SessionInfo:
        """The host's row of the tenant's session ``session_id`` (a public id).

        Raises:
            SessionNotFound: missing, or another tenant's (the same error).
        """
        try:
            return self.ahost.host.session_info(host_id(tenant_id, session_id), tenant_id=tenant_id)
        except SessionNotFound:
            raise SessionNotFound(session_id) from None  # the id the client named

    def unserved(self, token: str | None, session_id: str) -> Problem | None:
        """Why the session ``session_id`` of the bearer of ``token``, which the host does
        not have, cannot be served, if it exists: its template is not among this server's
        (so it was not resumed at start). ``None`` otherwise, or for another tenant's.

        Blocking (it reads the key store): call it off the event loop, as
        ``app._handle_not_found`` does."""
        key = self.keys.authenticate(token) if token else None
        if key is None:
            return None
        record = self.keys.session_row(host_id(key.tenant_id, session_id))
        if record is None or record.template in self.templates:
            return None
        return template_not_served(session_id, record.template)


def host_id(tenant_id: str, session_id: str) -> str:
    """The host's id of the tenant's session ``session_id``."""
    return f"{tenant_id}/{session_id}"


def public_id(internal: str) -> str:
    """The id clients use for the host's session ``internal``."""
    return internal.rpartition("/")[2]


async def gateway_of(request: Request) -> Gateway:
    """The app's ``Gateway`` (a FastAPI dependency). ``async`` although it awaits
    nothing: FastAPI runs a plain ``def`` dependency in its thread pool, a thread
    hop on every request."""
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(gateway_of)]

_DESCRIPTION = "An API key from `sessionvisor keys create`"
_bearer = HTTPBearer(auto_error=False, description=_DESCRIPTION)


AUTHENTICATED = "sessionvisor.api_key"
"""Key of ``scope["state"]`` where a middleware that already checked the request's key
(``gateway.routing``, off the event loop) leaves the ``ApiKey``, so it is checked once."""


async def authenticated(request: Request) -> ApiKey:
    """The valid API key of the request, checked once per request: ``CallerCheck`` checks
    it and leaves it in the request's scope (``AUTHENTICATED``), where a middleware may
    have left it already (``gateway.routing`` checks it off the event loop).

    Raises:
        ProblemError: 401, no bearer token, or one that is unknown or revoked.
    """
    state = request.scope.setdefault("state", {})
    key: ApiKey | None = state.get(AUTHENTICATED)
    if key is not None:
        return key
    credentials = await _bearer(request)
    if credentials is None:
        raise ProblemError(unauthorized("send an API key as 'Authorization: Bearer sv_...'"))
    gateway: Gateway = request.app.state.gateway
    key = gateway.keys.authenticate(credentials.credentials)
    if key is None:
        raise ProblemError(unauthorized("the API key is unknown or revoked", invalid=True))
    state[AUTHENTICATED] = key
    return key


class Call(NamedTuple):
    """What a route serving a caller works with: the gateway, and the caller's valid key."""

    gateway: Gateway
    key: ApiKey


class CallerCheck(HTTPBearer):
    """The one FastAPI dependency of a route of the API: the caller's key (``authenticated``),
    then the route's own checks of the request, in that order (401 first, whatever else is
    wrong), before FastAPI reads its parameters and body (422). Answers a ``Call``.

    One dependency, not one per check: FastAPI solves each dependency on every request,
    and the message route's five (key, bearer scheme, path, body type, gateway) cost 70 us
    of CPU per turn more than this one (about a fifth of what the gateway adds to a
    bare ASGI app). A security scheme itself, so the OpenAPI document declares the
    bearer scheme without a dependency of its own. Thread-safe (immutable once built).

    Args:
        session_path: Refuse a path's session id no session can have (``session_path``).
        json_body: Refuse a body that is not JSON (``json_body``).
    """

    def __init__(self, *, session_path: bool = False, json_body: bool = False) -> None:
        super().__init__(
            auto_error=False, scheme_name=_bearer.scheme_name, description=_DESCRIPTION
        )
        self.session_path = session_path
        self.json_body = json_body

    async def __call__(self, request: Request) -> Call:  # type: ignore[override]
        key = await authenticated(request)
        if self.session_path:
            session_path(request.path_params["session_id"])
        if self.json_body:
            await json_body(request)
        gateway: Gateway = request.app.state.gateway
        return Call(gateway, key)


Caller = Annotated[Call, Depends(CallerCheck())]
"""A route's caller: its key checked (401)."""
JsonCaller = Annotated[Call, Depends(CallerCheck(json_body=True))]
"""A route's caller, then its JSON body's media type (415)."""
SessionCaller = Annotated[Call, Depends(CallerCheck(session_path=True))]
"""A route's caller, then the session id of its path (404)."""
SessionJsonCaller = Annotated[Call, Depends(CallerCheck(session_path=True, json_body=True))]
"""A route's caller, the session id of its path, then its JSON body's media type."""


def is_json(content_type: str) -> bool:
    """Whether the ``Content-Type`` value ``content_type`` names JSON: ``application/json``
    or an ``application/<name>+json`` type, in any case, with any parameters (``charset``).
    FastAPI's own rule, so a body this accepts is one FastAPI reads as JSON."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


async def json_body(request: Request) -> None:
    """Refuse a request body that is not JSON (for the routes that take a JSON body:
    ``JsonCaller``), before its fields are read: a form or text body would otherwise answer
    a 422 about the body's shape, not its type. A body without ``Content-Type`` is read as
    JSON (``api_app``), and no body is left to the route (its fields may be optional).

    Raises:
        ProblemError: 415, naming the media type sent and the one expected.
    """
    content_type = request.headers.get("content-type")
    if not content_type or is_json(content_type) or not await request.body():
        return
    sent = content_type.partition(";")[0].strip()[:100]
    detail = f"the body is {sent!r}; send JSON, with 'Content-Type: application/json'"
    raise ProblemError(Problem(415, "unsupported-media-type", "Unsupported media type", detail))


def session_path(session_id: str) -> None:
    """Refuse a path's session id longer than any session's (``MAX_SESSION_ID``, what a
    create allows) with the 404 of an unknown id, before anything looks it up: nothing
    leaks, and its detail does not echo it whole (for every route with a
    ``{session_id}``: ``SessionCaller``).

    Raises:
        ProblemError: 404 ``session-not-found``.
    """
    if len(session_id) > MAX_SESSION_ID:
        raise ProblemError(not_found(session_id))


def template_not_served(session_id: str, template: str) -> Problem:
    """The answer for a session whose template this server was not started with."""
    detail = (
        f"session {session_id!r} was created from template {template!r}, which this server "
        f"does not serve; restart it with --template {template}=pkg.module:attr, or delete "
        "the session"
    )
    return Problem(503, "template-not-served", "The session's template is not served", detail)
