"""``ClusterRouting``: any node of a cluster answers for any session, by forwarding.

The route of a request naming a session (``/v1/sessions/{id}...``) on a node::

    this node holds the session's lease ──────────────────────────▶ served here
    else the owner, from the cache or one read by primary key:
        a live other node ── forwarded over HTTP, carrying the epoch ──▶ its answer
              409 stale-epoch (it no longer holds that epoch) ── drop the cache, again
              unreachable before it answered ── drop the cache, again (then 503)
        no live owner ── resumed here on its template (a claim) ───────▶ served here
              the claim lost a race ── again: the winner is now the live owner
              no checkpoint ── nothing claimed (a create may be in flight) ──▶ here (404)
        never claimed ───────────────────────────────────────────────▶ served here (404)

``GET /v1/sessions`` (not forwarded) is answered here too, with the tenant's
sessions on every node (``gateway._listing``); a forwarded one gets this node's own.

At most ``MAX_ROUTES`` rounds, then a retryable 503. An owner that refuses the
connection while it still holds the lease is asked again, backing off, for up to
``REFUSED_WAIT`` seconds before those rounds count: a draining node closes its
socket a moment before it releases its sessions, and a request that arrives in
between is then served by the node that takes the session over, not answered
503. (A killed owner's lease lapses only after its TTL; past ``REFUSED_WAIT``
the request gets the retryable 503.) A forwarded request carries
``X-Sessionvisor-Forwarded-By`` and is never forwarded again: the node it
reaches serves it or answers 409, so a loop is impossible. Every answer names
the node that served it in ``X-Sessionvisor-Node`` (as does every other answer).

While a forwarded request waits for its answer (or a streamed answer for its
next bytes) the owner's row is read again every ``ttl / 3``; an owner that lost
its lease (dead, frozen, drained) ends the wait with a retryable 503 (or, in a
stream, an ``error`` frame), never a hang. A read the database fails does not end
it, unless such reads go on failing for longer than the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from actors import AgentTemplate
from gateway._context import AUTHENTICATED, Gateway, host_id
from gateway._listing import ClusterListing
from gateway.keys import ApiKeys
from gateway.limits import _bearer
from gateway.problems import Problem, problem_data, problem_response
from gateway.schemas import MAX_SESSION_ID
from gateway.sse import frame
from supervisor import (
    AgentHost,
    CheckpointNotFound,
    SessionAlreadyExists,
    SessionNotFound,
    SessionOwnedElsewhere,
    StoreBusy,
    StoreUnreachable,
)
from supervisor.cluster import ClusterNode, Owner

__all__ = [
    "EPOCH_HEADER",
    "FORWARDED_HEADER",
    "MAX_ROUTES",
    "NODE_HEADER",
    "REFUSED_WAIT",
    "ClusterRouting",
    "Route",
]

logger = logging.getLogger("gateway.routing")

FORWARDED_HEADER: Final = "x-sessionvisor-forwarded-by"
"""Set on a forwarded request (the forwarding node's id): it is never forwarded again."""
EPOCH_HEADER: Final = "x-sessionvisor-epoch"
"""The session epoch the forwarding node believes its owner holds."""
NODE_HEADER: Final = "x-sessionvisor-node"
"""On every answer about a session: the id of the node that served it."""
MAX_ROUTES: Final = 3
REFUSED_WAIT: Final = 2.0
"""Seconds a request waits, asking again, on an owner that refuses connections."""
_REFUSED_BACKOFF: Final = (0.025, 0.05, 0.1, 0.2, 0.25)
"""Rounds of look-up and forward (or take-over) before a retryable 503."""
MAX_CACHED: Final = 100_000

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"upgrade",
        b"proxy-connection",
        b"host",
        b"content-length",
        b"date",  # the relaying server sets its own
        b"server",
    }
)

_SAFE = frozenset({"GET", "HEAD"})
"""Methods sent again when the owner's connection broke before it answered."""

T = TypeVar("T")

_STORE_DOWN = (StoreUnreachable, StoreBusy)
"""What the cluster's database raises to a routing read that may succeed if sent again."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where a session's requests go: its owner as last read. Immutable, thread-safe."""

    node_id: str
    address: str
    epoch: int


class _Stale(Exception):
    """The forward target no longer holds the epoch (409), or it could not be reached
    before anything was sent: look the owner up again."""


class _Refused(_Stale):
    """The owner refused the connection: nothing was sent (dead, or draining)."""


class _Refusals:
    """One request's waits on owners that refuse connections, from ``since`` (loop time)."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.count = 0

    async def wait(self) -> bool:
        """Back off before asking again; False once ``REFUSED_WAIT`` has passed."""
        loop = asyncio.get_running_loop()
        left = self.since + REFUSED_WAIT - loop.time()
        if left <= 0:
            return False
        delay = _REFUSED_BACKOFF[min(self.count, len(_REFUSED_BACKOFF) - 1)]
        self.count += 1
        await asyncio.sleep(min(delay, left))
        return True


class _StreamsEnded(Exception):
    """This server ends its event streams (it is stopping): a relayed one ends too."""


class _OwnerMoved(Exception):
    """The owner lost its lease while we waited for it."""


def stale_epoch(session_id: str, believed: int, held: int | None) -> Problem:
    """The owner's answer to a forwarded request whose epoch is not the one it holds."""
    held_text = "no lease on it" if held is None else f"epoch {held}"
    detail = (
        f"session {session_id!r}: the forwarding node believed epoch {believed}, "
        f"this node holds {held_text}; look the owner up again"
    )
    return Problem(409, "stale-epoch", "Stale session epoch", detail)


def _unavailable(detail: str) -> Problem:
    return Problem(503, "owner-unavailable", "Session owner unavailable", detail, retry_after=1)


class ClusterRouting:
    """ASGI middleware routing each session request to the session's owner node (see the
    module docstring). Not thread-safe: it runs on the server's one event loop (its cache
    and client are used between awaits only); the host calls it makes run in threads.

    Args:
        app: The gateway app below it.
        host: The node's host (``AgentHost(node=...)``).
        keys: The cluster's shared key store (the caller's tenant names the session).
        templates: Template name -> template, to take a session over on.
        connect_timeout: Seconds to connect to an owner's gateway.
        list_timeout: Seconds a listing (``GET /v1/sessions``) waits for another node
            (``None``: ``gateway._listing.LIST_TIMEOUT``).
        gateway: The app's ``Gateway``: an event stream relayed from an owner ends, cleanly,
            when it ends its own (``Gateway.end_streams``, as the server stops); ``None``:
            relays end only when the owner's stream does.
    """

    def __init__(
        self,
        app: ASGIApp,
        host: AgentHost,
        keys: ApiKeys,
        templates: dict[str, AgentTemplate],
        *,
        connect_timeout: float = 5.0,
        list_timeout: float | None = None,
        gateway: Gateway | None = None,
    ) -> None:
        node = host.node
        if node is None:
            raise TypeError("ClusterRouting needs a host that is a cluster node (node=...)")
        self.app = app
        self.host = host
        self.node: ClusterNode = node
        self.keys = keys
        self.templates = templates
        self.gateway = gateway
        self.watch_every = node.config.ttl / 3
        self._timeout = httpx.Timeout(connect=connect_timeout, read=None, write=30, pool=30)
        self._client: httpx.AsyncClient | None = None
        self._routes: dict[str, Route] = {}
        forwarded = (FORWARDED_HEADER, node.node_id)
        self.listing = ClusterListing(
            host, node, keys, templates, http=self._http, forwarded_header=forwarded,
            timeout=list_timeout,
        )  # fmt: skip

    # -- the ASGI entry ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._closing_on_shutdown(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _bearer(scope)
        try:
            key = None if token is None else await asyncio.to_thread(self.keys.authenticate, token)
        except _STORE_DOWN as exc:
            await self._unreachable(scope, receive, send, exc)
            return
        if key is not None:  # checked here, off the event loop: the routes use it
            scope.setdefault("state", {})[AUTHENTICATED] = key
        headers = dict(scope.get("headers", ()))
        forwarded = FORWARDED_HEADER.encode() in headers
        if key is not None and not forwarded and _is_listing(scope):
            await self._list(scope, receive, send, key.tenant_id, headers)
            return
        session_id = _session_in(scope)
        if session_id is None or key is None:  # not a session's request, or the app's 401
            await self.app(scope, receive, self._named(send))  # a forwarded listing: our own
            return
        internal = host_id(key.tenant_id, session_id)
        if forwarded:
            await self._serve_forwarded(scope, receive, send, internal, headers)
            return
        await self._route(scope, receive, send, internal)

    def _named(self, send: Send) -> Send:
        """``send``, adding ``X-Sessionvisor-Node`` to the answer."""
        name = self.node.node_id.encode()

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"x-sessionvisor-node", name)],
                }
            await send(message)

        return named

    def _closing_on_shutdown(self, send: Send) -> Send:
        async def closing(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.aclose()
            await send(message)

        return closing

    async def aclose(self) -> None:
        """Close the connection pool to other nodes (at the server's shutdown)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- the owner's side ------------------------------------------------------------------

    async def _serve_forwarded(
        self, scope: Scope, receive: Receive, send: Send, internal: str, headers: dict[bytes, bytes]
    ) -> None:
        raw = headers.get(EPOCH_HEADER.encode(), b"")
        believed = int(raw) if raw.isdigit() else -1
        held = self.node.epoch(internal)
        if held != believed:
            problem = stale_epoch(internal.rpartition("/")[2], believed, held)
            await problem_response(problem, scope.get("path"))(scope, receive, self._named(send))
            return
        await self.app(scope, receive, self._named(send))

    # -- the receiving node's side -----------------------------------------------------------

    async def _list(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        tenant_id: str,
        headers: dict[bytes, bytes],
    ) -> None:
        """``GET /v1/sessions``: the tenant's sessions on every node (``ClusterListing``)."""
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        try:
            listing = await self.listing.sessions(tenant_id, authorization)
        except _STORE_DOWN as exc:
            await self._unreachable(scope, receive, send, exc)
            return
        body = listing.model_dump_json().encode()
        response = Response(body, media_type="application/json")
        await response(scope, receive, self._named(send))

    async def _route(self, scope: Scope, receive: Receive, send: Send, internal: str) -> None:
        body: bytes | None = None
        refusals: _Refusals | None = None
        rounds = 0
        while rounds < MAX_ROUTES:
            rounds += 1
            if self.node.epoch(internal) is not None:
                await self._local(scope, receive, send, body)
                return
            try:
                route = self._routes.get(internal) or await self._look_up(internal)
            except _STORE_DOWN as exc:
                await self._unreachable(scope, receive, send, exc)
                return
            if route is None:  # served here: never claimed (404), or just taken over
                await self._local(scope, receive, send, body)
                return
            if body is None:
                body = await _read_body(receive)
            try:
                await self._forward(scope, send, internal, route, body)
                return
            except _Refused:
                self._routes.pop(internal, None)
                refusals = refusals or _Refusals(asyncio.get_running_loop().time())
                if await refusals.wait():
                    rounds -= 1  # the owner may be draining: this round does not count
            except _Stale:
                self._routes.pop(internal, None)
        detail = "the session's owner could not be reached, or changed, meanwhile; send again"
        await problem_response(_unavailable(detail), scope.get("path"))(
            scope, receive, self._named(send)
        )

    async def _unreachable(
        self, scope: Scope, receive: Receive, send: Send, error: StoreUnreachable | StoreBusy
    ) -> None:
        """The retryable 503 of a cluster database that failed a routing read, named as
        every routing answer is (the app's own handlers would not name the node)."""
        if isinstance(error, StoreBusy):
            detail = (
                "the cluster's database is busy (a read waited too long for a lock); send it again"
            )
        else:
            detail = "the cluster's database cannot be reached; send it again"
        await problem_response(_unavailable(detail), scope.get("path"))(
            scope, receive, self._named(send)
        )

    async def _local(self, scope: Scope, receive: Receive, send: Send, body: bytes | None) -> None:
        if body is not None:
            receive = _replay(body, receive)
        await self.app(scope, receive, self._named(send))

    async def _look_up(self, internal: str) -> Route | None:
        """The live other owner to forward to (cached), or ``None`` to serve here (after
        taking the session over when it has no live owner)."""
        owner: Owner | None = await asyncio.to_thread(self.node.owner, internal)
        if owner is None:  # never claimed: taken over here if it has a checkpoint
            return await self._take_over(internal)
        if owner.state == "stopped":
            return None
        mine = (owner.node_id, owner.incarnation) == (self.node.node_id, self.node.incarnation)
        if owner.live and owner.node_id is not None and not mine:
            route = Route(owner.node_id, owner.address, owner.epoch)
            if len(self._routes) >= MAX_CACHED:
                self._routes.clear()
            self._routes[internal] = route
            return route
        if not mine:
            return await self._take_over(internal)
        return None

    async def _take_over(self, internal: str) -> Route | None:
        """Resume a session with no live owner here; ``None`` to serve it here, or the
        owner that won the race to claim it."""
        row = await asyncio.to_thread(self.keys.session_row, internal)
        template = None if row is None else self.templates.get(row.template)
        if template is None:
            return None  # the host's own take-over rules answer
        if not await asyncio.to_thread(self.host.store.list, internal):
            # Nothing to resume, so nothing to claim: a create of the id in flight on
            # another node (recorded, not yet claimed) would lose its claim to this one,
            # and answer 409, for as long as this node lived.
            return None  # the app answers (404)
        try:
            await asyncio.to_thread(self.host.resume, internal, template)
        except SessionAlreadyExists:
            pass  # taken over here by a concurrent request
        except (CheckpointNotFound, SessionNotFound):
            # deleted since: give up the claim the resume made, or the id stays ours
            await asyncio.to_thread(self.node.release, internal, stopped=True)
        except SessionOwnedElsewhere:
            return await self._look_up_live(internal)
        return None

    async def _look_up_live(self, internal: str) -> Route | None:
        owner = await asyncio.to_thread(self.node.owner, internal)
        if owner is None or not owner.live or owner.node_id is None:
            return None
        if owner.node_id == self.node.node_id:
            return None
        route = Route(owner.node_id, owner.address, owner.epoch)
        self._routes[internal] = route
        return route

    # -- forwarding ----------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # idle connections dropped before the owner's uvicorn drops them (5 s): a request
            # sent on a connection the server is closing would fail for nothing
            limits = httpx.Limits(
                max_connections=256, max_keepalive_connections=64, keepalive_expiry=2.0
            )
            self._client = httpx.AsyncClient(timeout=self._timeout, limits=limits)
        return self._client

    async def _forward(
        self, scope: Scope, send: Send, internal: str, route: Route, body: bytes
    ) -> None:
        """Send the request to ``route`` and relay its answer, streamed.

        Raises:
            _Stale: the owner answered 409 stale-epoch, or was unreachable before the
                request was sent (look it up again).
        """
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope.get("headers", ())
            if name.lower() not in _HOP_BY_HOP
        ]
        headers += [(FORWARDED_HEADER, self.node.node_id), (EPOCH_HEADER, str(route.epoch))]
        query = scope.get("query_string", b"").decode("latin-1")
        url = route.address.rstrip("/") + scope["path"] + (f"?{query}" if query else "")
        client = self._http()
        request = client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            response = await self._watched(client.send(request, stream=True), internal, route)
        except httpx.ConnectError as exc:  # refused, nothing sent: route again, maybe later
            logger.info(
                "owner %s of %r refused the connection: %s",
                route.node_id,
                internal,
                exc,
                extra={"session_id": internal},
            )
            raise _Refused from exc
        except httpx.ConnectTimeout as exc:  # nothing sent: route again
            logger.info(
                "owner %s of %r unreachable: %s",
                route.node_id,
                internal,
                exc,
                extra={"session_id": internal},
            )
            raise _Stale from exc
        except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
            if scope["method"] not in _SAFE:  # it may have run: the client decides
                await self._failed(scope, send, internal, route, exc)
                return
            raise _Stale from exc  # a read changes nothing: safe to send again
        except (httpx.HTTPError, _OwnerMoved) as exc:
            await self._failed(scope, send, internal, route, exc)
            return
        try:
            if response.status_code == 409 and await _is_stale(response):
                raise _Stale
            await self._relay(response, send, internal, route)
        finally:
            await response.aclose()

    async def _failed(
        self, scope: Scope, send: Send, internal: str, route: Route, error: BaseException
    ) -> None:
        """Answer a retryable 503: the owner failed before it answered."""
        detail = f"the owner node {route.node_id!r} failed before it answered; send again"
        logger.warning(
            "forwarding %r to %s failed: %r",
            internal,
            route.node_id,
            error,
            extra={"session_id": internal},
        )
        self._routes.pop(internal, None)
        await problem_response(_unavailable(detail), scope.get("path"))(
            scope, _no_body, self._named(send)
        )

    async def _relay(
        self, response: httpx.Response, send: Send, internal: str, route: Route
    ) -> None:
        headers = [
            (name.lower(), value)
            for name, value in response.headers.raw
            if name.lower() not in _HOP_BY_HOP
        ]
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        chunks = response.aiter_raw()
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        try:
            while True:
                try:
                    chunk = await self._watched(self._next(chunks, events), internal, route)
                except StopAsyncIteration:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except _StreamsEnded:
            pass  # the body ends here; the client follows on with Last-Event-ID
        except (httpx.HTTPError, _OwnerMoved) as exc:
            logger.warning(
                "the answer of %s for %r broke off: %r",
                route.node_id,
                internal,
                exc,
                extra={"session_id": internal},
            )
            self._routes.pop(internal, None)
            if events:
                lost = f"the owner node {route.node_id!r} stopped answering; send again"
                data = problem_data(_unavailable(lost))
                await send(
                    {
                        "type": "http.response.body",
                        "body": frame("error", data).encode(),
                        "more_body": True,
                    }
                )
        finally:
            with contextlib.suppress(Exception):
                await chunks.aclose()  # type: ignore[attr-defined]
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _next(self, chunks: AsyncIterator[bytes], events: bool) -> bytes:
        """The owner's next chunk; for an event stream (``events``), ``_StreamsEnded``
        instead (the read cancelled) once this server ends its event streams."""
        if not events or self.gateway is None:
            return await anext(chunks)
        read = asyncio.ensure_future(anext(chunks))
        ending = asyncio.ensure_future(self.gateway.streams_end())
        try:
            done, _ = await asyncio.wait({read, ending}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this request's task is cancelled: so is the read
            read.cancel()
            raise
        finally:
            ending.cancel()
        if read in done:
            return read.result()
        read.cancel()
        await asyncio.wait({read})  # settled, whatever its end, before the chunks are closed
        raise _StreamsEnded

    async def _watched(self, awaitable: Awaitable[T], internal: str, route: Route) -> T:
        """``awaitable``'s result; ``_OwnerMoved`` (the awaitable cancelled) once the owner no
        longer holds ``route``'s lease, read again every ``watch_every`` seconds.

        A read the database fails (unreachable, busy) says nothing about the owner, which
        may be answering: the wait goes on. It used to escape the relay, cutting a live
        owner's stream mid-body (or answering a bare 500). Only reads failing for longer
        than the TTL end it (as ``_OwnerMoved``): the owner could not have renewed its
        lease meanwhile either, and the wait must not last as long as the outage."""
        task = asyncio.ensure_future(awaitable)
        loop = asyncio.get_running_loop()
        blind_since: float | None = None  # loop time of the first failed read in a row
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.watch_every)
                if done:
                    return task.result()
                try:
                    owner = await asyncio.to_thread(self.node.owner, internal)
                except _STORE_DOWN as exc:
                    blind_since = loop.time() if blind_since is None else blind_since
                    if loop.time() - blind_since <= self.node.config.ttl:
                        logger.info("watching the owner of %r: %s", internal, exc)
                        continue
                    raise _OwnerMoved(internal) from exc
                blind_since = None
                if (
                    owner is None
                    or not owner.live
                    or owner.node_id != route.node_id
                    or owner.epoch != route.epoch
                ):
                    raise _OwnerMoved(internal)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task


def _is_listing(scope: Scope) -> bool:
    """Whether the request is ``GET /v1/sessions`` (the tenant's listing)."""
    return scope.get("method") == "GET" and str(scope.get("path", "")).rstrip("/") == "/v1/sessions"


def _session_in(scope: Scope) -> str | None:
    """The session id in ``/v1/sessions/{id}[/...]``, or ``None``: also for an id longer
    than any session's, which the app answers as unknown without a look-up here."""
    parts = str(scope.get("path", "")).split("/")
    if len(parts) >= 4 and parts[1] == "v1" and parts[2] == "sessions" and parts[3]:
        return parts[3] if len(parts[3]) <= MAX_SESSION_ID else None
    return None


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _is_stale(response: httpx.Response) -> bool:
    body = await response.aread()
    try:
        problem: Any = json.loads(body)
    except ValueError:
        return False
    return isinstance(problem, dict) and problem.get("type") == "/problems/stale-epoch"
