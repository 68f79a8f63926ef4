"""A turn whose checkpoint cannot be saved is rolled back, so a retry is clean (issue 13, item 2).

Every test runs in each host mode (``mode`` fixture). In process mode the save
fails in the parent after the worker finished the turn: the worker must undo
it before the session's next call.
"""

from __future__ import annotations

import errno

import pytest

from actors import Message, Snapshot
from supervisor import CheckpointInfo, MemoryCheckpointStore
from tests.supervisor.host_helpers import HostFactory, template, watch_events


class DiskFull(MemoryCheckpointStore):
    """A memory store whose ``save`` fails with ``ENOSPC`` while ``full`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().save(snapshot)


def _users(history: list[Message]) -> list[str]:
    return [m.content or "" for m in history if m.role == "user"]


def test_a_failed_save_rolls_the_turn_back_and_a_retry_is_clean(make_host: HostFactory) -> None:
    store = DiskFull()
    host = make_host(store=store)
    sid = host.start_session(template(), session_id="disk-full")
    waiter = watch_events(host, sid)
    host.send(sid, "first")
    store.full = True

    with pytest.raises(OSError, match="No space left") as raised:
        host.send(sid, "second")

    assert raised.value.errno == errno.ENOSPC
    assert "No space left" in str(waiter.wait_for("error").data["error"])
    assert _users(host.history(sid)) == ["first"]
    store.full = False
    answer = host.send(sid, "second")

    assert answer.content == "echo: second"
    history = host.history(sid)
    assert _users(history) == ["first", "second"]
    assert store.load(sid).messages() == history
    assert store.load(sid).state["turns"] == 2
    host.kill(sid)
    waiter.wait_for("resumed")
    assert host.history(sid) == history


@pytest.mark.parametrize("kill_before_retry", [False, True], ids=["retry", "kill-then-retry"])
def test_steering_taken_by_a_turn_that_could_not_be_saved_reaches_the_retry(
    make_host: HostFactory, kill_before_retry: bool
) -> None:
    store = DiskFull()
    host = make_host(store=store)
    sid = host.start_session(template(), session_id="disk-full-steer")
    waiter = watch_events(host, sid)
    host.send(sid, "first")
    store.full = True
    host.steer(sid, "note")

    with pytest.raises(OSError, match="No space left"):
        host.send(sid, "second")
    store.full = False
    if kill_before_retry:  # the steering text survives the session's crash too
        host.kill(sid)
        waiter.wait_for("resumed")
    host.send(sid, "second")

    assert _users(host.history(sid)) == ["first", "note", "second"]
    assert _users(store.load(sid).messages()) == ["first", "note", "second"]
