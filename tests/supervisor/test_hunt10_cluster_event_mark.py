"""Hunt 10: a session deleted and created again under its id keeps no event mark of its
first life.

A session's event mark (``event_marks.event_seq``, the highest event seq any owner
fanned out) is what a new owner numbers above. Deleting every checkpoint of the
session (the gateway's delete) left the mark of its first life behind, so the new
session of that id, taken over by another node, numbered its events above the
old life's mark: a client following it (``since=`` its last event) was told it had
missed events that never were.
"""

from __future__ import annotations

from actors import Event
from supervisor import AgentHost
from tests.supervisor.cluster_helpers import Cluster, expire
from tests.supervisor.host_helpers import WAIT, template


def _converse(host: AgentHost, turns: int) -> int:
    """``turns`` turns of session ``s``, fanned out and checkpointed; its last event's seq."""
    for turn in range(turns):
        host.send("s", f"turn {turn}")
    node = host.node
    assert node is not None
    assert node.events is not None
    assert node.events.flush(WAIT)
    host.checkpoint("s")
    events: tuple[Event, ...] = host.events("s").events
    return events[-1].seq


def test_a_session_created_anew_after_a_delete_numbers_on_from_its_own_events(
    cluster: Cluster,
) -> None:
    a = cluster.node("a")
    a.start_session(template(), "s")
    first_life = _converse(a, 6)
    a.stop_session("s")
    a.store.delete("s")  # what a delete does: stopped, then every checkpoint gone
    a.start_session(template(), "s")
    second_life = _converse(a, 1)
    assert second_life < first_life

    expire(a.store, "a")  # a is dead: b takes the new session over
    b = cluster.node("b")
    b.resume("s", template())
    b.send("s", "on b")
    after = b.events("s", since=second_life)  # a follower of the new life, up to date

    assert after.missed == 0
    assert after.events[0].seq == second_life + 1
    assert after.events[0].type == "turn_started"
