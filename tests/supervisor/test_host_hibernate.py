"""``AgentHost`` hibernation, driven by an injected clock (no background sweeper, no sleeps).

Every test runs with sessions in threads and in worker processes, except the
ones marked ``thread_only`` (they say why).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actors import Message
from supervisor import AgentHost, MemoryCheckpointStore, SessionNotFound
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import (
    DEFAULT_PARKED_THREADS,
    WAIT,
    Journal,
    assert_threads_back,
    host_options,
    registry_lookup_fails,
    session_thread_gone,
    template,
    watch_events,
)
from tests.supervisor.workers.worker_tools import FifoModel

LIMIT_MS = 1000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(100.0)


@pytest.fixture
def host(clock: FakeClock, mode: str) -> Iterator[AgentHost]:
    with AgentHost(
        store=MemoryCheckpointStore(),
        hibernate_after_ms=LIMIT_MS,
        auto_hibernate=False,
        clock=clock,
        **host_options(mode),
    ) as host:
        yield host


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    """A process-safe journal: it reports back from worker processes through ``tmp_path``."""
    return Journal(tmp_path)


def _contents(history: list[Message]) -> list[str | None]:
    return [m.content for m in history]


def test_idle_session_hibernates_then_reactivates_on_send(
    host: AgentHost, clock: FakeClock, journal: Journal
) -> None:
    sid = host.start_session(template(journal), "sleepy", tenant_id="acme", api_key="k")
    host.send(sid, "hello")
    waiter = watch_events(host, sid)

    clock.now += 0.5
    assert host.hibernate_idle() == []  # not idle long enough
    clock.now += 0.5
    assert host.hibernate_idle() == [sid]

    # Checkpointed, no actor, no thread, no registry entry: never a dead ref.
    assert (
        waiter.wait_for("hibernated").data["checkpoint_id"] == host.store.list(sid)[0].checkpoint_id
    )
    assert host.store.list(sid)[0].label == "hibernate"
    assert [(s.session_id, s.tenant_id, s.status) for s in host.list_sessions("acme")] == [
        (sid, "acme", "hibernated")
    ]
    assert registry_lookup_fails(host, sid)
    assert host.registry.count() == 0
    assert session_thread_gone(journal, sid)
    assert journal.ends == [(sid, "normal")]
    assert host.hibernate_idle() == []

    answer = host.send(sid, "wake up")

    assert answer.content == "echo: wake up"
    assert _contents(host.history(sid)) == ["hello", "echo: hello", "wake up", "echo: wake up"]
    starts = journal.of(sid)
    assert [(s.resumed, s.stripped, s.turns_seen) for s in starts] == [
        (False, (), 0),
        (True, ("handle",), 1),
    ]
    assert waiter.wait_for("reactivated")
    assert [s.status for s in host.list_sessions()] == ["active"]
    assert host.registry.get(sid).actor_ref.is_alive()
    assert host.registry.api_key_matches(sid, "k")  # the fingerprint was kept meanwhile


def test_history_of_a_hibernated_session_does_not_wake_it(
    host: AgentHost, clock: FakeClock, journal: Journal
) -> None:
    sid = host.start_session(template(journal))
    host.send(sid, "one")
    clock.now += 5
    assert host.hibernate_idle() == [sid]

    assert _contents(host.history(sid)) == ["one", "echo: one"]
    assert host.events(sid).events[-1].type == "hibernated"
    snapshot = host.checkpoint(sid, label="while asleep")

    assert snapshot.label == "while asleep"
    assert snapshot.messages() == host.history(sid)
    assert len(journal.of(sid)) == 1
    assert [s.status for s in host.list_sessions()] == ["hibernated"]
    assert registry_lookup_fails(host, sid)


def test_a_busy_session_is_not_hibernated(
    host: AgentHost, clock: FakeClock, tmp_path: Path
) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    gate = os.open(fifo, os.O_RDWR)  # the model blocks on this pipe until the test writes
    try:
        sid = host.start_session(template(model=FifoModel(str(fifo))))
        events = watch_events(host, sid)
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(host.send, sid, "hold")
            events.wait_for("turn_started")
            clock.now += 60

            assert host.hibernate_idle() == []
            assert host.hibernate(sid) is False

            os.write(gate, b"x")
            assert busy.result(timeout=WAIT).content == "echo: hold"
    finally:
        os.close(gate)
    assert [s.status for s in host.list_sessions()] == ["active"]
    # The turn that just ended counts as activity.
    assert host.hibernate_idle() == []
    clock.now += 1
    assert host.hibernate_idle() == [sid]


def test_per_session_limit_overrides_the_hosts(clock: FakeClock, mode: str) -> None:
    with AgentHost(
        store=MemoryCheckpointStore(), auto_hibernate=False, clock=clock, **host_options(mode)
    ) as host:
        quick = host.start_session(template(), "quick", hibernate_after_ms=200)
        never = host.start_session(template(), "never")
        clock.now += 3600

        assert host.hibernate_idle() == [quick]
        assert {s.session_id: s.status for s in host.list_sessions()} == {
            "quick": "hibernated",
            "never": "active",
        }
        assert host.send(never, "x").content == "echo: x"


def test_hibernated_sessions_hold_no_threads(clock: FakeClock, mode: str) -> None:
    before = set(threading.enumerate())
    with AgentHost(
        store=MemoryCheckpointStore(),
        hibernate_after_ms=1,
        auto_hibernate=False,
        clock=clock,
        **host_options(mode),
    ) as host:
        with_host = set(threading.enumerate())
        ids = [host.start_session(template(), f"s{i}", tenant_id=f"t{i % 3}") for i in range(60)]
        clock.now += 1
        assert sorted(host.hibernate_idle()) == sorted(ids)

        # The sessions' threads ended, but for the few a host keeps parked for its next starts.
        assert_threads_back(with_host, parked=DEFAULT_PARKED_THREADS)
        assert host.registry.count() == 0
        assert len(host.list_sessions("t1")) == 20
        assert {s.status for s in host.list_sessions()} == {"hibernated"}
        assert host.send("s7", "still there?").content == "echo: still there?"
    assert_threads_back(before)


def test_stop_and_shutdown_with_hibernated_sessions(host: AgentHost, clock: FakeClock) -> None:
    first = host.start_session(template(), "first")
    second = host.start_session(template(), "second")
    host.send(first, "a")
    host.send(second, "b")
    clock.now += 5
    assert sorted(host.hibernate_idle()) == [first, second]

    host.stop_session(first)

    assert [s.session_id for s in host.list_sessions()] == [second]
    with pytest.raises(SessionNotFound):
        host.send(first, "x")
    assert _contents(host.store.load(first).messages()) == ["a", "echo: a"]
    host.shutdown()
    assert _contents(host.store.load(second).messages()) == ["b", "echo: b"]


def test_steering_queued_while_hibernated_reaches_the_reactivated_session(
    host: AgentHost, clock: FakeClock
) -> None:
    sid = host.start_session(template())
    clock.now += 5
    assert host.hibernate_idle() == [sid]

    host.steer(sid, "be quick")
    answer = host.send(sid, "question")

    assert answer.content == "echo: question"
    assert _contents(host.history(sid)) == ["be quick", "question", "echo: question"]
