"""The per-turn checkpoint step against the length of the conversation (issue 14).

The step is what a host runs on the session's thread after every turn:
``AgentSession.snapshot()`` (``state()``, then ``Snapshot.new`` strips live
values) and the host's ``Checkpoints`` saver (redaction, the event mark, then
``SQLiteCheckpointStore.save``, durable with the default ``synchronous=FULL``).
It is timed here exactly so, on a session driven as a plain object on this
thread, with a default SQLite store in a temporary directory.

Each measured turn is the same: a user message asking for a tool, the tool
call, its result and the answer (4 messages), with a plugin counting turns in
its state. Figures, medians of interleaved rounds with ratios taken per round:

1. the step for a session of 2,000 messages (the same session all along,
   checkpointed after every turn for 110 turns before the first timed one, so
   the store's pruning to ``keep_last`` is in its steady state; it grows by 4
   messages a turn) against a session of 30 messages (a fresh one for every
   timed turn: 26 messages, one checkpoint, then the timed turn). Goal <= 1.5.
2. the 2,000-message step against a bare ``sqlite3`` transaction in WAL mode
   with the same ``synchronous`` that inserts that turn's new bytes: the
   checkpoint's body (the snapshot without its messages) and the turn's 4
   encoded messages, as two rows. Goal <= 2.0.

3. A whole turn through ``AgentHost.send`` with the session in a worker process
   (``workers=1``, the same durable SQLite store, a checkpoint every turn: the
   worker sends the host the turn's new messages, the host saves them), at
   2,000 messages (one session, ``OPS`` tool turns a round) against 30 (``OPS``
   fresh sessions, one timed turn each). Issue 14's goal for the step, <= 1.5,
   applies to the turn here: nothing in it may grow with the conversation.

Each step is also shown split into ``snapshot()`` and the save, so that the
part that grows with the conversation is plain. The bare insert pays one WAL
fsync, as every step does: on a disk busy with other writers fsync dominates
both sides and the ratios shrink; the snapshot column does not depend on it.
A missed goal is reported, not failed.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from actors import (
    AgentSession,
    AgentTemplate,
    EchoModel,
    Message,
    Plugin,
    PluginContext,
    Snapshot,
    tool,
)
from benchmarks._common import bare_sqlite, print_table
from supervisor import AgentHost, SQLiteCheckpointStore
from supervisor._checkpoints import Checkpoints
from supervisor._message_log import split

LONG = 2000
SHORT = 30
PRIMED = 110  # checkpoints of the long session before timing: past keep_last (100)
OPS = 8
ROUNDS = 9


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


class TurnCounter(Plugin):
    """Keeps a count of turns in its state, so every checkpoint has plugin state that changed."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("turns", 0)

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] += 1


TEMPLATE = AgentTemplate(
    model=EchoModel(), tools=[lookup], plugins=[TurnCounter()], instructions="Be brief."
)


NewBytes = tuple[bytes, bytes]
"""What a checkpoint adds to the store: its body, and the messages the log did not hold yet."""


class Subject:
    """One session driven on this thread, saving through a host's ``Checkpoints``.

    Built to ``messages`` messages, its last ``primed`` turns checkpointed.
    """

    def __init__(self, checkpoints: Checkpoints, messages: int, primed: int) -> None:
        self.session = AgentSession(TEMPLATE, session_id=uuid.uuid4().hex)
        self.session.on_start()  # what the actor thread runs first: plugins' session_start
        self.save = checkpoints.saver(self.session.event_buffer)
        self.turn = 0
        self._log_bytes = 0
        if messages % 4 == 2:
            self.session.send("hello")
        while len(self.session.history()) < messages:
            self.tool_turn()
            if (messages - len(self.session.history())) // 4 < primed:
                self.step()

    def tool_turn(self) -> None:
        """A turn of 4 messages (user, tool call, tool result, answer), not checkpointed."""
        self.turn += 1
        self.session.send(f'/lookup {{"key": "topic-{self.turn}"}}')

    def step(self) -> tuple[float, float, NewBytes]:
        """The checkpoint step: seconds in ``snapshot()``, in the save, and the new bytes."""
        start = time.perf_counter()
        snapshot = self.session.snapshot()
        middle = time.perf_counter()
        saved = self.save(snapshot)
        end = time.perf_counter()
        return middle - start, end - middle, self._new_bytes(saved)

    def _new_bytes(self, saved: Snapshot) -> NewBytes:
        """The body of ``saved`` and its messages the store had not got yet (untimed)."""
        cut = split(saved)
        assert cut.messages is not None
        new = bytes(cut.messages.after(self._log_bytes))
        self._log_bytes = cut.messages.length
        return cut.body, new


class Bare:
    """A bare SQLite database (WAL, the store's ``synchronous``) taking new bytes as rows."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = bare_sqlite(path, synchronous)
        self.conn.execute("CREATE TABLE bodies (id INTEGER PRIMARY KEY, data BLOB)")
        self.conn.execute("CREATE TABLE chunks (id INTEGER PRIMARY KEY, data BLOB)")

    def insert(self, data: NewBytes) -> float:
        """Seconds to insert a turn's body and messages in one committed transaction."""
        body, messages = data
        start = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO bodies (data) VALUES (?)", (body,))
        self.conn.execute("INSERT INTO chunks (data) VALUES (?)", (messages,))
        self.conn.execute("COMMIT")
        return time.perf_counter() - start


def _mean(samples: list[float]) -> float:
    return sum(samples) / len(samples)


@dataclass(frozen=True, slots=True)
class Step:
    """Seconds of one checkpoint step (or a mean of several): ``snapshot()``, then the save."""

    snapshot: float
    save: float

    @property
    def total(self) -> float:
        return self.snapshot + self.save

    @staticmethod
    def mean(steps: list[Step]) -> Step:
        return Step(_mean([s.snapshot for s in steps]), _mean([s.save for s in steps]))


class Rounds:
    """The three timed blocks of a round; run on one thread."""

    def __init__(self, checkpoints: Checkpoints, bare: Bare) -> None:
        self.checkpoints = checkpoints
        self.bare = bare
        self.long = Subject(checkpoints, LONG, PRIMED)
        self.turn_bytes: list[NewBytes] = []

    def long_steps(self) -> Step:
        """Mean seconds of ``snapshot()`` and of the save, over ``OPS`` turns of the long one."""
        steps = []
        self.turn_bytes = []
        for _ in range(OPS):
            self.long.tool_turn()
            snap, save, new = self.long.step()
            steps.append(Step(snap, save))
            self.turn_bytes.append(new)
        return Step.mean(steps)

    def short_steps(self) -> Step:
        """Mean seconds of the step of ``OPS`` fresh sessions at ``SHORT`` messages."""
        steps = []
        for _ in range(OPS):
            short = Subject(self.checkpoints, SHORT - 4, primed=1)
            short.tool_turn()
            assert len(short.session.history()) == SHORT
            snap, save, _ = short.step()
            steps.append(Step(snap, save))
        return Step.mean(steps)

    def bare_inserts(self, data: list[NewBytes]) -> float:
        """Mean seconds of a bare transaction inserting each of ``data``."""
        return _mean([self.bare.insert(d) for d in data])

    def run(self, index: int) -> tuple[Step, Step, float]:
        """One round, its blocks in an order rotating with ``index``: the long session's
        steps, the short ones', and bare inserts (of the previous long block's turns)."""
        previous = self.turn_bytes
        long = short = Step(0.0, 0.0)
        bare = 0.0
        for offset in range(3):
            which = (index + offset) % 3
            if which == 0:
                long = self.long_steps()
            elif which == 1:
                short = self.short_steps()
            else:
                bare = self.bare_inserts(previous)
        return long, short, bare


def figures(directory: Path) -> list[tuple[str, str]]:
    store = SQLiteCheckpointStore(directory / "store.db")
    bare = Bare(directory / "bare.db", store.synchronous)
    with store, closing(bare.conn):
        rounds = Rounds(Checkpoints(store), bare)
        rounds.long_steps()  # warm-up, and the first round's bare bytes
        first = len(rounds.long.session.history()) + 4
        rows = [rounds.run(index) for index in range(ROUNDS)]
        last = len(rounds.long.session.history())
        new_size = statistics.median(len(a) + len(b) for a, b in rounds.turn_bytes)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.2f} ms"

    longs, shorts = [r[0] for r in rows], [r[1] for r in rows]
    vs_short = statistics.median(long.total / short.total for long, short, _ in rows)
    vs_bare = statistics.median(long.total / bare for long, _, bare in rows)
    return [
        (f"step, {first:,}-{last:,} messages", ms([s.total for s in longs])),
        ("  of which snapshot() (state + strip)", ms([s.snapshot for s in longs])),
        ("  of which Checkpoints save (store.save)", ms([s.save for s in longs])),
        (f"step, {SHORT} messages", ms([s.total for s in shorts])),
        ("  of which snapshot() (state + strip)", ms([s.snapshot for s in shorts])),
        ("  of which Checkpoints save (store.save)", ms([s.save for s in shorts])),
        (f"bare insert+commit of a turn's new bytes ({new_size:,.0f} B)", ms([r[2] for r in rows])),
        (f"goal: step {LONG:,} / {SHORT} messages (<= 1.5)", _verdict(vs_short, 1.5)),
        ("goal: step / bare insert of new bytes (<= 2.0)", _verdict(vs_bare, 2.0)),
    ]


def _timed_turns(host: AgentHost, session_id: str, count: int) -> float:
    """Mean seconds of ``count`` tool turns (4 messages each) of a session through ``host``."""
    start = time.perf_counter()
    for turn in range(count):
        host.send(session_id, f'/lookup {{"key": "timed-{turn}"}}')
    return (time.perf_counter() - start) / count


def _primed(host: AgentHost, messages: int) -> str:
    """A new session of ``host`` with ``messages`` messages, every turn checkpointed."""
    session_id = host.start_session(TEMPLATE)
    if messages % 4 == 2:
        host.send(session_id, "hello")
    while len(host.history(session_id)) < messages:
        _timed_turns(host, session_id, (messages - len(host.history(session_id))) // 4)
    return session_id


def worker_figures(directory: Path) -> list[tuple[str, str]]:
    """Figure 3: a worker session's turn at ``LONG`` against ``SHORT`` messages."""
    store = SQLiteCheckpointStore(directory / "worker.db")
    with store, AgentHost(store=store, workers=1) as host:
        long = _primed(host, LONG)
        longs, shorts = [], []
        for index in range(ROUNDS):
            for which in (index % 2, 1 - index % 2):
                if which == 0:
                    longs.append(_timed_turns(host, long, OPS))
                else:
                    fresh = [_primed(host, SHORT - 4) for _ in range(OPS)]
                    shorts.append(_mean([_timed_turns(host, sid, 1) for sid in fresh]))
                    for sid in fresh:
                        host.stop_session(sid)
        last = len(host.history(long))
    ratio = statistics.median(a / b for a, b in zip(longs, shorts, strict=True))
    return [
        (f"worker turn, {LONG:,}-{last:,} messages", f"{statistics.median(longs) * 1e3:.2f} ms"),
        (f"worker turn, {SHORT} messages", f"{statistics.median(shorts) * 1e3:.2f} ms"),
        (f"goal: worker turn {LONG:,} / {SHORT} messages (<= 1.5)", _verdict(ratio, 1.5)),
    ]


def _verdict(ratio: float, goal: float) -> str:
    return f"{ratio:.1f}x ({'met' if ratio <= goal else 'missed'})"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = figures(Path(tmp))
        rows += worker_figures(Path(tmp))
    print_table(f"checkpoint step after a turn ({ROUNDS} rounds of {OPS} turns; medians)", rows)


if __name__ == "__main__":
    main()
