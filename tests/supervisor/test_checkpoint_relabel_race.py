"""``checkpoint()`` of a session that is not serving (hibernated, restarting) saves its
latest checkpoint again as the newest. A turn of the session saved while that copy was
being made came out older than the copy: the copy (the state before the turn) became the
newest, and the next resume, reactivation or crash restart lost the acknowledged turn."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import Snapshot
from supervisor import MemoryCheckpointStore
from supervisor._checkpoints import SaveOrder
from tests.supervisor.host_helpers import WAIT, HostFactory, template

RACE_WINDOW = 1.0
"""Seconds the copy waits for the racing turn: the turn ends within it without the fix,
and waits for the copy with it (so the wait runs out)."""


class PausingStore(MemoryCheckpointStore):
    """Runs ``during_load`` once, after the ``pause_at``-th load on the thread that set
    ``pause_thread``."""

    def __init__(self, pause_at: int) -> None:
        super().__init__()
        self.pause_at = pause_at
        self.pause_thread: int | None = None
        self.during_load: Any = None

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        loaded = super().load(session_id, checkpoint_id)
        if threading.get_ident() == self.pause_thread:
            self.pause_at -= 1
            if self.pause_at == 0:
                self.pause_thread = None
                self.during_load()
        return loaded


@pytest.mark.parametrize("pause_at", [1, 2], ids=["first-read", "read-before-the-copy"])
def test_a_turn_saved_during_checkpoint_of_an_idle_session_stays_the_newest(
    make_host: HostFactory, pause_at: int
) -> None:
    store = PausingStore(pause_at)
    host = make_host(store=store)
    sid = host.start_session(template(), "raced")
    host.send(sid, "one")
    assert host.hibernate(sid)

    answers: list[str | None] = []
    sender = threading.Thread(target=lambda: answers.append(host.send(sid, "two").content))

    def race_a_turn() -> None:  # the copy has read the latest; a turn saves meanwhile
        sender.start()
        sender.join(RACE_WINDOW)

    copies: list[Snapshot] = []

    def take_checkpoint() -> None:
        store.pause_thread = threading.get_ident()
        store.during_load = race_a_turn
        copies.append(host.checkpoint(sid, "mine"))

    taker = threading.Thread(target=take_checkpoint)
    taker.start()
    taker.join(WAIT)
    sender.join(WAIT)
    assert answers == ["echo: two"]
    assert [copy.label for copy in copies] == ["mine"]

    newest = store.load(sid)
    assert [m.content for m in newest.messages() if m.role == "user"] == ["one", "two"]
    host.kill(sid)
    assert [m.content for m in host.history(sid) if m.role == "user"] == ["one", "two"]


def test_a_turn_of_the_resumed_session_stays_newer_than_a_copy_for_its_stopped_record(
    make_host: HostFactory,
) -> None:
    """The copy is made for the record the call found; the session is stopped and resumed
    (a new record) meanwhile, and the new record's turn ends while the copy is made."""
    store = PausingStore(pause_at=2)
    host = make_host(store=store)
    sid = host.start_session(template(), "renewed")
    host.send(sid, "one")
    assert host.hibernate(sid)

    answers: list[str | None] = []
    sender = threading.Thread(target=lambda: answers.append(host.send(sid, "two").content))

    def renew_and_race_a_turn() -> None:
        host.stop_session(sid)
        host.resume(sid, template())
        sender.start()
        sender.join(RACE_WINDOW)

    def take_checkpoint() -> None:
        store.pause_thread = threading.get_ident()
        store.during_load = renew_and_race_a_turn
        host.checkpoint(sid, "mine")

    taker = threading.Thread(target=take_checkpoint)
    taker.start()
    taker.join(WAIT)
    sender.join(WAIT)
    assert answers == ["echo: two"]

    newest = store.load(sid)
    assert [m.content for m in newest.messages() if m.role == "user"] == ["one", "two"]


def _taken(session_id: str = "s") -> Snapshot:
    return Snapshot.new(session_id=session_id, state={"turns": 1})


def test_save_order_moves_only_a_newer_state_after_a_copy() -> None:
    order = SaveOrder()
    older, newer = _taken(), _taken()
    assert order.place(newer) is newer  # nothing saved yet

    copy = _taken()  # a copy made after both were taken, of a state older than either
    order.saved(older.checkpoint_id, copy=False)
    order.saved(copy.checkpoint_id, copy=True)

    placed = order.place(newer)  # newer than every real state saved: after the copy
    assert placed.checkpoint_id > copy.checkpoint_id
    assert placed.state == newer.state
    order.saved(placed.checkpoint_id, copy=False)

    stale = order.place(older)  # older than a real state saved: it is not the newest
    assert stale.checkpoint_id == older.checkpoint_id
