"""Where one turn through ``AgentHost`` spends its time outside the model (issues 14 and 15).

Every case runs the same turns (``EchoModel``, an instant local model, so what
is timed is the fixed cost around the model call), on one thread mode path,
each built on the one before it:

1. ``AgentSession.send`` called on this thread (a plain object: no actor, no
   checkpoint): the session's turn loop, its events and the model;
2. the same, then ``snapshot()`` after every turn: the checkpoint's snapshot;
3. the same, then the host's ``Checkpoints`` saver into a
   ``MemoryCheckpointStore`` (redaction, the event mark, ``serialize``, seal);
4. the same into a ``SQLiteCheckpointStore`` in a temporary directory
   (``synchronous=FULL``: its fsync included);
5. ``ref.ask(Send(text))`` to an ``AgentSession`` actor, no checkpoint: (1) plus
   the hand-off to the session's thread and back;
6. ``AgentHost.send`` with a ``MemoryCheckpointStore``: (3) plus the actor's
   hand-off plus the host's routing (its table, the session's gate, the usage
   count and the checkpoint's event mark);
7. ``AgentHost.send`` with a data directory (the default SQLite store): (6) with
   the durable save of (4).

Rounds are interleaved; each figure is the median over rounds of microseconds per
turn, and each part is the difference of two medians (so a part near 0 may come
out slightly negative on a noisy machine). Every conversation starts empty and
grows to ``TURNS`` turns, as in ``bench_providers``.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from actors import AgentSession, AgentTemplate, EchoModel, EventBuffer, Send
from benchmarks._common import print_table
from supervisor import AgentHost, CheckpointStore, MemoryCheckpointStore, SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints

TURNS = 60
ROUNDS = 9
TEMPLATE = AgentTemplate(model=EchoModel(), instructions="Be brief.")


def _per_turn(run: Callable[[int], object]) -> float:
    start = time.perf_counter()
    for turn in range(TURNS):
        run(turn)
    return (time.perf_counter() - start) / TURNS * 1e6


def _inline(snapshot: bool = False, store: CheckpointStore | None = None) -> Callable[[], float]:
    saver = None if store is None else Checkpoints(store).saver(EventBuffer(1000))

    def case() -> float:
        session = AgentSession(TEMPLATE, checkpointer=saver)

        def turn(n: int) -> None:
            session.send(f"hello {n}")
            if snapshot:
                session.snapshot()

        return _per_turn(turn)

    return case


def _actor() -> float:
    ref = AgentSession.start(TEMPLATE)
    try:
        return _per_turn(lambda n: ref.ask(Send(f"hello {n}")))
    finally:
        ref.stop()


def _host(host: AgentHost) -> Callable[[], float]:
    def case() -> float:
        sid = host.start_session(TEMPLATE)
        try:
            return _per_turn(lambda n: host.send(sid, f"hello {n}"))
        finally:
            host.stop_session(sid)

    return case


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-turn-") as tmp,
        SQLiteCheckpointStore(Path(tmp) / "inline.db") as sqlite_store,
        AgentHost(store=MemoryCheckpointStore()) as memory_host,
        AgentHost(data_dir=Path(tmp) / "host") as sqlite_host,
    ):
        cases: dict[str, Callable[[], float]] = {
            "session": _inline(),
            "snapshot": _inline(snapshot=True),
            "memory save": _inline(store=MemoryCheckpointStore()),
            "sqlite save": _inline(store=sqlite_store),
            "actor": _actor,
            "host memory": _host(memory_host),
            "host sqlite": _host(sqlite_host),
        }
        for case in cases.values():  # warm up
            case()
        runs: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(ROUNDS):
            for name, case in cases.items():
                gc.collect()
                runs[name].append(case())
    us = {name: statistics.median(values) for name, values in runs.items()}
    parts = [
        ("session turn + model (EchoModel)", us["session"]),
        ("snapshot()", us["snapshot"] - us["session"]),
        ("snapshot + Checkpoints.save, memory store", us["memory save"] - us["session"]),
        ("snapshot + Checkpoints.save, SQLite (FULL)", us["sqlite save"] - us["session"]),
        ("actor hand-off and back", us["actor"] - us["session"]),
        (
            "host routing (the rest of host.send)",
            us["host memory"] - us["memory save"] - (us["actor"] - us["session"]),
        ),
    ]
    rows = [(name, f"{value:8.1f} us") for name, value in parts]
    rows += [
        ("total: host.send, memory store", f"{us['host memory']:8.1f} us"),
        ("total: host.send, SQLite data dir", f"{us['host sqlite']:8.1f} us"),
    ]
    print_table(
        f"where a turn goes, thread mode (us per turn, medians of {ROUNDS} interleaved rounds "
        f"of {TURNS} turns)",
        rows,
    )


if __name__ == "__main__":
    main()
