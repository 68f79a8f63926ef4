"""The least an HTTP layer on uvicorn can add to a turn: ``bench_gateway``'s floor server.

A bare ASGI callable (no framework: no routing table, no dependencies, no
validation models, no authentication, no problem details) served by uvicorn
exactly as ``sessionvisor serve`` serves the gateway (the same bound socket, the
same config, the same tuned interpreter). It answers the two requests the round
trips make: ``POST /v1/sessions`` (``{"session_id"}``: a session of the echo
template) and ``POST /v1/sessions/{id}/messages`` (``{"text"}``: the turn, through
``AsyncAgentHost.send`` as the gateway's route does, answered with ``{"role",
"content"}``). Anything else is a 404.

Why: the round trip's goal (issue 16) is the HTTP layer adding no more than 1 ms at
p50 with 16 clients. What uvicorn alone costs, with nothing of the gateway's own
above it, shows how much of the gateway's cost is the gateway's and how much the
goal leaves for it on the machine of the run.
"""

from __future__ import annotations

import json
import signal
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from actors import AgentTemplate
from supervisor import AgentHost, AsyncAgentHost

__all__ = ["FloorApp", "serve_floor"]

_JSON = [(b"content-type", b"application/json")]
_PREFIX = "/v1/sessions/"
_SUFFIX = "/messages"


class FloorApp:
    """An ASGI app answering session creation and messages on ``host``, nothing more.
    Runs on one event loop (uvicorn's); not for use from other threads."""

    def __init__(self, host: AsyncAgentHost, template: AgentTemplate) -> None:
        self.host = host
        self.template = template

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        path: str = scope["path"]
        body = await _body(receive)
        if scope["method"] != "POST":
            await _answer(send, 405, {"detail": "POST only"})
        elif path == "/v1/sessions":
            session_id = json.loads(body)["session_id"]
            await self.host.start_session(self.template, session_id, "bench")
            await _answer(send, 201, {"session_id": session_id})
        elif path.startswith(_PREFIX) and path.endswith(_SUFFIX):
            session_id = path[len(_PREFIX) : -len(_SUFFIX)]
            answer = await self.host.send(session_id, json.loads(body)["text"])
            await _answer(send, 200, {"role": answer.role, "content": answer.content})
        else:
            await _answer(send, 404, {"detail": "not found"})


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Any, status: int, payload: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _JSON})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


def serve_floor(data_dir: Path, template: AgentTemplate) -> None:
    """Serve ``FloorApp`` on a free port of 127.0.0.1 until SIGTERM/SIGINT, announcing
    ``serving on http://...`` on stdout as ``sessionvisor serve`` does."""
    import uvicorn  # noqa: PLC0415  (the server extra; this process only)

    from gateway.server import bind, serving_line  # noqa: PLC0415

    # uvicorn raises the SIGTERM it caught again once it has stopped: a handler that does
    # nothing makes that a clean exit, as ``sessionvisor serve``'s does.
    signal.signal(signal.SIGTERM, lambda *_: None)
    with AgentHost(data_dir=data_dir) as host:
        sock = bind("127.0.0.1", 0)
        try:
            config = uvicorn.Config(
                FloorApp(AsyncAgentHost(host), template),
                log_level="warning",
                log_config=None,
                timeout_graceful_shutdown=5,
            )
            print(serving_line(sock), flush=True)
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            sock.close()
