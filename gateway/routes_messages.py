"""``/v1/sessions/{id}``: send a message (JSON or SSE), steer, read history."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from actors import EventBatch, Message
from gateway._context import (
    Gateway,
    SessionCaller,
    SessionJsonCaller,
    host_id,
    public_id,
)
from gateway._turns import OwnTurn
from gateway.problems import (
    Problem,
    ProblemError,
    problem_data,
    problem_for,
    problem_responses,
)
from gateway.schemas import (
    JSON_BODY_RESPONSES,
    HistoryOut,
    SendMessage,
    SendResult,
    SteerMessage,
    message_out,
)
from gateway.sse import HEARTBEAT, SSE_HEADERS, SSE_MEDIA_TYPE, frame, frame_event
from supervisor import (
    EventStream,
    NodeFenced,
    OwnershipLost,
    SessionFailed,
    SessionNotFound,
    SessionOwnedElsewhere,
    wait_future,
)

__all__ = ["router"]

_REFUSALS = (NodeFenced, OwnershipLost, SessionNotFound, SessionOwnedElsewhere)
"""What a session's event stream raises when the host no longer serves the session there:
a streamed send then answers what its send answers, without the events."""

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["messages"])


def _refuse_given_up(gateway: Gateway, tenant: str, session_id: str) -> None:
    """Answer 409, as a JSON send to it does, for a session given up after repeated crashes,
    before a streamed send answers 200 and only then an ``error`` frame.

    Raises:
        SessionNotFound: no such session of the tenant.
        SessionFailed: it was given up.
    """
    if gateway.owned(tenant, session_id).status == "failed":
        raise SessionFailed(host_id(tenant, session_id), "given up after repeated crashes")


def _check_length(gateway: Gateway, text: str) -> None:
    limit = gateway.limits.max_message_chars
    if len(text) > limit:
        detail = f"the text has {len(text)} characters; at most {limit} are allowed"
        raise ProblemError(Problem(422, "message-too-long", "Message too long", detail))


@router.post(
    "/messages",
    summary="Send a message",
    response_model=SendResult,
    responses={
        200: {"content": {SSE_MEDIA_TYPE: {}}},
        **JSON_BODY_RESPONSES,
        **problem_responses(
            {
                500: "The session's template failed, a checkpoint of it cannot be read, "
                "or the model raised an unexpected error",
                502: "The model provider failed (retryable: see Retry-After)",
                507: "The session's state is too large to checkpoint: the turn was not kept",
            }
        ),
    },
)
async def send_message(session_id: str, body: SendMessage, call: SessionJsonCaller) -> Any:
    """Run one turn. With ``stream: true`` the answer is Server-Sent Events: the turn's
    events (``delta``, ``turn_started``, ``tool_call``, ...) then ``answer`` (or ``error``);
    a ``missed`` frame counts events of the turn lost to a reader that fell behind.

    Two frames may be named ``error``, and each has JSON ``data``: the session's own
    ``error`` event (``turn``, ``error``, ``seq``, ``at``; with an ``id``), then the
    send's failure as problem details (``status``, ``type``, ``detail``, ``title``,
    ``retryable``: what a JSON send answers). A browser's ``EventSource`` fires an
    ``error`` event of its own, without ``data``, when the connection fails: in an
    ``addEventListener("error", ...)`` listener, ``event.data === undefined`` is
    that."""
    gateway, key = call
    _check_length(gateway, body.text)
    tenant = key.tenant_id
    internal = host_id(tenant, session_id)
    if not body.stream:
        answer = await _answer(gateway, internal, body.text, tenant)
        return SendResult(message=message_out(answer.to_dict()))
    _refuse_given_up(gateway, tenant, session_id)  # a status before streaming, as a 404 has
    start = gateway.ahost.host.events(internal, tenant_id=tenant).cursor  # 404 before streaming
    own = OwnTurn()
    future = gateway.ahost.host.futures.send(internal, body.text, tenant_id=tenant, tag=own.tag)
    frames = _turn_frames(gateway, internal, tenant, start, own, wait_future(future))
    return StreamingResponse(frames, media_type=SSE_MEDIA_TYPE, headers=SSE_HEADERS)


async def _answer(gateway: Gateway, internal: str, text: str, tenant: str) -> Message:
    """The answer of a JSON send. What the model raised, or the store saving the turn,
    which ``send`` passes on as it is (any type), answers as problem details too (500,
    logged, for an unexpected one), as a streamed send's ``error`` frame does: the app
    has handlers for library errors only, and an unhandled one answered a bare
    ``text/plain`` 500 and closed the client's connection.

    Raises:
        SessionNotFound: as it is (its handler tells a session whose template is not
            served here from a missing one).
        ProblemError: any other error, as ``problem_for`` answers it.
    """
    try:
        return await gateway.ahost.send(internal, text, tenant_id=tenant)
    except SessionNotFound:
        raise
    except Exception as exc:
        raise ProblemError(problem_for(exc, public_id(internal))) from exc


async def _turn_frames(  # noqa: PLR0917 (one stream's parts)
    gateway: Gateway,
    internal: str,
    tenant: str,
    start: int,
    own: OwnTurn,
    answer: Any,
) -> AsyncIterator[str]:
    """The frames of one streamed send: its own turn's events (``OwnTurn``), then its
    ``answer`` or ``error``. Events of its turn that the session's buffer dropped before
    they were read (a reader that fell behind) are counted in a ``missed`` frame, as an
    ``/events`` stream counts them, where they were lost: they were left out without a
    word. If its ``turn_started`` was among them, the client gets none of its turn's
    events, and one ``missed`` frame before the answer counts them all: those lost, and
    those read after the loss that it left out, unable to tell they were its own
    (``OwnTurn.untold``). That count is an upper bound (it may include lost events of a
    turn queued before its own), never fewer than the client missed. An answer that
    wrote nothing for ``Limits.heartbeat_s`` sends a heartbeat, also while the events of
    a turn queued before its own arrive (it leaves them out).

    A stream the host refuses (``_REFUSALS``: a cluster node that fenced itself, or lost
    the session, since the route's checks) is read no more: the send still answers what
    its send answers (an ``error`` frame of a send the node refused; the ``answer`` of a
    turn that ran), with heartbeats while it waits, and its events that the host hands
    out again by then. An error frame for the stream's refusal would tell the client to
    send again a message whose turn may have run."""
    answer_task: asyncio.Future[Any] = asyncio.ensure_future(answer)
    stream = _turn_stream(gateway, internal, tenant, start)
    reading = stream is not None  # until it ends, or refuses a read
    next_task: asyncio.Future[Any] | None = None
    told = 0  # the stream's ``missed`` already passed to ``own``
    loop = asyncio.get_running_loop()
    heartbeat_s = gateway.limits.heartbeat_s
    # When the client was last written to. The events of a turn queued before this one
    # arrive but are left out: they must not put the next heartbeat off (the answer was
    # silent for as long as that turn ran, and a proxy's idle timeout cut it off).
    wrote = loop.time()
    try:
        while True:
            if loop.time() - wrote >= heartbeat_s:  # silent, though events came
                yield HEARTBEAT
                wrote = loop.time()
            if next_task is None and reading and stream is not None:
                next_task = asyncio.ensure_future(stream.__anext__())
            done, _ = await asyncio.wait(
                {answer_task} if next_task is None else {answer_task, next_task},
                timeout=wrote + heartbeat_s - loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:  # a long model call: a comment, so a client that left is seen
                continue  # the heartbeat is written at the top of the loop
            if next_task is None or not next_task.done():
                break
            arrived, next_task = next_task, None
            try:
                event = arrived.result()
            except StopAsyncIteration:
                break
            except _REFUSALS:  # the answer tells what became of the send
                reading = False
                continue
            assert stream is not None  # (it made ``next_task``)
            if lost := own.missed(stream.missed - told):
                yield frame("missed", {"missed": lost})
                wrote = loop.time()
            told = stream.missed
            if own.owns(event):
                yield frame_event(event)
                wrote = loop.time()
        # Losses its last read counted without an event after them to hand out (a
        # session resumed since ``start``, whose new stream goes on after them): the
        # events read next, by ``_turn_end``, come after those losses.
        untold = 0 if stream is None else stream.missed - told
        cursor = start if stream is None else stream.cursor
        ending = _turn_end(gateway, internal, tenant, cursor, untold, own, answer_task)
        async with contextlib.aclosing(ending):  # closed now if the client leaves meanwhile
            async for last in ending:
                yield last
    finally:
        if next_task is not None and not next_task.done():
            next_task.cancel()
        # a client that left before the answer: the turn goes on; its outcome is dropped
        answer_task.add_done_callback(_drop_outcome)
        if stream is not None:
            await stream.aclose()


def _turn_stream(gateway: Gateway, internal: str, tenant: str, start: int) -> EventStream | None:
    """The session's events after ``start``, for a streamed send; ``None`` if the host
    refuses them at once (a cluster node that fenced itself since the route's check)."""
    try:
        return gateway.ahost.events(internal, since=start, tenant_id=tenant)
    except _REFUSALS:
        return None


async def _turn_end(  # noqa: PLR0917 (one stream's parts)
    gateway: Gateway,
    internal: str,
    tenant: str,
    cursor: int | None,
    lost: int,
    own: OwnTurn,
    answer_task: asyncio.Future[Any],
) -> AsyncGenerator[str, None]:
    """The last frames of a streamed send, once its answer came (or the session's stream
    ended): its turn's events after ``cursor`` that the stream had not handed out yet,
    what was lost of them (``lost``, which the stream counted before ``cursor`` but had
    no event after to tell with, and those lost after it; all of its turn's events, if
    its ``turn_started`` was lost: ``OwnTurn.untold``), then its ``answer`` or ``error``."""
    try:
        rest = gateway.ahost.host.events(internal, cursor, tenant_id=tenant)
    except Exception:  # the session may be gone already, or refused here (a fenced node)
        rest = EventBatch((), cursor or 0)
    if missed := own.missed(lost + rest.missed):
        yield frame("missed", {"missed": missed})
    for event in rest.events:
        if own.owns(event):
            yield frame_event(event)
    if missed := own.untold():
        yield frame("missed", {"missed": missed})
    try:
        message = await answer_task
    except Exception as exc:
        yield frame("error", problem_data(problem_for(exc, public_id(internal))))
    else:
        yield frame("answer", {"message": message.to_dict()})


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


@router.post(
    "/steer",
    status_code=204,
    summary="Steer a session",
    responses=JSON_BODY_RESPONSES,
)
async def steer(session_id: str, body: SteerMessage, call: SessionJsonCaller) -> Response:
    """Queue text for the session's next model call, even in the middle of a turn. A
    session given up after repeated crashes answers 409, as a send to it does: it makes
    no model call the text would reach."""
    gateway, key = call
    _check_length(gateway, body.text)
    internal = host_id(key.tenant_id, session_id)
    # a session given up: the host raises SessionFailed (409), as for a send
    await gateway.ahost.steer(internal, body.text, tenant_id=key.tenant_id)
    return Response(status_code=204)


@router.get(
    "/history",
    summary="Read the conversation",
    responses=problem_responses({500: "The checkpoint of a hibernated session cannot be read"}),
)
async def history(
    session_id: str,
    call: SessionCaller,
    cursor: Annotated[str | None, Query(description="next_cursor of the page before")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> HistoryOut:
    """A page of the conversation, oldest first."""
    gateway, key = call
    offset = 0
    if cursor is not None:
        if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 12:
            detail = "cursor must be a next_cursor this API returned"
            raise ProblemError(Problem(400, "bad-cursor", "Bad cursor", detail))
        offset = int(cursor)
    internal = host_id(key.tenant_id, session_id)
    messages = await gateway.ahost.history(internal, tenant_id=key.tenant_id)
    page = messages[offset : offset + limit]
    more = offset + limit < len(messages)
    return HistoryOut(
        messages=[message_out(m.to_dict()) for m in page],
        next_cursor=str(offset + limit) if more else None,
    )
