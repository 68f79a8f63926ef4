"""Hunt 8: a crash restart that finishes after its session was stopped (``stop_session``)
or moved to another node must not bring it back: no ``resumed`` event, no restart counted,
the late incarnation stopped, nothing of it left registered or running.

Each restart is held in a plugin's ``session_start`` on a FIFO the test writes to (so the
gate works in a worker process too) until the stop waits behind it at the supervisor.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from actors import Plugin, PluginContext
from supervisor import AgentHost, HostShutDown, SessionNotFound
from supervisor.metrics import HostMetrics
from tests.supervisor.host_helpers import (
    WAIT,
    EventWaiter,
    Fifo,
    HostFactory,
    Journal,
    pairs,
    poll_until,
    registry_lookup_fails,
    session_thread_gone,
    template,
    watch_events,
)


class HeldRestart(Plugin):
    """Every resumed start (a crash restart) reads one byte from the FIFO at ``path``
    first: it is held until the test writes one. Picklable: it works in a worker too."""

    name = "held_restart"

    def __init__(self, path: str) -> None:
        self.path = path

    def session_start(self, ctx: PluginContext) -> None:
        if ctx.resumed:
            with open(self.path, "rb") as pipe:
                pipe.read(1)


class HeldFailingRestart(HeldRestart):
    """As ``HeldRestart``, then every restart fails: its backend is gone."""

    name = "held_failing_restart"

    def session_start(self, ctx: PluginContext) -> None:
        super().session_start(ctx)
        if ctx.resumed:
            raise RuntimeError("its backend is gone")


def _crashed_and_held(host: AgentHost, journal: Journal, fifo: Fifo) -> tuple[str, EventWaiter]:
    """A session that served a turn, then crashed; its restart is held in session_start."""
    sid = host.start_session(template(journal, plugins=[HeldRestart(str(fifo.path))]))
    host.send(sid, "hello")
    events = watch_events(host, sid)
    host.kill(sid, reason="test")
    events.wait_for("crashed")
    # The restart's journal line is written before the held plugin runs.
    assert poll_until(lambda: len(journal.of(sid)) == 2)
    return sid, events


def _terminate_queued(host: AgentHost, sid: str) -> bool:
    """Whether a call (the stop's terminate_child) waits at the session's supervisor,
    behind the held restart (private: nothing public tells that)."""
    inbox: Any = host._sessions.supervisors.of(sid).actor_ref.actor_inbox  # a Queue
    return poll_until(lambda: inbox.qsize() > 0)


def _assert_gone(host: AgentHost, journal: Journal, sid: str, events: EventWaiter) -> None:
    assert "resumed" not in events.types()
    with pytest.raises(SessionNotFound):
        host.session_info(sid)
    assert host.list_sessions() == []
    assert registry_lookup_fails(host, sid)
    assert session_thread_gone(journal, sid)  # the late incarnation was stopped
    assert all(sid not in worker.sessions for worker in host.workers())


def test_a_stop_during_a_restart_wins(make_host: HostFactory, fifo: Fifo, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    host = make_host(call_timeout=WAIT)
    HostMetrics(host, registry)
    journal = Journal(tmp_path)
    sid, events = _crashed_and_held(host, journal, fifo)

    stopping: Future[None] = host.futures.stop_session(sid)
    assert _terminate_queued(host, sid)
    fifo.release()
    stopping.result(WAIT)

    _assert_gone(host, journal, sid, events)
    assert registry.get_sample_value("sessionvisor_session_restarts_total") == 0
    # Nothing of it is left behind: it resumes here again from its final checkpoint.
    host.resume(sid, template(journal))
    assert host.send(sid, "again").content == "echo: again"
    assert pairs(host.history(sid)) == [("hello", "echo: hello"), ("again", "echo: again")]


def test_a_session_moved_during_its_restart_is_not_resumed(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid, events = _crashed_and_held(host, journal, fifo)

    # What a cluster node does when another node took the session over (private: a
    # single host has no other node to lose it to).
    moving: Future[None] = Future()

    def lose() -> None:
        host._sessions.lose_id(sid)
        moving.set_result(None)

    threading.Thread(target=lose).start()
    assert _terminate_queued(host, sid)
    fifo.release()
    moving.result(WAIT)

    events.wait_for("moved")
    _assert_gone(host, journal, sid, events)


def test_a_shutdown_during_a_reactivation_wins(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal, plugins=[HeldRestart(str(fifo.path))]))
    host.send(sid, "hello")
    assert host.hibernate(sid)
    events = watch_events(host, sid)
    sending = host.futures.send(sid, "wake up")  # its reactivation is held
    assert poll_until(lambda: len(journal.of(sid)) == 2)

    stopping = threading.Thread(target=host.shutdown)
    stopping.start()
    assert _terminate_queued(host, sid)  # the supervisors' stop, behind the held start
    fifo.release()
    stopping.join(WAIT)

    with pytest.raises(HostShutDown):
        sending.result(WAIT)
    assert "reactivated" not in events.types()
    assert session_thread_gone(journal, sid)
    assert pairs(host.store.load(sid).messages()) == [("hello", "echo: hello")]


def test_a_resume_during_a_stop_waits_for_it(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid, _ = _crashed_and_held(host, journal, fifo)
    stopping: Future[None] = host.futures.stop_session(sid)
    assert _terminate_queued(host, sid)

    resuming = host.futures.resume(sid, template(journal))  # was SessionAlreadyExists
    # It waits for the stop (private: nothing public tells that a call waits).
    waiters: Any = host._table.changed._waiters  # type: ignore[attr-defined]
    assert poll_until(lambda: resuming.done() or len(waiters) > 0)
    fifo.release()
    stopping.result(WAIT)

    assert resuming.result(WAIT) == sid
    assert host.send(sid, "again").content == "echo: again"
    assert pairs(host.history(sid)) == [("hello", "echo: hello"), ("again", "echo: again")]
    assert [s.status for s in host.list_sessions()] == ["active"]


def test_a_stop_during_a_restart_that_fails_past_the_intensity_wins(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    host = make_host(call_timeout=WAIT, max_restarts=1, max_seconds=60.0)
    HostMetrics(host, registry)
    journal = Journal(tmp_path)
    sid = host.start_session(template(journal, plugins=[HeldFailingRestart(str(fifo.path))]))
    host.send(sid, "hello")
    events = watch_events(host, sid)
    host.kill(sid, reason="test")
    assert poll_until(lambda: len(journal.of(sid)) == 2)  # its restart is held
    stopping: Future[None] = host.futures.stop_session(sid)
    assert _terminate_queued(host, sid)
    fifo.release()  # the restart fails: past its intensity, it is given up
    stopping.result(WAIT)

    assert "given_up" not in events.types()  # was given up after the stop
    give_ups = [
        sample
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "sessionvisor_session_give_ups_total"
    ]
    assert give_ups == []
    _assert_gone(host, journal, sid, events)


def test_a_shutdown_during_a_restart_wins(
    make_host: HostFactory, fifo: Fifo, tmp_path: Path
) -> None:
    host = make_host(call_timeout=WAIT)
    journal = Journal(tmp_path)
    sid, events = _crashed_and_held(host, journal, fifo)

    stopping = threading.Thread(target=host.shutdown)
    stopping.start()
    assert _terminate_queued(host, sid)  # the supervisors' stop, behind the held restart
    fifo.release()
    stopping.join(WAIT)

    assert "resumed" not in events.types()
    assert session_thread_gone(journal, sid)
    assert pairs(host.store.load(sid).messages()) == [("hello", "echo: hello")]
