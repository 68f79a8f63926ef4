"""A subscriber's ``SystemExit`` fails its session's call, whichever frame brought the event.

A worker writes a turn's events with the turn's reply, or, before a step it counts as slow
(``_remote_session.SLOW_STEP``), in an ``events`` frame of their own, ahead of the reply.
A subscriber exiting on an event of the reply's frame failed the call; one exiting on an
event of an ``events`` frame ended the session (``WorkerClient.end_session``) while the
call's reply, read after, was still handed out as a success, with its turn saved. Which
way ``turn_started`` went depended on how long the previous model call took, so the test
of ``test_hunt15b_subscriber_exit`` failed under load only. Here the worker is told which
steps are slow (``worker_initializer``), so each order is taken every time.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from actors import Event
from supervisor import AgentHost, SessionCrashed
from supervisor.workers import _remote_session
from supervisor.workers._client import WorkerClient
from tests.supervisor.host_helpers import (
    MODES,
    WAIT,
    EventWaiter,
    Fifo,
    HostFactory,
    template,
    watch_events,
)
from tests.supervisor.workers.test_hunt15b_subscriber_exit import ExitsOnce
from tests.supervisor.workers.worker_tools import FifoModel

SLOW_STEPS = {
    "events-frame-first": -1.0,  # every step is slow: the events go before the model call
    "events-with-reply": float("inf"),  # none is, after the first: the events go with the reply
}


def _count_steps_slow_after(seconds: float) -> None:
    """The ``worker_initializer``: steps longer than ``seconds`` count as slow there."""
    _remote_session.SLOW_STEP = seconds


def _send_exit(host: AgentHost, sid: str, via: str) -> BaseException | None:
    """What sending ``"exit"`` to ``sid`` raised (``via`` a future, or a blocking call)."""
    if via == "futures":
        return host.futures.send(sid, "exit", timeout=4 * WAIT).exception(WAIT)
    try:
        host.send(sid, "exit", timeout=WAIT)
    except SessionCrashed as exc:
        return exc
    return None


def _host(make_host: HostFactory, slow_after: float) -> AgentHost:
    """A host whose one worker counts steps longer than ``slow_after`` seconds as slow."""
    return make_host(
        workers=1,
        worker_call_timeout=4 * WAIT,
        worker_initializer=_count_steps_slow_after,
        worker_initargs=(slow_after,),
    )


def _assert_restarted_without_the_turn(host: AgentHost, sid: str, waiter: EventWaiter) -> None:
    """``sid`` crashed on the host and was restarted from its checkpoint before ``"exit"``."""
    crashed = waiter.wait_for("crashed")
    assert "died on the host, delivering worker pid" in crashed.data["reason"]
    waiter.wait_for("resumed")
    assert host.send(sid, "again", timeout=WAIT).content == "echo: again"
    kept = [m.content for m in host.history(sid) if m.role == "user"]
    assert kept == ["kept", "again"]  # the turn whose subscriber exited was not saved


@pytest.mark.parametrize("mode", MODES[1:])
@pytest.mark.parametrize("frames", list(SLOW_STEPS))
@pytest.mark.parametrize("via", ["futures", "blocking"])
def test_a_call_whose_subscriber_ends_its_session_fails(
    make_host: HostFactory, mode: str, frames: str, via: str
) -> None:
    """The call fails with ``SessionCrashed`` and its turn is not kept, as in thread mode;
    the session is restarted from its last checkpoint."""
    host = _host(make_host, SLOW_STEPS[frames])
    sid = host.start_session(template())
    host.send(sid, "kept", timeout=WAIT)  # (its first step is slow either way)
    waiter = watch_events(host, sid)
    exits = ExitsOnce("turn_started")
    host.subscribe(sid, exits)

    error = _send_exit(host, sid, via)

    assert isinstance(error, SessionCrashed), repr(error)
    assert not exits.armed
    _assert_restarted_without_the_turn(host, sid, waiter)


def _answer_text(frame: dict[str, Any]) -> object:
    """The text of the answer a ``send`` reply carries (None for any other frame)."""
    payload = frame.get("payload")
    message = payload.get("message") if isinstance(payload, dict) else None
    return message.get("content") if isinstance(message, dict) else None


class ExitsOnceItsReplyIsRead:
    """A subscriber that, on the ``turn_started`` of ``"exit"``, waits until that turn's
    reply has been read off the pipe (by another thread: its lane's frames wait behind
    this one), then raises ``SystemExit``."""

    def __init__(self) -> None:
        self.read = threading.Event()  # the reply of "exit" was read
        self.read_first: bool | None = None  # it was, before this raised

    def __call__(self, event: Event) -> None:
        if event.type == "turn_started" and event.data.get("text") == "exit":
            self.read_first = self.read.wait(WAIT)
            raise SystemExit("a subscriber gave up")


@pytest.mark.parametrize("mode", MODES[1:])
@pytest.mark.parametrize("via", ["futures", "blocking"])
def test_a_call_fails_when_its_reply_was_read_before_its_events_were_delivered(
    make_host: HostFactory, fifo: Fifo, monkeypatch: pytest.MonkeyPatch, mode: str, via: str
) -> None:
    """The reply waits in the session's lane, behind the ``events`` frame whose subscriber
    exits: it is failed, not delivered. A call of another session of the worker, waiting
    for its model, keeps reading the pipe meanwhile."""
    host = _host(make_host, SLOW_STEPS["events-frame-first"])
    sid = host.start_session(template())
    other = host.start_session(template(model=FifoModel(str(fifo.path))))
    host.send(sid, "kept", timeout=WAIT)
    waiter = watch_events(host, sid)
    exits = ExitsOnceItsReplyIsRead()
    host.subscribe(sid, exits)
    item = WorkerClient._item

    def noted_item(client: WorkerClient, frame: dict[str, Any]) -> Any:
        found = item(client, frame)  # (the call is taken off the table of calls here)
        if _answer_text(frame) == "echo: exit":
            exits.read.set()
        return found

    monkeypatch.setattr(WorkerClient, "_item", noted_item)
    others = watch_events(host, other)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(host.send, other, "held", timeout=4 * WAIT)
        others.wait_for("turn_started")  # its model waits on the fifo; its caller, for it

        error = _send_exit(host, sid, via)

        fifo.release()
        assert held.result(WAIT).content == "echo: held"
    assert exits.read_first is True
    assert isinstance(error, SessionCrashed), repr(error)
    _assert_restarted_without_the_turn(host, sid, waiter)
