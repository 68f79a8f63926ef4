"""A minimal ASGI app on ``AsyncAgentHost``: a raw ASGI callable, no framework.

No request holds a thread while its session works: each ``await`` is woken
by the session's reply through the event loop. Serve it with any ASGI server
(``uvicorn examples.asgi_app:app``), or run this file: it then drives the app
in-process with a few requests and prints what came back.

    POST   /sessions                     -> {"session_id": "..."}
    POST   /sessions/<id>/messages       the user's text -> {"answer": "..."}
    GET    /sessions/<id>/events?since=N -> server-sent events until the session stops
    DELETE /sessions/<id>                -> stops it (final checkpoint)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from actors import AgentTemplate
from supervisor import AgentHost, AsyncAgentHost, SessionNotFound

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

TEMPLATE = AgentTemplate(model="echo", instructions="You are a helpful agent.")
hosts: list[AsyncAgentHost] = []  # the one host, made at startup


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI application."""
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
    elif scope["type"] == "http":
        try:
            await route(hosts[0], scope, receive, send)
        except SessionNotFound as exc:
            await reply(send, 404, {"error": str(exc)})


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            hosts.append(AsyncAgentHost(AgentHost()))  # checkpoints in ./sessionvisor-data
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await hosts.pop().shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def route(ahost: AsyncAgentHost, scope: Scope, receive: Receive, send: Send) -> None:
    method, parts = scope["method"], scope["path"].strip("/").split("/")
    if method == "POST" and parts == ["sessions"]:
        await reply(send, 201, {"session_id": await ahost.start_session(TEMPLATE)})
    elif method == "POST" and len(parts) == 3 and parts[2] == "messages":
        try:
            text = (await body(receive)).decode()
        except UnicodeDecodeError:
            await reply(send, 400, {"error": "the message must be UTF-8 text"})
            return
        answer = await ahost.send(parts[1], text)
        await reply(send, 200, {"answer": answer.content})
    elif method == "GET" and len(parts) == 3 and parts[2] == "events":
        since = parse_qs(scope["query_string"].decode()).get("since", [None])[0]
        if since is not None and not (since.isascii() and since.isdigit()):
            await reply(send, 400, {"error": f"since must be an event number, got {since!r}"})
            return
        await stream_events(ahost, parts[1], None if since is None else int(since), send)
    elif method == "DELETE" and len(parts) == 2:
        await ahost.stop_session(parts[1])
        await reply(send, 204, None)
    else:
        await reply(send, 404, {"error": "no such route"})


async def stream_events(ahost: AsyncAgentHost, sid: str, since: int | None, send: Send) -> None:
    """Server-sent events: one per session event, until the session is stopped."""
    events = ahost.events(sid, since=since)
    first = await anext(events, None)  # SessionNotFound here: a 404, before any header
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    async with events:
        event = first
        while event is not None:
            line = f"id: {event.seq}\nevent: {event.type}\ndata: {json.dumps(event.data)}\n\n"
            await send({"type": "http.response.body", "body": line.encode(), "more_body": True})
            event = await anext(events, None)
    await send({"type": "http.response.body", "body": b""})


async def body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def reply(send: Send, status: int, payload: object) -> None:
    data = b"" if payload is None else json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


# -- driving the app in-process, as a server would ---------------------------------------


async def call(method: str, path: str, text: str = "", query: str = "") -> tuple[int, bytes]:
    """One HTTP request to ``app``; its status and body."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": method, "path": path, "query_string": query.encode()}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": text.encode(), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def demo() -> None:
    lifespan_events = asyncio.Queue[dict[str, Any]]()
    lifespan_events.put_nowait({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def lifespan_send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    server = asyncio.create_task(app({"type": "lifespan"}, lifespan_events.get, lifespan_send))
    await started.wait()

    status, data = await call("POST", "/sessions")
    sid = json.loads(data)["session_id"]
    print(f"POST /sessions -> {status}")
    events = asyncio.create_task(call("GET", f"/sessions/{sid}/events"))
    answers = await asyncio.gather(
        *(call("POST", f"/sessions/{sid}/messages", f"hello {n}") for n in range(3))
    )
    for status, data in answers:
        print(f"POST /messages -> {status} {json.loads(data)['answer']}")
    status, _ = await call("DELETE", f"/sessions/{sid}")
    print(f"DELETE -> {status}")
    status, stream = await events  # ends by itself: the session was stopped
    kinds = [line[7:] for line in stream.decode().splitlines() if line.startswith("event: ")]
    print(f"GET /events -> {status}, {len(kinds)} events, ending with {kinds[-1]!r}")
    status, data = await call("POST", f"/sessions/{sid}/messages", "anyone?")
    print(f"POST to a stopped session -> {status}")
    lifespan_events.put_nowait({"type": "lifespan.shutdown"})
    await server  # the host shuts down
    print("host shut down")


if __name__ == "__main__":
    asyncio.run(demo())
