"""What a caller sees right after a crash is the same whatever runs the sessions.

Each test runs in thread mode, process mode and portable process mode:

- history and checkpoint right after ``kill`` answer from the resumed session
  or the last checkpoint (or, before the first, an empty history and the next
  incarnation's checkpoint), never with an error;
- a ``send`` right after ``kill`` runs on the next incarnation, never on the
  dying one;
- leaving the host's ``with`` block while a session is being restarted logs no
  error, and its last checkpoint stands;
- an acknowledged turn survives a crash that races its checkpoint save (a slow
  store, with a ``kill`` or a neighbour's segfault): the restart never loads an
  older checkpoint;
- event numbering goes on after ``stop_session`` + ``resume`` and in a new host,
  so a polling client's cursor stays valid.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from actors import AgentTemplate, Event, Snapshot
from supervisor import AgentHost, CheckpointInfo, MemoryCheckpointStore
from tests.supervisor.host_helpers import MODES, WAIT, HostFactory, host_options, pairs, template
from tests.supervisor.workers.worker_tools import segfault, sleepy_segfault


class SlowSaveStore(MemoryCheckpointStore):
    """A store whose saves take ``delay`` seconds before they land (a remote store under
    load); ``saving`` is set when a save of ``watched`` begins. Saves outside its lock, as
    such a store would, so a concurrent ``load`` is not held up by it."""

    def __init__(self, delay: float, watched: str) -> None:
        super().__init__()
        self.delay = delay
        self.watched = watched
        self.saving = threading.Event()
        self.slow = False

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.slow and snapshot.session_id == self.watched:
            self.saving.set()
            threading.Event().wait(self.delay)  # the store's own latency
        return super().save(snapshot)


def test_history_and_checkpoint_right_after_a_kill_answer(make_host: HostFactory) -> None:
    host = make_host()
    sids = [host.start_session(template(), session_id=f"s{n}") for n in range(25)]
    for sid in sids:
        host.send(sid, f"hello {sid}")
    for sid in sids:
        host.kill(sid)
        assert pairs(host.history(sid)) == [(f"hello {sid}", f"echo: hello {sid}")]
        host.kill(sid)
        snapshot = host.checkpoint(sid, label="after kill")
        assert [m.content for m in snapshot.messages()][-1] == f"echo: hello {sid}"
        assert snapshot.label == "after kill"
    for sid in sids:  # each came back, with its turn
        assert host.send(sid, "again").content == "echo: again"
        assert [user for user, _ in pairs(host.history(sid))] == [f"hello {sid}", "again"]


def test_history_and_checkpoint_after_a_kill_before_any_checkpoint_answer(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sids = [host.start_session(template(), session_id=f"s{n}") for n in range(10)]
    for n, sid in enumerate(sids):  # never sent to: no checkpoint yet
        host.kill(sid)
        history = host.futures.history(sid).result(WAIT) if n % 2 else host.history(sid)
        assert history == []  # what its next incarnation comes back with
        host.kill(sid)
        label = f"first {n}"
        if n % 2:  # the non-blocking form alike
            snapshot = host.futures.checkpoint(sid, label=label).result(WAIT)
        else:
            snapshot = host.checkpoint(sid, label=label)  # the next incarnation's
        assert snapshot.messages() == []
        assert snapshot.label == label
        assert [i.label for i in host.store.list(sid)] == [label]
    for sid in sids:
        assert host.send(sid, "hi").content == "echo: hi"


def test_a_send_right_after_a_kill_runs_on_the_next_incarnation(make_host: HostFactory) -> None:
    host = make_host()
    sids = [host.start_session(template(), session_id=f"s{n}") for n in range(10)]
    for sid in sids:
        host.kill(sid)
        assert host.send(sid, "after the kill").content == "echo: after the kill"
    for sid in sids:
        types = [e.type for e in host.events(sid).events]
        turn = types.index("turn_started")
        assert types.index("crashed") < types.index("resumed") < turn, types
        assert types.count("turn_started") == 1


def test_leaving_the_host_while_a_session_restarts_logs_no_error(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryCheckpointStore()
    caplog.set_level(logging.DEBUG)
    for n in range(10):
        with AgentHost(store, **host_options(mode)) as host:
            sid = host.start_session(template(), session_id=f"s{n}")
            host.send(sid, "keep me")
            host.kill(sid)
        failures = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert failures == [], [r.getMessage() for r in failures]
        with AgentHost(store, **host_options(mode)) as again:
            again.resume(sid, template())
            assert pairs(again.history(sid)) == [("keep me", "echo: keep me")]


def test_an_acknowledged_turn_survives_a_kill_during_its_checkpoint_save(
    make_host: HostFactory,
) -> None:
    store = SlowSaveStore(delay=0.3, watched="a")
    host = make_host(store=store, max_restarts=10)
    host.start_session(template(), session_id="a")
    store.slow = True
    with ThreadPoolExecutor(1) as pool:
        turn = pool.submit(host.send, "a", "A's important turn")
        assert store.saving.wait(WAIT)
        host.kill("a")
        assert turn.result(WAIT).content == "echo: A's important turn"
    store.slow = False
    assert host.send("a", "next").content == "echo: next"
    assert [user for user, _ in pairs(host.history("a"))] == ["A's important turn", "next"]
    assert [user for user, _ in pairs(store.load("a").messages())] == [
        "A's important turn",
        "next",
    ]


@pytest.mark.parametrize("mode", [m for m in MODES if m != "thread"])
def test_an_acknowledged_turn_survives_a_neighbours_segfault_during_its_save(
    make_host: HostFactory,
) -> None:
    store = SlowSaveStore(delay=1.0, watched="a")  # the segfault (0.5 s) lands in this save
    host = make_host(store=store, workers=1, max_restarts=10)
    crashing = AgentTemplate(tools=(segfault, sleepy_segfault))
    host.start_session(template(), session_id="a")
    host.start_session(crashing, session_id="b")
    started = threading.Event()

    def on_event(event: Event) -> None:
        if event.type == "tool_call":
            started.set()

    host.subscribe("b", on_event)
    store.slow = True
    with ThreadPoolExecutor(1) as pool:
        neighbour = pool.submit(host.send, "b", '/sleepy_segfault {"seconds": 0.5}')
        assert started.wait(WAIT)
        assert host.send("a", "A's important turn").content == "echo: A's important turn"
        with pytest.raises(Exception, match="SIGSEGV"):
            neighbour.result(WAIT)
    store.slow = False
    assert host.wait_for_workers(WAIT)
    assert host.send("a", "next").content == "echo: next"
    assert [user for user, _ in pairs(host.history("a"))] == ["A's important turn", "next"]


def test_event_cursors_go_on_after_stop_and_resume(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), session_id="s")
    host.send(sid, "one")
    cursor = host.events(sid).cursor
    host.stop_session(sid)
    host.resume(sid, template())
    host.send(sid, "two")

    batch = host.events(sid, since=cursor)

    assert batch.missed == 0
    assert [e.seq for e in batch.events] == list(range(cursor + 1, batch.cursor + 1))
    assert [e.data.get("text") for e in batch.events if e.type == "turn_started"] == ["two"]


def test_event_cursors_go_on_in_a_new_host(mode: str) -> None:
    store = MemoryCheckpointStore()
    with AgentHost(store, **host_options(mode)) as old:
        sid = old.start_session(template(), session_id="s")
        old.send(sid, "one")
        early = old.events(sid).events[0].seq
        seen = old.events(sid).cursor
    with AgentHost(store, **host_options(mode)) as new:
        new.resume(sid, template())
        new.send(sid, "two")

        batch = new.events(sid, since=seen)  # a client polling across the restart
        assert [e.data.get("text") for e in batch.events if e.type == "turn_started"] == ["two"]
        assert batch.events[0].seq == seen + 1
        assert batch.missed == 0
        behind = new.events(sid, since=early)  # those events went with the old process
        assert behind.missed == seen - early
        assert behind.events == batch.events


def test_a_polling_client_past_the_last_checkpoint_catches_up(mode: str) -> None:
    """Events published after the last checkpoint die with their host; a client whose cursor
    is past them is taken back to the checkpoint's mark, and sees every new event once."""
    store = MemoryCheckpointStore()
    with AgentHost(store, checkpoint_every=None, **host_options(mode)) as old:
        sid = old.start_session(template(), session_id="s")
        old.checkpoint(sid)
        mark = old.events(sid).cursor
        old.send(sid, "not saved")  # its events are past the checkpoint's mark
        stale = old.events(sid).cursor
        assert stale > mark
        with AgentHost(store, **host_options(mode)) as new:  # as if the old host had died
            new.resume(sid, template())
            first = new.events(sid, since=stale)
            assert (first.events, first.cursor) == ((), mark)
            new.send(sid, "after")
            batch = new.events(sid, since=first.cursor)
            assert [e.data.get("text") for e in batch.events if e.type == "turn_started"] == [
                "after"
            ]
            assert batch.events[0].seq == mark + 1
            assert batch.missed == 0
