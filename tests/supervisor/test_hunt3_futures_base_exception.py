"""What a non-blocking call's work raises reaches its future whatever its type, as the
blocking call raises it to its caller: a ``BaseException`` that is not an ``Exception``
(here ``GeneratorExit`` from a store's ``save``) used to escape the helper thread or the
session's thread instead. The future then never resolved, a ``stop_session`` left its
session's queue held for good (every later call timed out), and a ``checkpoint``
crashed the session whose thread ran the save."""

from __future__ import annotations

from typing import Any

from actors import Snapshot
from supervisor import CheckpointInfo, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, HostFactory, template


class _FailingSaves(MemoryCheckpointStore):
    """Every ``save`` raises ``GeneratorExit`` while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> CheckpointInfo:
        if self.failing:
            raise GeneratorExit("the store gave up")
        return super().save(snapshot, *args, **kwargs)


def test_a_base_exception_from_the_store_reaches_the_future(make_host: HostFactory) -> None:
    store = _FailingSaves()
    host = make_host(store=store)
    sid = host.start_session(template())
    assert host.futures.send(sid, "before").result(WAIT).content == "echo: before"
    cursor = host.events(sid).cursor
    store.failing = True
    for call in (host.futures.checkpoint, host.futures.hibernate, host.futures.stop_session):
        error = call(sid).exception(WAIT)
        assert isinstance(error, GeneratorExit), (call.__name__, error)
    store.failing = False
    assert host.futures.send(sid, "after", timeout=WAIT).result(WAIT).content == "echo: after"
    assert "crashed" not in [e.type for e in host.events(sid, since=cursor).events]
