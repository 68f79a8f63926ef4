"""``GET /v1/sessions/{id}/events``: a session's event stream as Server-Sent Events.

``Last-Event-ID`` (or ``?since=``) resumes after that event; a client that fell
behind the session's bounded buffer gets a ``missed`` frame saying how many
events it lost before the next one it receives. A stream silent for
``Limits.heartbeat_s`` sends a comment line. A stopping server ends the streams
(their answers end cleanly) instead of waiting for their sessions to stop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from gateway._context import SESSION_PATH, Caller, Gateway, GatewayDep, host_id
from gateway.problems import Problem, ProblemError
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

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["events"], dependencies=[SESSION_PATH])


def _cursor(text: str | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        detail = "Last-Event-ID (or since) must be the id of an event this stream sent"
        raise ProblemError(Problem(400, "bad-cursor", "Bad cursor", detail))
    return int(text)


@router.get(
    "/events",
    summary="Follow the session's events",
    response_class=StreamingResponse,
    responses={200: {"content": {SSE_MEDIA_TYPE: {}}}},
)
async def events(
    session_id: str,
    gateway: GatewayDep,
    key: Caller,
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
    ``addEventListener("error", ...)`` listener, ``event.data === undefined`` is that."""
    cursor = _cursor(last_event_id if last_event_id is not None else since)
    gateway.owned(key.tenant_id, session_id)
    internal = host_id(key.tenant_id, session_id)
    stream = gateway.ahost.events(internal, since=cursor, tenant_id=key.tenant_id)
    await gateway.follow(stream)  # a stopping server ends it (``Gateway.end_streams``)
    return StreamingResponse(
        _frames(gateway, stream), media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS
    )


async def _frames(gateway: Gateway, stream: EventStream) -> AsyncIterator[str]:
    told = 0
    try:
        async for event in with_heartbeats(stream, gateway.limits.heartbeat_s):
            if event is None:  # silent for a while: a comment, so a client that left is seen
                yield HEARTBEAT
                continue
            if stream.missed > told:
                yield frame("missed", {"missed": stream.missed - told})
                told = stream.missed
            yield frame_event(event)
    finally:
        gateway.unfollow(stream)
        await stream.aclose()
