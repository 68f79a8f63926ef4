"""Provider adapter benchmarks (issue 15), against a local server speaking each API.

The server is ``tests.providers.wire.WireServer``: a real HTTP server on
127.0.0.1 that the official SDKs reach through ``base_url``, answering with the
echo of the last user text (JSON, or Server-Sent Events when asked to stream).

1. A non-streamed turn through a session against a bare SDK call to the same
   server, on each adapter: an ``AgentSession`` actor (``ask(Send)``) against
   the same SDK's ``create`` with the same growing conversation (for the
   Responses API continuing from the previous response, as the adapter does).
   Goal: >= 0.9. For context: the same session called on the benchmark's
   thread (no actor hand-off: what the session and adapter cost alone); and
   through ``AgentHost.send``, which adds the host's routing and a checkpoint
   per turn (the default policy; into a ``MemoryCheckpointStore``), in thread
   and worker mode (one worker). A round opens a new conversation on each and
   runs them in lockstep, turn by turn, in an order that rotates; the figure
   is the median of the per-round ratios of time spent. Timing whole rounds
   one after the other instead let a burst of the machine's other load fall on
   one side only: the session without the actor came out anywhere between
   0.89 and 1.09 x bare from one run to the next, in lockstep 0.98-1.00.
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
ROUNDS = 9
PIECES = 50  # streamed chunks per turn
STREAM_TURNS = 10
WAIT = 10.0

ADAPTERS: tuple[tuple[str, Dialect, type[ProviderAdapter[Any]]], ...] = (
    ("chat", CHAT, OpenAIChatModel),
    ("responses", RESPONSES, OpenAIResponsesModel),
    ("anthropic", ANTHROPIC, AnthropicModel),
)


def _bare_client(name: str, server: WireServer) -> Any:
    """The bare SDK client of ``name``, as a user would build it for ``server``."""
    if name == "anthropic":
        import anthropic  # noqa: PLC0415 (only this row needs it)

        return anthropic.Anthropic(base_url=server.base_url, api_key="sk-bench", max_retries=0)
    return openai.OpenAI(base_url=server.base_url, api_key="sk-bench", max_retries=0)


def _bare_call(name: str, client: Any) -> Callable[[list[dict[str, Any]]], str]:
    """One bare SDK call answering a new conversation (OpenAI-style dicts), as a user would
    write it: the Responses API continues from the previous response, as the adapter does."""
    if name == "anthropic":

        def call_claude(messages: list[dict[str, Any]]) -> str:
            answer = client.messages.create(
                model="wire-model", max_tokens=4096, system="Be brief.", messages=messages
            )
            return "".join(b.text for b in answer.content if b.type == "text")

        return call_claude
    if name == "chat":

        def call_chat(messages: list[dict[str, Any]]) -> str:
            completion = client.chat.completions.create(
                model="wire-model",
                messages=[{"role": "system", "content": "Be brief."}, *messages],
            )
            return completion.choices[0].message.content or ""

        return call_chat
    previous: list[str] = []

    def call_responses(messages: list[dict[str, Any]]) -> str:
        response = client.responses.create(
            model="wire-model",
            instructions="Be brief.",
            input=messages[-1:] if previous else messages,
            previous_response_id=previous[-1] if previous else None,
        )
        previous.append(response.id)
        return str(response.output_text)

    return call_responses


Turn = Callable[[str], object]
"""One turn of a conversation: the user's text in, the answer out."""

Opener = Callable[[], tuple[Turn, Callable[[], object]]]
"""Starts a new conversation: its turn, and what ends it."""


def _bare(name: str, client: Any) -> Opener:
    """Bare SDK calls over a conversation that grows as a session's does."""

    def open_conversation() -> tuple[Turn, Callable[[], object]]:
        call = _bare_call(name, client)
        messages: list[dict[str, Any]] = []

        def turn(text: str) -> object:
            messages.append({"role": "user", "content": text})
            messages.append({"role": "assistant", "content": call(messages)})
            return messages[-1]

        return turn, lambda: None

    return open_conversation


def _actor(template: AgentTemplate) -> Opener:
    """``ask(Send)`` to a fresh ``AgentSession`` actor (no host, no checkpoints)."""

    def open_conversation() -> tuple[Turn, Callable[[], object]]:
        ref = AgentSession.start(template)
        return (lambda text: ref.ask(Send(text), timeout=WAIT)), lambda: ref.stop(timeout=WAIT)

    return open_conversation


def _inline(template: AgentTemplate) -> Opener:
    """``AgentSession.send`` called on this thread (a plain object, no actor): the session's
    and the adapter's own cost, without the actor's thread hand-off."""

    def open_conversation() -> tuple[Turn, Callable[[], object]]:
        return AgentSession(template).send, lambda: None

    return open_conversation


def _hosted(host: AgentHost, template: AgentTemplate) -> Opener:
    """``AgentHost.send`` to a fresh session (its conversation starts empty)."""

    def open_conversation() -> tuple[Turn, Callable[[], object]]:
        sid = host.start_session(template)
        return (lambda text: host.send(sid, text)), lambda: host.stop_session(sid)

    return open_conversation


def _lockstep(openers: dict[str, Opener]) -> dict[str, list[float]]:
    """Seconds each subject spent per round: every round opens a conversation of each and
    runs their turns in lockstep (turn k of each before turn k + 1 of any, in an order that
    rotates), so a burst of the machine's other load falls on all of them alike."""
    names = list(openers)
    spent: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(ROUNDS + 1):  # round 0 warms up: connections, imports, clients
        opened = {name: openers[name]() for name in names}
        seconds = dict.fromkeys(names, 0.0)
        for turn in range(TURNS):
            shift = (round_index + turn) % len(names)
            for name in names[shift:] + names[:shift]:
                begun = time.perf_counter()
                opened[name][0](f"hello {turn}")
                seconds[name] += time.perf_counter() - begun
        for _turn, close in opened.values():
            close()
        if round_index:
            for name in names:
                spent[name].append(seconds[name])
    return spent


def bench_turns() -> None:
    rows = []
    for name, dialect, cls in ADAPTERS:
        with (
            WireServer(dialect) as server,
            AgentHost(store=MemoryCheckpointStore()) as threads,
            AgentHost(store=MemoryCheckpointStore(), workers=1) as worker,
        ):
            adapter = cls("wire-model", base_url=server.base_url, api_key="sk-bench", max_retries=0)
            template = AgentTemplate(model=adapter, instructions="Be brief.")
            client = _bare_client(name, server)
            spent = _lockstep(
                {
                    "bare": _bare(name, client),
                    "AgentSession turns/s": _actor(template),
                    "  same, no actor hop": _inline(template),
                    "AgentHost turns/s, threads": _hosted(threads, template),
                    "AgentHost turns/s, 1 worker": _hosted(worker, template),
                }
            )
            bare = spent.pop("bare")
            rows.append((f"{name}: bare SDK calls/s", f"{TURNS / statistics.median(bare):,.0f}"))
            for label, seconds in spent.items():
                ratio = statistics.median(b / s for b, s in zip(bare, seconds, strict=True))
                rate = TURNS / statistics.median(seconds)
                rows.append((f"{name}: {label}", f"{rate:,.0f}  ({ratio:.2f} x bare)"))
            client.close()
            adapter.close()
    print_table(
        f"1. non-streamed turn vs bare SDK call, same local server; goal >= 0.9 x bare "
        f"({TURNS} turns a round, every subject's turns in lockstep; median of {ROUNDS} "
        "per-round ratios; AgentHost: a checkpoint per turn into a MemoryCheckpointStore)",
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
