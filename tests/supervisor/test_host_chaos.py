"""Chaos: 1,000 crashes injected into 20 sessions while other threads keep talking to them.

The invariant under test is the host's durability promise: every turn a
caller got an answer for is in that session's history, whatever crashed.
Deterministic in what it asserts (seeded choices, waits on real events);
only the interleaving varies from run to run.
"""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import (
    WAIT,
    Journal,
    PacedSenders,
    SessionTally,
    assert_acknowledged_turns_kept,
    assert_threads_back,
    template,
)

SESSIONS = 20
CRASHES = 1000
SENDERS = 4
TURNS_PER_CRASH = 0.5
"""Each sender's pace (see ``PacedSenders``)."""


@pytest.mark.slow
def test_thousand_crashes_lose_no_acknowledged_turn() -> None:
    before = set(threading.enumerate())
    journal = Journal()
    tally = SessionTally()
    host = AgentHost(store=MemoryCheckpointStore(), max_restarts=10_000, max_seconds=1.0)
    senders = PacedSenders(
        host,
        [f"s{i:02}" for i in range(SESSIONS)],
        senders=SENDERS,
        turns_per_fault=TURNS_PER_CRASH,
        name="chaos-sender",
    )
    acked = senders.acked
    try:
        for sid in acked:
            host.start_session(template(journal), sid)
            host.subscribe(sid, tally.subscriber(sid))

        senders.start()
        rng = random.Random(2024)
        kills: Counter[str] = Counter()
        try:
            for _ in range(CRASHES):
                sid = rng.choice(list(acked))
                ref = host.registry.get(sid).actor_ref  # live: it was resumed before
                host.kill(sid, reason="chaos")
                assert ref.actor_stopped.wait(WAIT)
                kills[sid] += 1
                senders.fault_done()
                tally.wait_resumed(Counter({sid: kills[sid]}))
        finally:
            senders.stop()
        assert not senders.failures, senders.failures
        assert not any(t.is_alive() for t in senders.threads)

        # Every crash was a real death followed by a resume from the checkpoint.
        assert sum(kills.values()) == CRASHES
        assert tally.resumed == kills
        assert all(len(journal.of(sid)) == kills[sid] + 1 for sid in acked)
        assert senders.total > CRASHES, "the senders barely ran"

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
