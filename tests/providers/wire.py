"""Real HTTP servers on 127.0.0.1 that speak the providers' wire protocols, for tests.

``WireServer(dialect)`` listens on an ephemeral port and answers the official
SDKs, unmodified and pointed at ``base_url``, the way the provider would:
JSON bodies, or Server-Sent Events in HTTP chunks when the request streams.
What it answers is scripted per test (``Text``, ``Calls``, ``Status``,
``CutOff``, or ``Raw``: a provider's odd answer as it is); with an empty script it
echoes the last user text. Every request it gets is kept (``requests``), so a test
asserts on what the SDK sent.

Three dialects: ``CHAT`` (``POST /v1/chat/completions``), ``RESPONSES``
(``POST /v1/responses``, numbering its response ids) and ``ANTHROPIC``
(``POST /v1/messages``). Plain stdlib (``http.server``), no mocking library.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "RESPONSES",
    "Calls",
    "CutOff",
    "Dialect",
    "Raw",
    "Received",
    "Reply",
    "Status",
    "Text",
    "WireServer",
    "WireUsage",
]

WAIT = 5.0


@dataclass(frozen=True)
class WireUsage:
    """Token counts a reply reports, in the dialect's own fields."""

    input: int = 20
    output: int = 5
    cached: int = 8
    reasoning: int = 2


@dataclass(frozen=True)
class Text:
    """Answer ``text``; streamed as ``pieces`` (default: the text cut in three)."""

    text: str
    usage: WireUsage = field(default_factory=WireUsage)
    pieces: Sequence[str] | None = None

    def chunks(self) -> list[str]:
        if self.pieces is not None:
            return list(self.pieces)
        third = max(1, len(self.text) // 3)
        return [self.text[i : i + third] for i in range(0, len(self.text), third)] or [""]


@dataclass(frozen=True)
class Calls:
    """Call tools, in parallel: ``(call id, tool name, arguments)`` each."""

    calls: Sequence[tuple[str, str, dict[str, Any]]]
    usage: WireUsage = field(default_factory=WireUsage)


@dataclass(frozen=True)
class Status:
    """Fail the request with an HTTP ``status`` (and ``headers``, such as ``retry-after``)."""

    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CutOff:
    """Stream ``reply`` but stop after ``after`` events: mid-body (the connection closes
    without the body's last chunk), or, ``clean``, ending the body there as if complete."""

    reply: Text | Calls
    after: int = 2
    clean: bool = False


@dataclass(frozen=True)
class Raw:
    """Answer exactly this, whatever the dialect: a JSON ``body``, or a stream of ``events``
    (a dict is one Server-Sent Event, ``event:`` its ``type`` if it has one; a str is sent
    as it is, ``data: [DONE]`` say). For what real servers send that the dialects do not."""

    body: dict[str, Any] | None = None
    events: Sequence[dict[str, Any] | str] = ()

    def encoded(self) -> list[bytes]:
        return [e.encode() if isinstance(e, str) else _sse(e, e.get("type")) for e in self.events]


Reply = Text | Calls | Status | CutOff | Raw


@dataclass(frozen=True)
class Received:
    """One request as the server read it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


class Dialect:
    """How one provider's API looks on the wire (subclassed per provider)."""

    name = ""
    path = ""
    prefix = ""  # what base_url ends with

    def answer(self, reply: Text | Calls, request: dict[str, Any], number: int) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, reply: Text | Calls, request: dict[str, Any], number: int) -> list[bytes]:
        raise NotImplementedError

    def error(self, status: Status) -> dict[str, Any]:
        return {"error": {"message": status.message, "type": "server_error", "code": None}}

    def last_user_text(self, request: dict[str, Any]) -> str:
        raise NotImplementedError


class _Chat(Dialect):
    name = "chat"
    path = "/v1/chat/completions"
    prefix = "/v1"

    @staticmethod
    def _usage(usage: WireUsage) -> dict[str, Any]:
        return {
            "prompt_tokens": usage.input,
            "completion_tokens": usage.output,
            "total_tokens": usage.input + usage.output,
            "prompt_tokens_details": {"cached_tokens": usage.cached},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
        }

    @staticmethod
    def _base(number: int) -> dict[str, Any]:
        return {"id": f"chatcmpl-{number}", "created": 1, "model": "wire-model"}

    def answer(self, reply: Text | Calls, request: dict[str, Any], number: int) -> dict[str, Any]:
        if isinstance(reply, Text):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for cid, name, args in reply.calls
                ],
            }
            finish = "tool_calls"
        return {
            **self._base(number),
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(reply.usage),
        }

    def events(self, reply: Text | Calls, request: dict[str, Any], number: int) -> list[bytes]:
        base = {**self._base(number), "object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return _sse({**base, "choices": [choice]})

        out = [chunk({"role": "assistant", "content": ""})]
        if isinstance(reply, Text):
            out += [chunk({"content": piece}) for piece in reply.chunks()]
            out.append(chunk({}, "stop"))
        else:
            for index, (cid, name, args) in enumerate(reply.calls):
                text = json.dumps(args)
                half = len(text) // 2
                opening = {"index": index, "id": cid, "type": "function"}
                opening["function"] = {"name": name, "arguments": text[:half]}
                out.append(chunk({"tool_calls": [opening]}))
                rest = {"index": index, "function": {"arguments": text[half:]}}
                out.append(chunk({"tool_calls": [rest]}))
            out.append(chunk({}, "tool_calls"))
        out.append(_sse({**base, "choices": [], "usage": self._usage(reply.usage)}))
        out.append(b"data: [DONE]\n\n")
        return out

    def last_user_text(self, request: dict[str, Any]) -> str:
        users = [m for m in request["messages"] if m["role"] == "user"]
        return str(users[-1]["content"]) if users else ""


class _Responses(Dialect):
    name = "responses"
    path = "/v1/responses"
    prefix = "/v1"

    @staticmethod
    def _usage(usage: WireUsage) -> dict[str, Any]:
        return {
            "input_tokens": usage.input,
            "input_tokens_details": {"cached_tokens": usage.cached, "cache_write_tokens": 0},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning},
            "total_tokens": usage.input + usage.output,
        }

    @staticmethod
    def _items(reply: Text | Calls) -> list[dict[str, Any]]:
        if isinstance(reply, Text):
            part = {"type": "output_text", "text": reply.text, "annotations": []}
            return [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            ]
        return [
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for cid, name, args in reply.calls
        ]

    def _response(self, reply: Text | Calls, number: int, status: str) -> dict[str, Any]:
        return {
            "id": f"resp_{number}",
            "object": "response",
            "created_at": 1,
            "status": status,
            "model": "wire-model",
            "output": self._items(reply) if status == "completed" else [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": self._usage(reply.usage) if status == "completed" else None,
        }

    def answer(self, reply: Text | Calls, request: dict[str, Any], number: int) -> dict[str, Any]:
        return self._response(reply, number, "completed")

    def events(self, reply: Text | Calls, request: dict[str, Any], number: int) -> list[bytes]:
        seq = iter(range(1, 10_000))

        def event(kind: str, **data: Any) -> bytes:
            return _sse({"type": kind, "sequence_number": next(seq), **data}, kind)

        created = self._response(reply, number, "in_progress")
        out = [event("response.created", response=created)]
        if isinstance(reply, Text):
            item = {**self._items(reply)[0], "status": "in_progress", "content": []}
            out.append(event("response.output_item.added", output_index=0, item=item))
            out += [
                event(
                    "response.output_text.delta",
                    item_id="msg_1",
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
                for piece in reply.chunks()
            ]
        else:
            for index, item in enumerate(self._items(reply)):
                text = item["arguments"]
                half = len(text) // 2
                opened = {**item, "arguments": "", "status": "in_progress"}
                out.append(event("response.output_item.added", output_index=index, item=opened))
                for piece in (text[:half], text[half:]):
                    out.append(
                        event(
                            "response.function_call_arguments.delta",
                            item_id=item["id"],
                            output_index=index,
                            delta=piece,
                        )
                    )
        done = self._response(reply, number, "completed")
        out.append(event("response.completed", response=done))
        return out

    def last_user_text(self, request: dict[str, Any]) -> str:
        users = [i for i in request["input"] if i.get("role") == "user"]
        return str(users[-1]["content"]) if users else ""


class _Anthropic(Dialect):
    name = "anthropic"
    path = "/v1/messages"
    prefix = ""

    @staticmethod
    def _usage(usage: WireUsage) -> dict[str, Any]:
        return {
            "input_tokens": usage.input - usage.cached,
            "cache_read_input_tokens": usage.cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": usage.output,
            "output_tokens_details": {"thinking_tokens": usage.reasoning},
        }

    @staticmethod
    def _blocks(reply: Text | Calls) -> list[dict[str, Any]]:
        if isinstance(reply, Text):
            return [{"type": "text", "text": reply.text}]
        return [
            {"type": "tool_use", "id": cid, "name": name, "input": args}
            for cid, name, args in reply.calls
        ]

    def _message(self, reply: Text | Calls, number: int, content: list[Any]) -> dict[str, Any]:
        stop = "end_turn" if isinstance(reply, Text) else "tool_use"
        return {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": "wire-model",
            "content": content,
            "stop_reason": stop if content else None,
            "stop_sequence": None,
            "usage": self._usage(reply.usage),
        }

    def answer(self, reply: Text | Calls, request: dict[str, Any], number: int) -> dict[str, Any]:
        return self._message(reply, number, self._blocks(reply))

    def events(self, reply: Text | Calls, request: dict[str, Any], number: int) -> list[bytes]:
        def event(kind: str, **data: Any) -> bytes:
            return _sse({"type": kind, **data}, kind)

        started = self._message(reply, number, [])
        started["usage"] = {**started["usage"], "output_tokens": 1}
        out = [event("message_start", message=started), event("ping")]
        if isinstance(reply, Text):
            out.append(
                event("content_block_start", index=0, content_block={"type": "text", "text": ""})
            )
            out += [
                event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
                for piece in reply.chunks()
            ]
            out.append(event("content_block_stop", index=0))
            stop = "end_turn"
        else:
            for index, (cid, name, args) in enumerate(reply.calls):
                block = {"type": "tool_use", "id": cid, "name": name, "input": {}}
                out.append(event("content_block_start", index=index, content_block=block))
                text = json.dumps(args)
                half = len(text) // 2
                for piece in (text[:half], text[half:]):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    out.append(event("content_block_delta", index=index, delta=delta))
                out.append(event("content_block_stop", index=index))
            stop = "tool_use"
        usage = self._usage(reply.usage)
        out.append(
            event(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={
                    "output_tokens": usage["output_tokens"],
                    "output_tokens_details": usage["output_tokens_details"],
                },
            )
        )
        out.append(event("message_stop"))
        return out

    def error(self, status: Status) -> dict[str, Any]:
        kind = "rate_limit_error" if status.status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": status.message}}

    def last_user_text(self, request: dict[str, Any]) -> str:
        for message in reversed(request["messages"]):
            if message["role"] != "user":
                continue
            content = message["content"]
            if isinstance(content, str):
                return content
            texts = [b["text"] for b in content if b.get("type") == "text"]
            if texts:
                return str(texts[-1])
        return ""


CHAT: Dialect = _Chat()
RESPONSES: Dialect = _Responses()
ANTHROPIC: Dialect = _Anthropic()

ChunkHook = Callable[[int, bytes], None]
"""Called by the server before it writes each streamed event, with its index and bytes (a
test's or a benchmark's pacing)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.wire.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.wire.closed(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``WireServer.requests`` instead."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        wire = self.server.wire
        received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, 0.0)
        reply, number = wire.take(received)
        dialect = wire.dialect
        if self.path != dialect.path:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
        elif isinstance(reply, Status):
            self._json(reply.status, dialect.error(reply), reply.headers)
        elif isinstance(reply, Raw):
            if reply.body is not None:
                self._json(200, reply.body)
            else:
                self._stream(reply.encoded())
        elif isinstance(reply, CutOff):
            events = dialect.events(reply.reply, body, number)[: reply.after]
            self._stream(events, cut=not reply.clean)
        elif body.get("stream"):
            self._stream(dialect.events(reply, body, number), hook=wire.chunk_hook)
        else:
            self._json(200, dialect.answer(reply, body, number))

    def _json(
        self, status: int, data: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, events: list[bytes], *, cut: bool = False, hook: Any = None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for index, data in enumerate(events):
            if hook is not None:
                hook(index, data)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            if hook is not None:
                self.server.wire.chunk_written(index)
        if cut:  # no last chunk: the body ends mid-stream
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # joined by server_close: a test leaves no thread behind
    block_on_close = True
    wire: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closed its connection (an SDK dropping a pooled one, a stream cut
        off) is not an error of the server's; anything else is printed as before."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class WireServer:
    """A provider's API on 127.0.0.1, scripted by a test. Thread-safe.

    Use it as a context manager (or call ``close``): it stops, closes every
    connection the SDKs kept open and joins its threads.
    """

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._lock = threading.Condition()
        self._script: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.chunk_hook: ChunkHook | None = None
        self.chunk_times: list[float] = []
        self._connections: set[socket.socket] = set()
        self._http = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._http.wire = self
        self._thread = threading.Thread(
            target=self._http.serve_forever,
            name=f"wire-{dialect.name}",
            kwargs={"poll_interval": 0.05},
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}{self.dialect.prefix}"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        with self._lock:
            self._script.extend(replies)

    def take(self, received: Received) -> tuple[Reply, int]:
        """Record a request; the reply it gets and its number (from 1)."""
        with self._lock:
            self.requests.append(
                Received(received.path, received.headers, received.body, time.monotonic())
            )
            number = len(self.requests)
            reply = self._script.popleft() if self._script else None
            self._lock.notify_all()
        if reply is None:
            reply = Text(f"echo: {self.dialect.last_user_text(received.body)}")
        return reply, number

    def wait_for(self, count: int, timeout: float = WAIT) -> list[Received]:
        """The requests once at least ``count`` arrived."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"{len(self.requests)} requests arrived, not {count}")
            return list(self.requests)

    def chunk_written(self, index: int) -> None:
        self.chunk_times.append(time.perf_counter())

    def opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def close(self) -> None:
        """Stop serving, close the connections still open, join every thread."""
        self._http.shutdown()
        self._thread.join(WAIT)
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)
        self._http.server_close()

    def __enter__(self) -> WireServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
