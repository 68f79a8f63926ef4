"""Starting, hibernating and resuming do nothing twice (issue 14), counted, not timed.

A new session's first start loads no checkpoint (``start_session`` has just
found none), a resume loads one, hibernation saves one, and stopping a child
whose shutdown timeout the caller knows takes one call to the supervisor.
"""

from __future__ import annotations

import builtins
from collections import Counter
from typing import Any

import pytest

from actors import Snapshot
from supervisor import (
    CheckpointInfo,
    ChildNotFound,
    ChildSpec,
    MemoryCheckpointStore,
    SupervisedActor,
    SupervisorHandle,
)
from tests.supervisor.host_helpers import WAIT, HostFactory, template


class CountingStore(MemoryCheckpointStore):
    """A memory store that counts the calls the host makes to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        self.calls["save"] += 1
        return super().save(snapshot)

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        self.calls["load"] += 1
        return super().load(session_id, checkpoint_id)

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        self.calls["list"] += 1
        return super().list(session_id)


def test_start_hibernate_reactivate_and_resume_touch_the_store_once_each(
    make_host: HostFactory,
) -> None:
    store = CountingStore()
    host = make_host(store=store, auto_hibernate=False)
    sid = host.start_session(template(), "s1")
    assert store.calls == {"list": 1}  # the existence check; no load for a new session
    assert host.hibernate(sid)
    assert store.calls == {"list": 1, "save": 1}
    host.send(sid, "wake up")  # reactivation loads the hibernation checkpoint, once
    assert store.calls["load"] == 1
    host.stop_session(sid)
    store.calls.clear()
    host.resume(sid, template())
    assert store.calls["load"] == 1
    assert [m.content for m in host.history(sid)][:1] == ["wake up"]


class _Echo(SupervisedActor):
    def on_receive(self, message: Any) -> Any:
        return message


def test_terminating_a_child_of_known_shutdown_asks_the_supervisor_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handle = SupervisorHandle.start()
    try:
        ref = handle.start_child(ChildSpec("echo", _Echo.start, shutdown=2.0))
        assert ref.ask("ping", timeout=WAIT) == "ping"

        def no_listing(self: SupervisorHandle) -> Any:
            raise AssertionError("terminate_child asked for the children first")

        monkeypatch.setattr(SupervisorHandle, "which_children", no_listing)
        assert handle.terminate_child("echo", shutdown=2.0) is True
        assert not ref.is_alive()
        with pytest.raises(ChildNotFound):
            handle.terminate_child("echo", shutdown=2.0)
    finally:
        monkeypatch.undo()
        handle.stop()
