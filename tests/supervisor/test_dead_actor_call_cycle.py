"""A blocking call to a session whose actor has ended leaves no reference cycle.

Pykka's ``ActorRef.ask`` to a dead actor fails the reply it made with ``ActorDeadError``
at once; that error's traceback holds ``ask``'s frame, whose locals hold the reply, which
holds the error: a cycle that only the cyclic collector frees, with every frame of the
caller's traceback (a host's ``send`` that found its session's actor gone, say). The
thread runtime's ``call`` and a supervisor handle's calls look at the actor first and raise
Pykka's error themselves, with no reply made.
"""

from __future__ import annotations

from typing import Any

import pykka
import pytest

from actors import GetHistory
from supervisor._runtime import NotDelivered
from supervisor._thread_runtime import ThreadRuntime
from tests.supervisor.host_helpers import CyclicGarbage


class _Idle(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


def _ended() -> pykka.ActorRef[Any]:
    ref = _Idle.start()
    ref.stop()
    return ref


def test_a_call_to_an_ended_actor_fails_as_not_delivered_without_a_cycle() -> None:
    runtime, ref = ThreadRuntime(), _ended()
    with pytest.raises(NotDelivered, match="ended before it took the call"):
        runtime.call("s", ref, GetHistory(), 1.0)  # a first call may fill caches
    with CyclicGarbage((pykka.Future, BaseException)) as garbage:
        with pytest.raises(NotDelivered) as raised:
            runtime.call("s", ref, GetHistory(), 1.0)
        assert isinstance(raised.value.__cause__, pykka.ActorDeadError)
        del raised
    assert garbage.names == []  # was: ["ActorDeadError", "ThreadingFuture"]
