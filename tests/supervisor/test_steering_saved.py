"""Steering accepted but not yet taken by a model call is saved in the session's checkpoints:
a ``stop_session`` then ``resume``, or a host shutdown then a new host's ``resume``, delivers
it to the next turn (before, it was dropped). A crash restart or a reactivation keeps the
host's own queue and restores nothing from the checkpoint, so nothing arrives twice."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from actors import AgentSession, EchoModel, Snapshot, SnapshotDecodeError
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, HostFactory, host_options, template, watch_events


def _user_texts(host: AgentHost, sid: str) -> list[str]:
    return [m.content or "" for m in host.history(sid) if m.role == "user"]


def test_steering_waiting_at_stop_session_reaches_the_resumed_session(
    make_host: HostFactory,
) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(template(), "steered")
    host.send(sid, "first")
    host.steer(sid, "be brief")
    host.steer(sid, "and polite")

    host.stop_session(sid)
    saved = store.load(sid)
    assert saved is not None
    assert saved.steering() == ["be brief", "and polite"]

    host.resume(sid, template())
    host.send(sid, "second")
    assert _user_texts(host, sid) == ["first", "be brief", "and polite", "second"]
    latest = store.load(sid)
    assert latest is not None
    assert latest.steering() == []  # taken by the turn: the next checkpoint has none
    assert "steering" not in latest.state


def test_steering_waiting_at_shutdown_reaches_the_next_hosts_resume(
    mode: str, tmp_path: Path
) -> None:
    host = AgentHost(data_dir=tmp_path, **host_options(mode))
    try:
        sid = host.start_session(template(), "kept")
        host.send(sid, "first")
        host.steer(sid, "remember me")
    finally:
        host.shutdown()

    again = AgentHost(data_dir=tmp_path, **host_options(mode))
    try:
        again.resume(sid, template())
        answer = again.send(sid, "second")
        assert answer.content == "echo: second"
        assert _user_texts(again, sid) == ["first", "remember me", "second"]
    finally:
        again.shutdown()


def test_a_crash_restart_does_not_deliver_saved_steering_twice(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    sid = host.start_session(template(), "once")
    host.send(sid, "first")
    host.steer(sid, "only once")
    host.checkpoint(sid)  # the waiting steering is in this checkpoint ...
    saved = store.load(sid)
    assert saved is not None
    assert saved.steering() == ["only once"]

    waiter = watch_events(host, sid)
    host.kill(sid)  # ... and still in the host's queue, which the restart keeps
    waiter.wait_for("resumed")
    host.send(sid, "second")
    assert _user_texts(host, sid) == ["first", "only once", "second"]


def test_stop_without_checkpoint_drops_the_steering() -> None:
    """``checkpoint=False`` saves nothing, so the steering waiting then is gone, as documented."""
    store = MemoryCheckpointStore()
    host = AgentHost(store=store)
    try:
        sid = host.start_session(template(), "unsaved")
        host.send(sid, "first")
        host.steer(sid, "forgotten")
        host.stop_session(sid, checkpoint=False)
        host.resume(sid, template())
        host.send(sid, "second")
        assert _user_texts(host, sid) == ["first", "second"]
    finally:
        host.shutdown()


def test_a_bare_session_restores_saved_steering_into_its_own_queue() -> None:
    first = AgentSession.start(template(), session_id="bare").proxy()
    try:
        first.steer("mind the budget").get(timeout=WAIT)
        snapshot = first.snapshot().get(timeout=WAIT)
    finally:
        first.stop()
    assert snapshot.steering() == ["mind the budget"]
    loaded = Snapshot.deserialize(snapshot.serialize())

    again = AgentSession.start(template(), restored_state=loaded.state)
    try:
        again.proxy().send("hello").get(timeout=WAIT)
        history = again.proxy().history().get(timeout=WAIT)
        assert [m.content for m in history if m.role == "user"] == ["mind the budget", "hello"]
        assert again.proxy().snapshot().get(timeout=WAIT).steering() == []
    finally:
        again.stop()


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        ("be brief", r"state\.steering must be a list of strings, got str"),
        (["ok", 3], r"state\.steering\[1\] must be a string, got int"),
    ],
)
def test_malformed_saved_steering_is_a_decode_error(saved: object, expected: str) -> None:
    good = AgentSession(template(), model=EchoModel()).snapshot()
    bad = dataclasses.replace(good, state={**good.state, "steering": saved})
    with pytest.raises(SnapshotDecodeError, match=expected):
        bad.steering()
    with pytest.raises(SnapshotDecodeError, match="not a valid session state"):
        AgentSession(template(), restored_state=bad.state)

    store = MemoryCheckpointStore()
    store.save(bad)
    host = AgentHost(store=store)
    try:
        with pytest.raises(SnapshotDecodeError, match=expected):
            host.resume(bad.session_id, template())
        assert host.list_sessions() == []  # nothing was left registered
    finally:
        host.shutdown()
