"""Hunt 7: a nested supervisor left to ``Supervisor.child_spec``'s default shutdown is
waited for as long as the children it has when its stop begins need, those added by
``start_child`` included, instead of the static children's sum: its parent no longer
abandons it part-way through stopping them.
"""

from __future__ import annotations

import threading
from typing import Any

import pykka

from supervisor import ChildSpec, Supervisor, SupervisorHandle
from tests.supervisor.helpers import Starts, Worker

STOP_TAKES = 3.0  # each dynamic child's on_stop: two of them outlast the static default (5 s)
SHUTDOWN = 4.0  # each dynamic child's own shutdown, which covers its stop


class SlowToStop(Worker):
    """A worker whose ``on_stop`` takes ``STOP_TAKES`` seconds (a connection closing slowly)."""

    def on_stop(self) -> None:
        threading.Event().wait(STOP_TAKES)
        super().on_stop()


def _slow(name: str, starts: Starts, stops: list[str]) -> ChildSpec:
    def start() -> pykka.ActorRef[Any]:
        return SlowToStop.start(name, starts=starts, stops=stops)

    return ChildSpec(name, start, shutdown=SHUTDOWN)


def test_a_nested_supervisor_waits_for_its_dynamic_children_to_stop() -> None:
    starts, stops = Starts(), list[str]()
    top = SupervisorHandle.start([Supervisor.child_spec("sub")], timeout=5.0)
    try:
        assert top.which_children()[0].shutdown == 5.0  # no children yet: the least
        sub_ref = top.which_children()[0].actor_ref
        assert sub_ref is not None
        sub = SupervisorHandle(sub_ref)
        sub.start_child(_slow("a", starts, stops))
        sub.start_child(_slow("b", starts, stops))

        assert top.which_children()[0].shutdown == 2 * SHUTDOWN + 1.0
        assert top.terminate_child("sub") is True  # not abandoned part-way
        assert stops == ["b", "a"]
        assert not sub_ref.is_alive()
    finally:
        top.stop()
