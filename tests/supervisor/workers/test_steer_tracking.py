"""The proxy's steering forwarder (``_Steer``) watches a session's events only while it keeps
a text the worker has not used in a finished turn, and keeps exactly those texts; a text
steered while the session starts goes to the worker only once the ``start`` frame has.

Driven directly with a real ``EventBuffer`` and ``SteeringQueue`` and a stand-in for the
worker's client that accepts every ``steer``; the events are the ones a worker relays.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import AgentTemplate, EventBuffer, SteeringQueue
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor.workers import _proxy
from supervisor.workers._proxy import _Steer
from tests.supervisor.host_helpers import MODES, host_options

WAIT = 10.0


class _AcceptingClient:
    """Takes the place of ``WorkerClient``: every ``steer`` call is accepted."""

    def __init__(self) -> None:
        self.steered: list[str] = []
        self.called = threading.Event()

    def call(
        self, op: str, payload: Any = None, timeout: float | None = None, *, kill_late: bool = True
    ) -> None:
        assert op == "steer"
        self.steered.append(payload["text"])
        self.called.set()


def _forwarder() -> tuple[_Steer, EventBuffer, SteeringQueue, _AcceptingClient]:
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    steer.start(events)
    steer.start_written()
    return steer, events, queue, client


def _turn(events: EventBuffer, *steered: str) -> None:
    events.publish("turn_started", turn=1, text="hi")
    for text in steered:
        events.publish("steered", text=text)
    events.publish("turn_finished", turn=1, content="done")


def test_a_session_nobody_steers_has_no_steering_subscriber() -> None:
    _, events, _, _ = _forwarder()
    _turn(events)
    assert not events._subscribers


def test_a_steered_text_is_watched_until_a_later_turn_starts() -> None:
    steer, events, queue, client = _forwarder()
    queue.put("left")
    assert client.steered == ["left"]
    assert len(events._subscribers) == 1  # subscribed before the text went to the worker
    _turn(events, "left")
    assert len(events._subscribers) == 1  # its turn finished but is not saved yet
    events.publish("turn_started", turn=2, text="next")
    assert not events._subscribers
    steer.release()
    assert queue.drain() == []  # nothing kept: the turn that used it finished


def test_release_gives_back_what_the_worker_had_not_used() -> None:
    steer, events, queue, _ = _forwarder()
    queue.put("taken")
    queue.put("waiting")
    events.publish("turn_started", turn=1, text="hi")
    events.publish("steered", text="taken")
    steer.release()
    assert not events._subscribers
    assert queue.drain() == ["taken", "waiting"]


def test_an_error_after_the_turn_puts_its_texts_back_in_the_workers_queue() -> None:
    """A failed checkpoint save rolls the finished turn back: its texts are unused again."""
    steer, events, queue, _ = _forwarder()
    queue.put("used")
    _turn(events, "used")
    events.publish("error", turn=2, error="the store failed")
    assert len(events._subscribers) == 1
    steer.release()
    assert queue.drain() == ["used"]


def test_texts_waiting_at_the_start_are_watched_from_the_start() -> None:
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    queue.put("early")
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    assert steer.start(events) == ["early"]
    assert len(events._subscribers) == 1
    steer.release()
    assert queue.drain() == ["early"]


def test_a_text_steered_during_the_start_waits_for_the_start_frame() -> None:
    """The worker refuses steering for a session whose ``start`` it has not read yet."""
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    steer.start(events)
    putter = threading.Thread(target=queue.put, args=("during the start",))
    putter.start()
    try:
        assert not client.called.wait(0.2)  # held back: no ``start`` frame yet
        steer.start_written()
        assert client.called.wait(WAIT)
    finally:
        putter.join(WAIT)
    assert client.steered == ["during the start"]
    steer.release()
    assert queue.drain() == ["during the start"]  # kept until a turn used it


def test_a_text_steered_during_a_start_that_fails_goes_back_to_the_queue() -> None:
    events, queue, client = EventBuffer(), SteeringQueue(8), _AcceptingClient()
    steer = _Steer(client, "s", queue)  # type: ignore[arg-type]  # a stand-in client
    steer.start(events)
    putter = threading.Thread(target=queue.put, args=("during the start",))
    putter.start()
    try:
        assert not client.called.wait(0.2)
        steer.release()  # the start failed
    finally:
        putter.join(WAIT)
    assert not putter.is_alive()
    assert client.steered == []
    assert queue.drain() == ["during the start"]


@pytest.mark.parametrize("mode", MODES[1:])
def test_steering_while_a_session_starts_reaches_its_first_turn(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text steered between the forwarder's start and the ``start`` frame (another
    thread's ``steer``) is not refused by the worker, which would strand it."""
    start = _Steer.start
    putters: list[threading.Thread] = []

    def steered_meanwhile(self: _Steer, events: EventBuffer) -> list[str]:
        queued = start(self, events)
        putter = threading.Thread(target=self.queue.put, args=("during the start",))
        putter.start()
        putters.append(putter)
        return queued

    monkeypatch.setattr(_proxy._Steer, "start", steered_meanwhile)
    with AgentHost(MemoryCheckpointStore(), **host_options(mode)) as host:
        sid = host.start_session(AgentTemplate())
        [putter] = putters
        putter.join(WAIT)  # the worker has answered its steer
        assert not putter.is_alive()
        host.send(sid, "hi")
        users = [m.content for m in host.history(sid) if m.role == "user"]
    assert users == ["during the start", "hi"]
