"""Checkpoint ids made in one process sort as they were made, whichever path makes them.

A stress run lost an acknowledged turn: a turn's snapshot saved behind a copy of the
latest checkpoint was given an id after the copy (``SaveOrder.place``, through
``new_checkpoint_id``), and the session's next turn, in the same millisecond, took an id
from the generator snapshots used, a second one whose random start in that millisecond
was lower. The older state then sorted newest, and the session came back from it.
"""

from __future__ import annotations

import dataclasses

from actors import Message, Snapshot
from actors._ids import new_checkpoint_id
from supervisor import MemoryCheckpointStore
from supervisor._checkpoints import Checkpoints, SaveOrder
from tests.supervisor.host_helpers import HostFactory, template, watch_events

TRIES = 300  # tight loops: many fall within one millisecond, where the bug showed


def test_a_snapshot_made_after_a_placed_id_sorts_after_it() -> None:
    for _ in range(TRIES):
        placed = new_checkpoint_id()
        snapshot = Snapshot.new(session_id="s", state={})
        assert snapshot.checkpoint_id > placed


def test_a_turn_after_one_saved_behind_a_copy_is_the_newest() -> None:
    for attempt in range(TRIES):
        sid = f"s{attempt}"
        store = MemoryCheckpointStore(keep_last=None)
        checkpoints = Checkpoints(store, redact=None)
        order = SaveOrder()
        checkpoints.save(Snapshot.new(session_id=sid, state={"turns": 0}), order=order)
        turn_1 = Snapshot.new(session_id=sid, state={"turns": 1})  # taken, then waits
        # ``checkpoint()`` of the session saves a copy of its latest checkpoint meanwhile
        checkpoints.relabel(store.load(sid), "copy", order=order)
        checkpoints.save(turn_1, order=order)  # placed after the copy
        turn_2 = Snapshot.new(session_id=sid, state={"turns": 2})  # the next turn
        checkpoints.save(turn_2, order=order)
        assert store.load(sid).state["turns"] == 2, f"attempt {attempt}: an older turn is newest"


def _id(ms: int, seq: int) -> str:
    return f"{ms:012x}{seq:020x}"


def test_a_worker_turn_after_one_placed_behind_a_copy_is_placed_after_it() -> None:
    """A worker process makes its snapshots' ids with a generator of its own: in the
    millisecond of the id the host placed a turn at, the worker's next id may sort lower
    than that placed id, though higher than the id the placed turn was taken with."""
    order = SaveOrder()
    order.saved(_id(1000, 10), copy=False)  # turn 0, as the worker took it
    order.saved(_id(1000, 30), copy=True)  # checkpoint() of the session: a copy
    turn_1 = Snapshot.new(session_id="s", state={"turns": 1})
    turn_1 = dataclasses.replace(turn_1, checkpoint_id=_id(1000, 20))  # taken before the copy
    placed = order.place(turn_1)
    assert placed.checkpoint_id > _id(1000, 30)
    order.saved(placed.checkpoint_id, copy=False, taken=turn_1.checkpoint_id)
    # the worker's next turn: its generator's id in the placed id's millisecond, lower
    turn_2 = dataclasses.replace(turn_1, checkpoint_id=_id(int(placed.checkpoint_id[:12], 16), 0))
    assert turn_1.checkpoint_id < turn_2.checkpoint_id < placed.checkpoint_id  # the case
    assert order.place(turn_2).checkpoint_id > placed.checkpoint_id  # newest, as it is


def test_turns_after_a_checkpoint_stamped_ahead_stay_newest(make_host: HostFactory) -> None:
    """A session's latest checkpoint was stamped by a process whose ids run ahead (another
    node's clock a minute fast, or a generator an earlier ``after=`` moved on): the turns of
    the session resumed from it, stamped by this process or a worker, sorted before it,
    so every later resume, restart or reactivation came back from that older state."""
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "one")
    host.stop_session(sid)
    newest = host.store.load(sid)
    ahead_ms = int(newest.checkpoint_id[:12], 16) + 60_000
    host.store.save(dataclasses.replace(newest, checkpoint_id=_id(ahead_ms, 0)))

    host.resume(sid, template())
    host.send(sid, "two")
    assert _contents(host.store.load(sid).messages()) == ["one", "echo: one", "two", "echo: two"]
    waiter = watch_events(host, sid)
    host.kill(sid, reason="test")
    waiter.wait_for("resumed")
    host.send(sid, "three")
    assert _contents(host.history(sid))[-4:] == ["two", "echo: two", "three", "echo: three"]
    assert _contents(host.store.load(sid).messages())[-2:] == ["three", "echo: three"]


def _contents(messages: list[Message]) -> list[str | None]:
    return [m.content for m in messages]
