"""Chaos: 1,000 crashes injected into 20 sessions while other threads keep talking to them.

The invariant under test is the host's durability promise: every turn a
caller got an answer for is in that session's history, whatever crashed.
Deterministic in what it asserts (seeded choices, waits on real events);
only the interleaving varies from run to run.
"""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter

import pytest

from actors import Event, Subscriber
from supervisor import AgentHost, MemoryCheckpointStore, SessionCrashed
from tests.supervisor.host_helpers import (
    WAIT,
    Journal,
    assert_acknowledged_turns_kept,
    assert_threads_back,
    template,
)

SESSIONS = 20
CRASHES = 1000
SENDERS = 4
TURNS_PER_CRASH = 0.5
"""Each sender's pace: at most this many turns per crash so far (plus one), so the
histories, and the checkpoints every turn rewrites, stay a few hundred messages long."""


class Resumes:
    """Counts the ``resumed`` events of every session; wait for a count with a bound."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.counts: Counter[str] = Counter()

    def subscriber(self, session_id: str) -> Subscriber:
        def on_event(event: Event) -> None:
            if event.type == "resumed":
                with self._cond:
                    self.counts[session_id] += 1
                    self._cond.notify_all()

        return on_event

    def wait(self, session_id: str, count: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: self.counts[session_id] >= count, WAIT)
        assert ok, f"{session_id!r} was not resumed a {count}-th time"


@pytest.mark.slow
def test_thousand_crashes_lose_no_acknowledged_turn() -> None:
    before = set(threading.enumerate())
    journal = Journal()
    resumes = Resumes()
    acked: dict[str, list[tuple[int, str, str]]] = {f"s{i:02}": [] for i in range(SESSIONS)}
    ack_lock = threading.Lock()
    failures: list[BaseException] = []
    crashed_sends = Counter[int]()
    stop = threading.Event()
    pace = threading.Condition()
    crashes_done = [0]

    host = AgentHost(store=MemoryCheckpointStore(), max_restarts=10_000, max_seconds=1.0)
    try:
        for sid in acked:
            host.start_session(template(journal), sid)
            host.subscribe(sid, resumes.subscriber(sid))

        def within_pace(turn: int) -> bool:
            return stop.is_set() or turn < TURNS_PER_CRASH * (crashes_done[0] + 2)

        def sender(index: int) -> None:
            rng = random.Random(index)
            turn = 0
            try:
                while not stop.is_set():
                    with pace:
                        pace.wait_for(functools.partial(within_pace, turn), WAIT)
                    sid = rng.choice(list(acked))
                    text = f"sender {index} turn {turn}"
                    turn += 1
                    try:
                        answer = host.send(sid, text, timeout=WAIT)
                    except SessionCrashed:
                        crashed_sends[index] += 1  # not acknowledged: may or may not be saved
                        continue
                    with ack_lock:
                        acked[sid].append((index, text, answer.content or ""))
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=sender, args=(i,), name=f"chaos-sender-{i}")
            for i in range(SENDERS)
        ]
        for thread in threads:
            thread.start()
        rng = random.Random(2024)
        kills: Counter[str] = Counter()
        try:
            for _ in range(CRASHES):
                sid = rng.choice(list(acked))
                ref = host.registry.get(sid).actor_ref  # live: it was resumed before
                host.kill(sid, reason="chaos")
                assert ref.actor_stopped.wait(WAIT)
                kills[sid] += 1
                with pace:
                    crashes_done[0] += 1
                    pace.notify_all()
                resumes.wait(sid, kills[sid])
        finally:
            with pace:
                stop.set()
                pace.notify_all()
            for thread in threads:
                thread.join(WAIT * 2)
        assert not failures, failures
        assert not any(t.is_alive() for t in threads)

        # Every crash was a real death followed by a resume from the checkpoint.
        assert sum(kills.values()) == CRASHES
        assert resumes.counts == kills
        assert all(len(journal.of(sid)) == kills[sid] + 1 for sid in acked)
        total_acked = sum(len(turns) for turns in acked.values())
        assert total_acked > CRASHES, "the senders barely ran"

        # No acknowledged turn is missing, none is doubled, each sender's are in order.
        assert_acknowledged_turns_kept(host, acked, SENDERS)

        # The registry holds exactly the 20 sessions, each with a live actor.
        entries = host.registry.list()
        assert host.registry.count() == SESSIONS
        assert len(entries) == SESSIONS
        assert all(entry.actor_ref.is_alive() for entry in entries)
        host.registry._check_consistency()
        assert {s.status for s in host.list_sessions()} == {"active"}
        for sid in acked:
            assert host.send(sid, "after the storm", timeout=WAIT).content == (
                "echo: after the storm"
            )
    finally:
        host.shutdown()
    assert_threads_back(before)
