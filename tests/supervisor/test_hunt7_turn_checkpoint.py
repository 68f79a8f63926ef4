"""Under an ``AgentHost``, a turn whose checkpoint cannot be saved is a failed turn only,
found by a bug hunt: its ``turn_finished`` was published before the save, so ``HostMetrics``
counted it as finished and as failed. And a turn that saved well still has its
``turn_finished`` covered by the checkpoint's event mark: a new host resuming the session
numbers its events after it, never reusing its seq."""

from __future__ import annotations

import errno

import pytest
from prometheus_client import CollectorRegistry

from actors import Snapshot
from supervisor import AgentHost, CheckpointInfo, MemoryCheckpointStore
from supervisor.metrics import HostMetrics
from tests.supervisor.host_helpers import (
    HostFactory,
    host_options,
    template,
    watch_events,
)


class DiskFull(MemoryCheckpointStore):
    """A memory store whose ``save`` fails with ``ENOSPC`` while ``full`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().save(snapshot)


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_turn_whose_save_fails_counts_as_failed_only(make_host: HostFactory) -> None:
    store = DiskFull()
    registry = CollectorRegistry()
    host = make_host(store=store)
    HostMetrics(host, registry)
    sid = host.start_session(template(), session_id="full", tenant_id="acme")
    waiter = watch_events(host, sid)
    store.full = True

    with pytest.raises(OSError, match="No space left"):
        host.send(sid, "lost")
    store.full = False

    assert waiter.wait_for("error").data["turn"] == 1
    assert "turn_finished" not in waiter.types()
    assert _value(registry, "sessionvisor_turns_total", tenant="acme") == 0
    assert _value(registry, "sessionvisor_turn_duration_seconds_count", tenant="acme") == 0
    assert _value(registry, "sessionvisor_turn_errors_total", tenant="acme") == 1
    assert host.send(sid, "kept").content == "echo: kept"
    assert _value(registry, "sessionvisor_turns_total", tenant="acme") == 1


def test_a_new_host_numbers_events_after_the_last_turn_finished(mode: str) -> None:
    store = MemoryCheckpointStore()
    with AgentHost(store, **host_options(mode)) as old:
        sid = old.start_session(template(), session_id="s")
        old.send(sid, "one")
        (finished,) = [e for e in old.events(sid).events if e.type == "turn_finished"]
        # A second host on the store while the first still runs: as if the first had died
        # right after the turn, with no save of its own at shutdown.
        with AgentHost(store, **host_options(mode)) as new:
            new.resume(sid, template())
            new.send(sid, "two")

            events = new.events(sid).events
            assert events[0].seq == finished.seq + 1
            assert [e.data.get("text") for e in events if e.type == "turn_started"] == ["two"]
            assert new.events(sid, since=finished.seq).missed == 0
