"""Per-turn overhead of ``AgentSession`` (issue 2).

Turns per second of an ``AgentSession`` with ``EchoModel`` and no tools against
a bare ``pykka.ThreadingActor`` answering ``ask()`` in the same run. The goal
(ratio >= 0.5) is judged on ``ref.ask(Send(text))``, the same Pykka messaging
path as the baseline, so the ratio isolates what the framework adds per turn;
the proxy call (``proxy.send(text).get()``) is reported too, since it adds
Pykka's own proxy cost. Each round uses fresh actors so history length (which
a real prompt grows with) is the same in every round.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import pykka

from actors import AgentSession, AgentTemplate, EchoModel, Send
from benchmarks._common import print_table

TURNS = 300
ROUNDS = 9


class BareEcho(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return f"echo: {message}"


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    for _ in range(TURNS):
        fn()
    return TURNS / (time.perf_counter() - start)


def _round(index: int) -> tuple[float, float, float]:
    """Rates of ask(Send), proxy send and the bare actor, each on a fresh actor.

    The order of the three blocks rotates from round to round and garbage is
    collected before each block, so neither side always runs on a dirtier heap.
    """
    template = AgentTemplate(model=EchoModel())
    ask_ref = AgentSession.start(template)
    proxy_ref = AgentSession.start(template)
    bare_ref = BareEcho.start()
    refs: list[pykka.ActorRef[Any]] = [ask_ref, proxy_ref, bare_ref]
    send = proxy_ref.proxy().send
    blocks = [
        lambda: ask_ref.ask(Send("hello there"), timeout=10),
        lambda: send("hello there").get(timeout=10),
        lambda: bare_ref.ask("hello there", timeout=10),
    ]
    rates = [0.0, 0.0, 0.0]
    try:
        for offset in range(3):
            which = (index + offset) % 3
            gc.collect()
            rates[which] = _timed(blocks[which])
    finally:
        for ref in refs:
            ref.stop()
    return rates[0], rates[1], rates[2]


def main() -> None:
    _round(0)  # warm-up
    results = [_round(i) for i in range(ROUNDS)]

    def median(index: int) -> float:
        return statistics.median(r[index] for r in results)

    def ratio(index: int) -> float:
        return statistics.median(r[index] / r[2] for r in results)

    print_table(
        f"AgentSession turn throughput (EchoModel, no tools; {ROUNDS} rounds of {TURNS} turns)",
        [
            ("ref.ask(Send(text)), turns/s (median)", f"{median(0):,.0f}"),
            ("proxy.send(text).get(), turns/s (median)", f"{median(1):,.0f}"),
            ("bare ThreadingActor ask, /s (median)", f"{median(2):,.0f}"),
            ("ratio ask(Send) / bare (median; goal >= 0.5)", f"{ratio(0):.2f}"),
            ("ratio proxy send / bare (median)", f"{ratio(1):.2f}"),
        ],
    )


if __name__ == "__main__":
    main()
