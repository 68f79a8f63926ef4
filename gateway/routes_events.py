"""``GET /v1/sessions/{id}/events``: a session's event stream as Server-Sent Events.

``Last-Event-ID`` (or ``?since=``) resumes after that event; a client that fell
behind the session's bounded buffer (or resumes in an earlier life of a session resumed
since) gets a ``missed`` frame saying how many events it lost before the next one it
receives, or before the stream ends if none comes (that frame then carries the stream's
cursor as its ``id``, so a reconnect is not told the same losses again). A stream silent for
``Limits.heartbeat_s`` sends a comment line. The caller's key is checked again every
``Limits.key_check_s``: once revoked, the stream ends with an ``error`` frame (401). A
stopping server ends the streams (their answers end cleanly) instead of waiting for
their sessions to stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from gateway._context import Gateway, SessionCaller, host_id, public_id
from gateway.limits import _bearer
from gateway.problems import (
    Problem,
    ProblemError,
    problem_data,
    problem_for,
    problem_responses,
    unauthorized,
)
from gateway.sse import (
    HEARTBEAT,
    SSE_HEADERS,
    SSE_MEDIA_TYPE,
    frame,
    frame_event,
    with_heartbeats,
)
from supervisor import EventStream

__all__ = ["router"]

logger = logging.getLogger("gateway")

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["events"])


def _cursor(text: str | None) -> int | None:
    """The event seq to resume after; ``None`` for none (also an empty value: a browser's
    ``EventSource`` sends ``Last-Event-ID:`` empty when no frame it got had an ``id``)."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        detail = "Last-Event-ID (or since) must be the id of an event this stream sent"
        raise ProblemError(Problem(400, "bad-cursor", "Bad cursor", detail))
    return int(text)


@router.get(
    "/events",
    summary="Follow the session's events",
    response_class=StreamingResponse,
    responses={
        200: {"content": {SSE_MEDIA_TYPE: {}}},
        **problem_responses(
            {
                503: "The session is restarting or a store is busy, or this cluster node "
                "fenced itself or lost the session to another node (retryable: see "
                "Retry-After; reconnect with Last-Event-ID), or its template is not served "
                "here",
            }
        ),
    },
)
async def events(
    request: Request,
    session_id: str,
    call: SessionCaller,
    last_event_id: Annotated[str | None, Header()] = None,
    since: Annotated[str | None, Query()] = None,
) -> Any:
    """The session's events as SSE, each with ``id`` = its seq, until the session stops.

    A frame's name is its event's type, so a turn that failed sends a frame named
    ``error`` (JSON ``data`` with ``turn``, ``error``, ``seq``, ``at``), as a cluster
    node relaying a stream from an owner that stopped answering does (problem details:
    ``status``, ``type``, ``detail``, ``title``, ``retryable``). A browser's
    ``EventSource`` fires an ``error`` event of its own, without ``data``, when the
    connection fails (then it reconnects with ``Last-Event-ID``): in an
    ``addEventListener("error", ...)`` listener, ``event.data === undefined`` is that.

    A stream whose API key is revoked ends within ``Limits.key_check_s`` (default 5 s)
    with an ``error`` frame of the 401 problem (``type`` ``/problems/unauthorized``).

    A cluster node that cannot serve the session's events (it fenced itself, or lost the
    session to another node) answers a 503 problem; if that happens as the stream starts,
    the stream ends with an ``error`` frame of that problem instead. Reconnect with
    ``Last-Event-ID``: another node takes the session over."""
    gateway, key = call
    cursor = _cursor(last_event_id or since)
    gateway.owned(key.tenant_id, session_id)
    internal = host_id(key.tenant_id, session_id)
    stream = gateway.ahost.events(internal, since=cursor, tenant_id=key.tenant_id)
    _check_serving(gateway, internal)  # a 503 while it can, before the answer starts
    await gateway.follow(stream)  # a stopping server ends it (``Gateway.end_streams``)
    return StreamingResponse(
        _frames(gateway, stream, _bearer(request.scope)),
        media_type=SSE_MEDIA_TYPE,
        headers=SSE_HEADERS,
    )


def _check_serving(gateway: Gateway, internal: str) -> None:
    """Refuse the session's events before the answer starts (a 503) if the host is a
    cluster node that fenced itself or lost the session (``ClusterNode.check_serving``, a
    read of the node's own state). ``AsyncAgentHost.events`` asks about the node only,
    and the stream about the session at its first read, inside the answer.

    Raises:
        NodeFenced: the node is fenced.
        OwnershipLost: another node took the session over; the copy here is being stopped.
    """
    node = gateway.ahost.host.node
    if node is not None:
        node.check_serving(internal)


async def _frames(gateway: Gateway, stream: EventStream, token: str | None) -> AsyncIterator[str]:
    """The stream's frames, a heartbeat when it was silent ``heartbeat_s``, and, every
    ``key_check_s``, a check of the bearer's key (``token``): a key revoked meanwhile ends
    the stream with an ``error`` frame of the 401 problem (a stream lasts as long as its
    session; without it, a revoked key kept receiving the session's events).

    A read the stream refuses (its first: the node fenced itself, or lost or deleted the
    session, after the route's checks) ends the stream with an ``error`` frame of its
    problem: raised here, it broke the answer's body off after its 200.

    Events the stream counted lost (``EventStream.missed``) are told in a ``missed`` frame
    before the next event, or, with none after them, before the stream ends (the session
    stopped): ended without it, the answer said nothing of them. That last one carries the
    stream's cursor as its ``id`` (the next event's would, had one come)."""
    limits = gateway.limits
    tick = min(limits.heartbeat_s, limits.key_check_s)
    loop = asyncio.get_running_loop()
    told = 0
    quiet_since = checked = loop.time()
    try:
        async for event in with_heartbeats(stream, tick):
            now = loop.time()
            if token is not None and now - checked >= limits.key_check_s - tick / 2:
                checked = now
                if not await _still_valid(gateway, token):
                    yield frame("error", problem_data(_REVOKED))
                    return
            if event is None:  # silent for a while: a comment, so a client that left is seen
                if now - quiet_since >= limits.heartbeat_s - tick / 2:
                    quiet_since = now
                    yield HEARTBEAT
                continue
            quiet_since = now
            if stream.missed > told:
                yield frame("missed", {"missed": stream.missed - told})
                told = stream.missed
            yield frame_event(event)
        # Losses its last read counted without an event after them to hand out (a session
        # resumed after the client's cursor, stopped since): the answer ends telling them,
        # with the cursor read past them as the frame's ``id``, so a client reconnecting
        # with its ``Last-Event-ID`` goes on after them instead of being told them again.
        if stream.missed > told:
            yield frame("missed", {"missed": stream.missed - told}, stream.cursor)
    except Exception as exc:  # refused: the node fenced itself, or the session is gone
        yield frame("error", problem_data(problem_for(exc, public_id(stream.session_id))))
    finally:
        gateway.unfollow(stream)
        await stream.aclose()


_REVOKED = unauthorized(
    "the API key was revoked (or is unknown) while this stream was open; use a valid key",
    invalid=True,
)


async def _still_valid(gateway: Gateway, token: str) -> bool:
    """Whether ``token`` is still a valid key (read off the event loop: the key store may
    ask its database). A check that fails is no revocation: the stream goes on, and the
    next check asks again."""
    try:
        return await asyncio.to_thread(gateway.keys.authenticate, token) is not None
    except Exception:
        logger.warning("checking an event stream's API key failed", exc_info=True)
        return True
