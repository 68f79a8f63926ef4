"""Provider adapter benchmarks (issue 15), against a local server speaking each API.

The server is ``tests.providers.wire.WireServer``: a real HTTP server on
127.0.0.1 that the official SDKs reach through ``base_url``, answering with the
echo of the last user text (JSON, or Server-Sent Events when asked to stream).

1. A non-streamed turn through a session against a bare SDK call to the same
   server, on each adapter: turns/s of an ``AgentSession`` actor (``ask(Send)``),
   against the same SDK's ``create`` with the same growing conversation (for
   the Responses API continuing from the previous response, as the adapter
   does), rounds interleaved, median of per-round ratios. Goal: >= 0.9. For
   context: the same session called on the benchmark's thread (no actor
   hand-off: what the session and adapter cost alone); and through
   ``AgentHost.send``, which adds the host's routing and a checkpoint per turn
   (the default policy; into a ``MemoryCheckpointStore``), in thread and
   worker mode (one worker).
2. Streaming: from the server writing an SSE chunk to a subscriber of the
   session receiving its ``delta`` event, p50/p99 in thread and worker mode.
   The server writes a chunk only once the previous one's delta has arrived,
   so each chunk is timed alone. Goal: p99 < 2 ms (threads), < 5 ms (worker).
   For context, the floor: the same chunk to the bare SDK's stream iterator.
"""

from __future__ import annotations

import gc
import logging
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import openai

from actors import AgentSession, AgentTemplate, Event, Send
from actors.adapters import ProviderAdapter
from actors.adapters.anthropic_messages import AnthropicModel
from actors.adapters.openai_chat import OpenAIChatModel
from actors.adapters.openai_responses import OpenAIResponsesModel
from benchmarks._common import percentile, print_table
from supervisor import AgentHost, MemoryCheckpointStore
from tests.providers.wire import ANTHROPIC, CHAT, RESPONSES, Dialect, Text, WireServer

TURNS = 40  # per round; the conversation grows by two messages a turn
ROUNDS = 7
PIECES = 50  # streamed chunks per turn
STREAM_TURNS = 10
WAIT = 10.0

ADAPTERS: tuple[tuple[str, Dialect, type[ProviderAdapter[Any]]], ...] = (
    ("chat", CHAT, OpenAIChatModel),
    ("responses", RESPONSES, OpenAIResponsesModel),
    ("anthropic", ANTHROPIC, AnthropicModel),
)


def _bare_call(name: str, server: WireServer) -> Callable[[list[dict[str, Any]]], str]:
    """One bare SDK call answering a conversation (OpenAI-style dicts), as a user would write
    it: the Responses API continues from the previous response, as the adapter does."""
    if name == "anthropic":
        import anthropic  # noqa: PLC0415 (only this row needs it)

        claude = anthropic.Anthropic(base_url=server.base_url, api_key="sk-bench", max_retries=0)

        def call_claude(messages: list[dict[str, Any]]) -> str:
            answer = claude.messages.create(
                model="wire-model",
                max_tokens=4096,
                system="Be brief.",
                messages=messages,  # type: ignore[arg-type]
            )
            return "".join(b.text for b in answer.content if b.type == "text")

        return call_claude
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)
    if name == "chat":

        def call_chat(messages: list[dict[str, Any]]) -> str:
            completion = client.chat.completions.create(
                model="wire-model",
                messages=[{"role": "system", "content": "Be brief."}, *messages],  # type: ignore[list-item]
            )
            return completion.choices[0].message.content or ""

        return call_chat
    previous: list[str] = []

    def call_responses(messages: list[dict[str, Any]]) -> str:
        response = client.responses.create(
            model="wire-model",
            instructions="Be brief.",
            input=messages[-1:] if previous else messages,  # type: ignore[arg-type]
            previous_response_id=previous[-1] if previous else None,
        )
        previous.append(response.id)
        return response.output_text

    return call_responses


def _bare_turns(name: str, server: WireServer, turns: int) -> Callable[[], float]:
    """One round of bare SDK calls over a new conversation, growing as a session's does."""

    def run() -> float:
        call = _bare_call(name, server)
        messages: list[dict[str, Any]] = []
        start = time.perf_counter()
        for turn in range(turns):
            messages.append({"role": "user", "content": f"hello {turn}"})
            messages.append({"role": "assistant", "content": call(messages)})
        return turns / (time.perf_counter() - start)

    return run


def _session_turns(template: AgentTemplate, turns: int) -> Callable[[], float]:
    """One round of ``Send`` to a fresh ``AgentSession`` actor (no host, no checkpoints)."""

    def run() -> float:
        ref = AgentSession.start(template)
        start = time.perf_counter()
        for turn in range(turns):
            ref.ask(Send(f"hello {turn}"))
        elapsed = time.perf_counter() - start
        ref.stop()
        return turns / elapsed

    return run


def _inline_turns(template: AgentTemplate, turns: int) -> Callable[[], float]:
    """One round of ``AgentSession.send`` called on this thread (a plain object, no actor):
    the session's and the adapter's own cost, without the actor's thread hand-off."""

    def run() -> float:
        session = AgentSession(template)
        start = time.perf_counter()
        for turn in range(turns):
            session.send(f"hello {turn}")
        return turns / (time.perf_counter() - start)

    return run


def _host_turns(host: AgentHost, template: AgentTemplate, turns: int) -> Callable[[], float]:
    """One round of ``AgentHost.send`` on a fresh session (its conversation starts empty)."""

    def run() -> float:
        sid = host.start_session(template)
        start = time.perf_counter()
        for turn in range(turns):
            host.send(sid, f"hello {turn}")
        elapsed = time.perf_counter() - start
        host.stop_session(sid)
        return turns / elapsed

    return run


def _compare(subject: Callable[[], float], baseline: Callable[[], float]) -> tuple[float, ...]:
    subject(), baseline()  # warm up: connections, imports, first client
    subj, base, ratios = [], [], []
    for _ in range(ROUNDS):
        s, b = subject(), baseline()
        subj.append(s)
        base.append(b)
        ratios.append(s / b)
    return statistics.median(subj), statistics.median(base), statistics.median(ratios)


def bench_turns() -> None:
    rows = []
    for name, dialect, cls in ADAPTERS:
        with WireServer(dialect) as server:
            adapter = cls("wire-model", base_url=server.base_url, api_key="sk-bench", max_retries=0)
            template = AgentTemplate(model=adapter, instructions="Be brief.")
            bare = _bare_turns(name, server, TURNS)
            s, b, ratio = _compare(_session_turns(template, TURNS), bare)
            rows.append((f"{name}: bare SDK calls/s", f"{b:,.0f}"))
            rows.append((f"{name}: AgentSession turns/s", f"{s:,.0f}  ({ratio:.2f} x bare)"))
            s, b, ratio = _compare(_inline_turns(template, TURNS), bare)
            rows.append((f"{name}:   same, no actor hop", f"{s:,.0f}  ({ratio:.2f} x bare)"))
            with AgentHost(store=MemoryCheckpointStore()) as host:
                s, b, ratio = _compare(_host_turns(host, template, TURNS), bare)
            rows.append((f"{name}: AgentHost turns/s, threads", f"{s:,.0f}  ({ratio:.2f} x bare)"))
            with AgentHost(store=MemoryCheckpointStore(), workers=1) as host:
                s, b, ratio = _compare(_host_turns(host, template, TURNS), bare)
            rows.append((f"{name}: AgentHost turns/s, 1 worker", f"{s:,.0f}  ({ratio:.2f} x bare)"))
            adapter.close()
    print_table(
        f"1. non-streamed turn vs bare SDK call, same local server; goal >= 0.9 x bare "
        f"({TURNS} turns a round, median of {ROUNDS} interleaved rounds; AgentHost: a "
        "checkpoint per turn into a MemoryCheckpointStore)",
        rows,
    )


class _Pacer:
    """Paces the server's stream: chunk ``k`` is written once piece ``k - 1`` arrived."""

    def __init__(self) -> None:
        self.written: dict[str, float] = {}
        self.received: dict[str, float] = {}
        self._arrived = threading.Condition()
        self._last: str | None = None

    def before_write(self, _index: int, data: bytes) -> None:
        last = self._last
        if last is not None:
            with self._arrived:
                if not self._arrived.wait_for(lambda: last in self.received, WAIT):
                    raise TimeoutError(f"the delta of {last!r} never arrived")
            self._last = None
        piece = _piece_in(data)
        if piece is not None:
            self._last = piece
            self.written[piece] = time.perf_counter()

    def arrived(self, piece: str) -> None:
        now = time.perf_counter()
        with self._arrived:
            self.received[piece] = now
            self._arrived.notify_all()

    def latencies(self) -> list[float]:
        return [self.received[p] - self.written[p] for p in self.written if p in self.received]


def _piece_in(data: bytes) -> str | None:
    start = data.find(b"<p")
    if start < 0:
        return None
    return data[start : data.index(b">", start) + 1].decode()


def _pieces(turn: int) -> list[str]:
    return [f"<p{turn}.{i}>" for i in range(PIECES)]


def _stream_through_host(workers: int | None) -> list[float]:
    pacer = _Pacer()
    with WireServer(CHAT) as server:
        server.chunk_hook = pacer.before_write
        adapter = OpenAIChatModel(
            "wire-model", base_url=server.base_url, api_key="sk-bench", stream=True
        )
        with AgentHost(store=MemoryCheckpointStore(), workers=workers) as host:
            sid = host.start_session(AgentTemplate(model=adapter))

            def watch(event: Event) -> None:
                if event.type == "delta":
                    pacer.arrived(event.data["text"])

            host.subscribe(sid, watch)
            for turn in range(-1, STREAM_TURNS):  # turn -1 warms up
                pieces = _pieces(turn)
                server.script(Text("".join(pieces), pieces=pieces))
                host.send(sid, "stream")
                if turn == -1:
                    pacer.written.clear()
        adapter.close()
    return pacer.latencies()


def _stream_bare() -> list[float]:
    pacer = _Pacer()
    with WireServer(CHAT) as server:
        server.chunk_hook = pacer.before_write
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-bench")
        for turn in range(-1, STREAM_TURNS):
            pieces = _pieces(turn)
            server.script(Text("".join(pieces), pieces=pieces))
            chunks = client.chat.completions.create(
                model="wire-model", messages=[{"role": "user", "content": "stream"}], stream=True
            )
            for chunk in chunks:
                for choice in chunk.choices:
                    if choice.delta.content:
                        pacer.arrived(choice.delta.content)
            if turn == -1:
                pacer.written.clear()
        client.close()
    return pacer.latencies()


def bench_streaming() -> None:
    rows = []
    runs: list[tuple[str, Callable[[], list[float]], str]] = [
        ("threads", lambda: _stream_through_host(None), "p99 < 2 ms"),
        ("1 worker", lambda: _stream_through_host(1), "p99 < 5 ms"),
        ("bare SDK iterator (floor)", _stream_bare, ""),
    ]
    for label, run, goal in runs:
        samples = [s * 1000 for s in run()]
        rows.append(
            (
                f"{label}: chunk -> delta ms",
                f"p50 {percentile(samples, 50):.3f}  p99 {percentile(samples, 99):.3f}  "
                f"({len(samples)} chunks){'  goal ' + goal if goal else ''}",
            )
        )
    print_table(
        f"2. streaming: server writes a chunk -> subscriber gets its delta "
        f"({STREAM_TURNS} turns x {PIECES} chunks, each chunk alone)",
        rows,
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    gc.collect()
    bench_turns()
    print()
    bench_streaming()


if __name__ == "__main__":
    main()
