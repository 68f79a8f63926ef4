"""A session stopped while no incarnation served it (hibernated, being restarted) kept
its last checkpoint, whose event mark did not cover what its stream published after
that save (``hibernated``, ``crashed``, ``resumed``). Resumed, its stream numbered its
next events from that mark again: seqs a follower had already seen came back for other
events, and a follower holding such a cursor skipped the new ones. Found by a stress
run of sends, hibernations, kills and stop/resume checking that no seq repeats."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from actors import AgentTemplate, Plugin, PluginContext, Snapshot
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor.checkpoint_store import CheckpointInfo
from tests.supervisor.host_helpers import (
    WAIT,
    EventWaiter,
    HostFactory,
    poll_until,
    template,
    thread_only,
)


def _seqs_after_resume(host: AgentHost, tmpl: AgentTemplate, cursor: int) -> list[str]:
    """Resume ``s``, send one turn and return the types of the events after ``cursor``."""
    host.resume("s", tmpl)
    host.send("s", "after", timeout=WAIT)
    batch = host.events("s", since=cursor)
    return [event.type for event in batch.events]


def test_stop_of_a_hibernated_session_keeps_its_events_numbered_onwards(
    make_host: HostFactory,
) -> None:
    host = make_host()
    tmpl = template()
    host.start_session(tmpl, "s")
    host.send("s", "before", timeout=WAIT)
    assert host.hibernate("s")
    seen = host.events("s").cursor  # the follower saw ``hibernated``
    assert host.events("s").events[-1].type == "hibernated"
    host.stop_session("s")

    types = _seqs_after_resume(host, tmpl, seen)

    assert "turn_started" in types, types  # none of the new turn's events is skipped
    assert types[-1] == "turn_finished", types
    first_new = host.events("s", since=0).events[0].seq
    assert first_new > seen  # no seq of the earlier life is handed out again


class HeldRestart(Plugin):
    """Holds a resumed ``session_start`` (a crash restart) until ``release`` is set."""

    name = "held_restart"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if ctx.resumed:
            self.entered.set()
            assert self.release.wait(WAIT), "the test never released the restart"


def _stopped(host: AgentHost, session_id: str) -> bool:
    """Whether the host marked the session stopped (or forgot it already)."""
    record = host._table.get(session_id)
    return record is None or record.status == "stopped"


@thread_only("the plugin's session_start is held by an event of this process")
def test_stop_of_a_session_being_restarted_keeps_its_events_numbered_onwards(
    make_host: HostFactory,
) -> None:
    held = HeldRestart()
    tmpl = template(plugins=[held])
    host = make_host()
    host.start_session(tmpl, "s")
    host.send("s", "before", timeout=WAIT)
    assert host.kill("s")
    assert held.entered.wait(WAIT)  # restarting: ``crashed`` is out, no incarnation serves
    seen = host.events("s").cursor
    assert host.events("s").events[-1].type == "crashed"
    stopper = threading.Thread(target=host.stop_session, args=("s",))
    stopper.start()
    try:
        # The stop marks the session stopped once its final checkpoint step is over; only
        # then may the restart end (the stop then waits for it to end that incarnation).
        assert poll_until(lambda: _stopped(host, "s"))
    finally:
        held.release.set()
        stopper.join(WAIT)
    assert not stopper.is_alive()

    types = _seqs_after_resume(host, tmpl, seen)

    assert "turn_started" in types, types
    assert types[-1] == "turn_finished", types
    assert host.events("s", since=0).events[0].seq > seen


class KillAfterSave(MemoryCheckpointStore):
    """Runs ``after_save`` once, after the next save, when armed."""

    def __init__(self) -> None:
        super().__init__()
        self.after_save: Callable[[], None] | None = None

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        info = super().save(snapshot)
        hook, self.after_save = self.after_save, None
        if hook is not None:
            hook()
        return info


@pytest.mark.parametrize("held_until", ["crashed", "resumed"])
def test_a_kill_racing_a_stop_keeps_its_events_numbered_onwards(
    make_host: HostFactory, held_until: str
) -> None:
    """The kill lands in the stop's final save. Its restart may come back (``resumed``)
    before the stop marks the session stopped, or not; the test holds the save until
    one of the two, so each order is run."""
    store = KillAfterSave()
    host = make_host(store=store)
    tmpl = template()
    host.start_session(tmpl, "s")
    host.send("s", "before", timeout=WAIT)
    waiter = EventWaiter()
    host.subscribe("s", waiter)

    def kill_after_final_checkpoint() -> None:
        assert host.kill("s")
        waiter.wait_for(held_until)  # published after the final checkpoint's mark was taken

    store.after_save = kill_after_final_checkpoint
    host.stop_session("s")
    seen = waiter.events[-1].seq
    late = [event.type for event in waiter.events]
    assert "crashed" in late, late
    assert late[-1] in ("crashed", "resumed"), late
    if held_until == "resumed":
        assert late[-2:] == ["crashed", "resumed"], late

    types = _seqs_after_resume(host, tmpl, seen)

    assert "turn_started" in types, types
    assert types[-1] == "turn_finished", types
    assert host.events("s", since=0).events[0].seq > seen


class HookedLoads(MemoryCheckpointStore):
    """Runs ``during_load`` once, inside the next load, when armed."""

    def __init__(self) -> None:
        super().__init__()
        self.during_load: Callable[[], None] | None = None

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        hook, self.during_load = self.during_load, None
        if hook is not None:
            hook()
        return super().load(session_id, checkpoint_id)


def test_a_checkpoint_outliving_its_session_does_not_take_the_event_mark_back(
    make_host: HostFactory,
) -> None:
    """``checkpoint()`` of a hibernated session saves its latest checkpoint again, marked
    with the session's stream. Stopped and resumed while that call went on, the session
    had a newer stream: the copy, the newest checkpoint, carried the old stream's lower
    mark, and the next life numbered its events from there again."""
    store = HookedLoads()
    host = make_host(store=store)
    tmpl = template()
    host.start_session(tmpl, "s")
    host.send("s", "first", timeout=WAIT)
    assert host.hibernate("s")
    newer: list[int] = []

    def stop_resume_and_go_on() -> None:
        host.stop_session("s")
        host.resume("s", tmpl)
        host.send("s", "second", timeout=WAIT)  # the newer life's stream goes further
        assert host.hibernate("s")
        newer.append(host.events("s").cursor)

    store.during_load = stop_resume_and_go_on
    host.checkpoint("s")  # reads the latest checkpoint first: the hook runs there
    assert newer, "the hook did not run"
    host.stop_session("s")

    types = _seqs_after_resume(host, tmpl, newer[0])

    assert "turn_started" in types, types
    assert types[-1] == "turn_finished", types
    assert host.events("s", since=0).events[0].seq > newer[0]
