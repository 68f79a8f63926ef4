"""``stop_session`` (or a shutdown) of a session no incarnation serves kept only what its
last checkpoint held. Two things a user relies on were lost that way:

- a session killed before its first turn was saved (restarting when stopped) had no
  checkpoint at all: ``resume`` then raised ``CheckpointNotFound`` for a session the host
  had created and stopped on request;
- steering accepted while the session was hibernated or being restarted was not in any
  checkpoint: the stop dropped it (a serving session's stop saves it, as a shutdown does).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from actors import PluginContext
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import (
    WAIT,
    HostFactory,
    host_options,
    poll_until,
    template,
    thread_only,
)
from tests.supervisor.test_hunt10_host_event_seq_after_stop import HeldRestart


def _user_texts(host: AgentHost, sid: str) -> list[str]:
    return [m.content or "" for m in host.history(sid) if m.role == "user"]


def _stopped(host: AgentHost, session_id: str) -> bool:
    record = host._table.get(session_id)
    return record is None or record.status == "stopped"


def test_a_session_killed_before_its_first_turn_and_stopped_can_be_resumed(
    make_host: HostFactory,
) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(template(), "early", tenant_id="blue")
    assert host.kill(sid)
    host.stop_session(sid)  # at once: the restart may not have come back yet

    assert [info.session_id for info in store.list(sid)], "the stop saved no checkpoint"
    host.resume(sid, template(), tenant_id="blue")
    assert host.send(sid, "hi", timeout=WAIT, tenant_id="blue").content == "echo: hi"
    assert host.session_info(sid, tenant_id="blue").status == "active"  # its tenant was saved
    assert [m.content for m in host.history(sid, tenant_id="blue") if m.role == "user"] == ["hi"]


def test_steering_accepted_while_hibernated_survives_a_stop(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(template(), "sleeper")
    host.send(sid, "first", timeout=WAIT)
    assert host.hibernate(sid)
    host.steer(sid, "wake up kindly")
    host.stop_session(sid)

    saved = store.load(sid)
    assert saved.steering() == ["wake up kindly"]
    host.resume(sid, template())
    host.send(sid, "second", timeout=WAIT)
    assert _user_texts(host, sid) == ["first", "wake up kindly", "second"]


def test_steering_accepted_while_hibernated_survives_a_shutdown(mode: str, tmp_path: Path) -> None:
    host = AgentHost(data_dir=tmp_path, **host_options(mode))
    try:
        sid = host.start_session(template(), "sleeper")
        host.send(sid, "first", timeout=WAIT)
        assert host.hibernate(sid)
        host.steer(sid, "still here")
    finally:
        host.shutdown()

    again = AgentHost(data_dir=tmp_path, **host_options(mode))
    try:
        again.resume(sid, template())
        again.send(sid, "second", timeout=WAIT)
        assert _user_texts(again, sid) == ["first", "still here", "second"]
    finally:
        again.shutdown()


@thread_only("the plugin's session_start is held by an event of this process")
def test_steering_accepted_while_restarting_survives_a_stop(make_host: HostFactory) -> None:
    held = HeldRestart()
    tmpl = template(plugins=[held])
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(tmpl, "restarting")
    host.send(sid, "first", timeout=WAIT)
    assert host.kill(sid)
    assert held.entered.wait(WAIT)
    host.steer(sid, "after the crash")
    stopper = threading.Thread(target=host.stop_session, args=(sid,))
    stopper.start()
    try:
        assert poll_until(lambda: _stopped(host, sid))
    finally:
        held.release.set()
        stopper.join(WAIT)
    assert not stopper.is_alive()

    assert store.load(sid).steering() == ["after the crash"]
    host.resume(sid, tmpl)
    host.send(sid, "second", timeout=WAIT)
    assert _user_texts(host, sid) == ["first", "after the crash", "second"]


class HeldSecondStart(HeldRestart):
    """Holds every ``session_start`` after the first (a restart, fresh when nothing was saved)."""

    name = "held_second_start"

    def __init__(self) -> None:
        super().__init__()
        self.starts = 0

    def session_start(self, ctx: PluginContext) -> None:
        self.starts += 1
        if self.starts == 2:
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the restart"


@thread_only("the plugin's session_start is held by an event of this process")
def test_a_stop_waits_for_the_restart_of_a_session_never_checkpointed(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.host")
    held = HeldSecondStart()
    tmpl = template(plugins=[held])
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(tmpl, "fresh")
    host.steer(sid, "first words")
    assert host.kill(sid)
    assert held.entered.wait(WAIT)  # being restarted, and nothing saved yet
    assert store.list(sid) == []
    stopper = threading.Thread(target=host.stop_session, args=(sid,))
    stopper.start()
    try:
        assert poll_until(lambda: any("waiting for it" in r.getMessage() for r in caplog.records))
    finally:
        held.release.set()
        stopper.join(WAIT)
    assert not stopper.is_alive()

    assert store.load(sid).steering() == ["first words"]
    host.resume(sid, tmpl)
    host.send(sid, "hello", timeout=WAIT)
    assert _user_texts(host, sid) == ["first words", "hello"]


def test_a_checkpoint_of_a_hibernated_session_saves_the_steering_waiting(
    make_host: HostFactory,
) -> None:
    """``checkpoint()`` of a session no incarnation serves saves its latest state again: with
    the steering waiting now, as a serving session's checkpoint has it."""
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(template(), "sleeper")
    host.send(sid, "first", timeout=WAIT)
    assert host.hibernate(sid)
    host.steer(sid, "noted")

    saved = host.checkpoint(sid, label="manual")
    assert saved.steering() == ["noted"]
    assert store.load(sid).steering() == ["noted"]
    host.send(sid, "second", timeout=WAIT)  # reactivated: the queue's steering, once
    assert _user_texts(host, sid) == ["first", "noted", "second"]
