"""A node that still runs a session it lost, when the session comes back to it.

Node ``a`` keeps its copy of a session (its running incarnation, or its hibernated
record with the steering waiting there) after the database gave the session to
``b`` (``expire``: ``a``'s heartbeat looked dead, as after a stall or a jump of the
database's clock). When ``b`` goes away and ``a`` claims the session again, the
claim (a sweep, or the reactivation or restart of that copy) bumps the epoch, and
the copy must not go on under the new epoch: it lacks ``b``'s turns, and holds
steering ``b`` has used already. It is stopped, and the session taken over anew
from its latest checkpoint, as any other node would.
"""

from __future__ import annotations

import threading

import pytest

from supervisor import AgentHost, OwnershipLost
from tests.supervisor.cluster_helpers import Cluster, expire
from tests.supervisor.host_helpers import WAIT, EventWaiter, pairs, template


def _send(host: AgentHost, session_id: str, text: str) -> str:
    """Send as a client does: a turn refused with ``OwnershipLost`` (not acknowledged)
    is sent again, once."""
    try:
        answer = host.send(session_id, text)
    except OwnershipLost:
        answer = host.send(session_id, text)
    return answer.content or ""


def _users(host: AgentHost, session_id: str) -> list[str]:
    return [m.content or "" for m in host.history(session_id) if m.role == "user"]


def test_a_sweep_does_not_revive_a_stale_copy_over_another_nodes_turns(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    expire(a.store, "a")  # a looks dead: b takes the session over on request
    assert b.send("s", "two").content == "echo: two"  # acknowledged on b
    b.shutdown()  # drained: a's sweeper takes the session (back)
    assert a.node is not None
    a.node.sweep()  # (unless a's sweeper thread did already)
    assert _send(a, "s", "three") == "echo: three"
    assert [text for text, _ in pairs(a.history("s"))] == ["one", "two", "three"]
    assert [text for text, _ in pairs(a.store.load("s").messages())] == ["one", "two", "three"]


def test_a_hibernated_copy_does_not_steer_twice_when_the_session_comes_back(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    a.steer("s", "steer me")
    assert a.hibernate("s")  # its checkpoint and its record both hold the steering
    expire(a.store, "a")
    assert b.send("s", "two").content == "echo: two"  # b uses the steering
    b.shutdown()  # drained: the session is free, and a's next request takes it
    assert _send(a, "s", "three") == "echo: three"
    assert _users(a, "s") == ["one", "steer me", "two", "three"]
    assert a.store.load("s").steering() == []


def test_a_restarted_stale_copy_numbers_its_events_after_the_other_owners(
    cluster: Cluster,
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    expire(a.store, "a")
    b.send("s", "two")
    seen_on_b = b.events("s").cursor
    b.shutdown()
    moved = EventWaiter()
    a.subscribe("s", moved)
    a.kill("s")  # a's stale copy restarts: its claim finds the session moved meanwhile
    moved.wait_for("moved")  # the copy is stopped here, not restarted on the new epoch
    assert _send(a, "s", "three") == "echo: three"  # taken over anew, from b's checkpoint
    started = [e.seq for e in a.events("s", since=0).events if e.type == "turn_started"]
    assert started
    assert min(started) > seen_on_b, (seen_on_b, started)
    assert _users(a, "s") == ["one", "two", "three"]


def test_a_restart_racing_the_stop_of_a_lost_session_leaves_no_claim_behind(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    expire(a.store, "a")
    b.send("s", "two")
    b.shutdown()  # the session is free: a restart's claim of it succeeds
    assert a.node is not None
    node = a.node
    claimed = threading.Event()
    real_claim, real_release = node.claim, node.release

    def claim(session_id: str) -> int:
        try:
            return real_claim(session_id)
        finally:
            claimed.set()

    def release(session_id: str, *, stopped: bool) -> None:
        real_release(session_id, stopped=stopped)
        if not claimed.is_set():  # the first release, as a stops its lost copy: it crashes
            a.kill(session_id)  # now, and its restart claims the session again meanwhile
            assert claimed.wait(WAIT)

    monkeypatch.setattr(node, "claim", claim)
    monkeypatch.setattr(node, "release", release)
    moved = EventWaiter()
    a.subscribe("s", moved)
    with pytest.raises(OwnershipLost):
        a.send("s", "stale")  # its save is refused: a stops its copy
    moved.wait_for("moved")
    assert node.leases() == {}
    owner = node.owner("s")
    assert owner is not None
    assert owner.node_id is None  # released: any node takes it over
    c = cluster.node("c")
    assert c.send("s", "three").content == "echo: three"
    assert _users(c, "s") == ["one", "two", "three"]


class _HeldWake(threading.Event):
    """A node's housekeeping wake-up that lets the housekeeping thread through only once
    ``go`` is set, and tells ``rounds`` each time it comes back to wait (a round done)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.rounds = threading.Semaphore(0)

    def wait(self, timeout: float | None = None) -> bool:
        self.rounds.release()
        assert self.go.wait(WAIT)
        return super().wait(timeout)


def test_a_copy_lost_before_the_housekeeping_ran_is_not_stopped_again_once_taken_over(
    cluster: Cluster,
) -> None:
    """The stale copy's restarts all fail at their claim and it is given up (so lost, and
    ``moved`` announced) before the housekeeping thread gets to the stop its first stale
    claim asked for; the session is then taken over anew here. That pending stop must
    not stop the new incarnation (it did, about 1 run in 40 under load)."""
    a, b = cluster.node("a"), cluster.node("b")
    assert a.node is not None
    node = a.node
    # No sweeps: ``a`` looks dead in the database from ``expire`` on (until its next
    # heartbeat), so a sweep of its own would claim its session as a dead node's orphan.
    node.stop_adopting()
    held, old = _HeldWake(), node._wake
    node._wake = held
    old.set()  # the housekeeping thread's next round waits on the held wake-up
    assert held.rounds.acquire(timeout=WAIT)
    a.start_session(template(), "s")
    a.send("s", "one")
    expire(a.store, "a")
    b.send("s", "two")
    b.shutdown()
    moved = EventWaiter()
    a.subscribe("s", moved)

    a.kill("s")  # every restart's claim is stale: given up, lost, ``moved``
    moved.wait_for("moved")
    assert _send(a, "s", "three") == "echo: three"  # taken over anew, here
    leases = node.leases()
    assert list(leases) == ["s"]
    taken_over = EventWaiter()
    a.subscribe("s", taken_over)
    held.go.set()  # the housekeeping thread now sees the stop the first stale claim asked for
    assert held.rounds.acquire(timeout=WAIT)  # and has come round again

    assert node.leases() == leases  # still held: the new incarnation was left alone
    assert a.list_sessions()[0].status == "active"
    assert "moved" not in taken_over.types()
    assert a.send("s", "four").content == "echo: four"
    assert _users(a, "s") == ["one", "two", "three", "four"]
