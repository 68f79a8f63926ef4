"""``SessionGate`` (the per-session FIFO lock), ``CallTimer`` and ``HelperThreads``: the
parts the non-blocking calls are built from, each on its own."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import FrameType

import pytest

from supervisor._gate import SessionGate, Ticket
from supervisor._helpers import HelperThreads
from supervisor._timer import CallTimer
from tests.supervisor.host_helpers import WAIT, poll_until


def test_a_free_gate_is_taken_at_once_and_release_frees_it() -> None:
    gate = SessionGate()
    assert gate.acquire(blocking=False)
    assert gate.locked()
    assert not gate.acquire(blocking=False)
    assert not gate.acquire(timeout=0.01)
    assert gate.queued == 0  # the timed-out waiter left the queue
    gate.release()
    assert not gate.locked()
    with pytest.raises(RuntimeError, match="not held"):
        gate.release()


def test_waiters_of_both_kinds_are_served_in_the_order_they_came() -> None:
    gate = SessionGate()
    order: list[str] = []
    gate.acquire()

    def blocking(name: str) -> threading.Thread:
        def run() -> None:
            assert gate.acquire(timeout=WAIT)
            order.append(name)
            gate.release()

        thread = threading.Thread(target=run)
        queued = gate.queued
        thread.start()
        assert poll_until(lambda: gate.queued == queued + 1)
        return thread

    def callback(name: str) -> Ticket:
        def run() -> None:
            order.append(name)
            gate.release()

        ticket = Ticket(run)
        gate.when_free(ticket)
        assert not ticket.granted
        return ticket

    t1 = blocking("thread 1")
    callback("callback 1")
    t2 = blocking("thread 2")
    callback("callback 2")
    gate.release()
    t1.join(WAIT)
    t2.join(WAIT)
    assert poll_until(lambda: len(order) == 4)
    assert order == ["thread 1", "callback 1", "thread 2", "callback 2"]
    assert not gate.locked()


def test_a_withdrawn_callback_never_runs_and_one_granted_cannot_be_withdrawn() -> None:
    gate = SessionGate()
    ran: list[str] = []
    gate.acquire()

    def second_run() -> None:
        ran.append("second")
        gate.release()

    first = Ticket(lambda: ran.append("first"))
    second = Ticket(second_run)
    gate.when_free(first)
    gate.when_free(second)
    assert gate.withdraw(first)
    assert not gate.withdraw(first)  # twice (a cancel racing the deadline): no ValueError
    gate.release()
    assert ran == ["second"]
    assert second.granted
    assert not gate.withdraw(second)
    free = Ticket(lambda: ran.append("at once"))
    gate.when_free(free)  # the gate is free: it runs on this thread, now
    assert free.granted
    assert ran == ["second", "at once"]


def test_callbacks_that_complete_at_once_do_not_deepen_the_stack() -> None:
    gate = SessionGate()
    gate.acquire()
    done: list[int] = []
    depth: list[int] = []

    def make(n: int) -> Callable[[], None]:
        def run() -> None:
            depth.append(len(_stack()))
            done.append(n)
            gate.release()  # completes synchronously, granting the next one

        return run

    for n in range(5000):
        gate.when_free(Ticket(make(n)))
    gate.release()
    assert done == list(range(5000))
    assert max(depth) == min(depth)


def _stack() -> list[object]:
    frames: list[object] = []
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def test_the_timer_runs_due_actions_in_order_skips_cancelled_ones_and_ends() -> None:
    timer = CallTimer("test-timer", linger=0.05)
    ran: list[str] = []
    all_ran = threading.Event()

    def later() -> None:
        ran.append("later")
        all_ran.set()

    timer.call_later(0.05, later)
    timer.call_later(0.0, lambda: ran.append("first"))
    cancelled = timer.call_later(0.01, lambda: ran.append("cancelled"))
    cancelled.cancel()
    assert all_ran.wait(WAIT)
    assert ran == ["first", "later"]
    assert poll_until(lambda: not timer.running)  # no deadline left: its thread ended
    keep = timer.call_later(60, lambda: ran.append("never"))
    assert timer.running
    keep.cancel()  # the last one: the thread ends after ``linger``, not in 60 s
    assert poll_until(lambda: not timer.running, 1.0)
    timer.close()
    with pytest.raises(RuntimeError, match="shut down"):
        timer.call_later(0, lambda: None)


def test_an_action_that_raises_is_logged_and_the_timer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    timer = CallTimer("test-timer")
    after = threading.Event()

    def fail() -> None:
        raise ValueError("broken handler")

    with caplog.at_level(logging.ERROR, logger="supervisor.host"):
        timer.call_later(0, fail)
        timer.call_later(0.01, after.set)
        assert after.wait(WAIT)
    timer.close()
    assert "deadline handler failed" in caplog.text


def test_many_cancelled_deadlines_are_dropped_without_waiting_for_them() -> None:
    timer = CallTimer("test-timer", linger=0.05)
    fired = threading.Event()
    deadlines = [timer.call_later(600, lambda: None) for _ in range(3000)]
    timer.call_later(0.01, fired.set)
    for deadline in deadlines:
        deadline.cancel()
    assert fired.wait(WAIT)
    assert poll_until(lambda: not timer.running)
    timer.close()


def test_helper_threads_are_bounded_and_end_when_idle() -> None:
    helpers = HelperThreads(2, "test-helper")
    release = threading.Event()
    started = threading.Semaphore(0)
    peak: list[int] = []

    def work() -> None:
        started.release()
        peak.append(helpers.running)
        release.wait(WAIT)

    for _ in range(6):
        helpers.run(work)
    assert started.acquire(timeout=WAIT)
    assert started.acquire(timeout=WAIT)
    assert helpers.running == 2
    release.set()
    assert helpers.join(WAIT)
    assert helpers.running == 0
    assert len(peak) == 6
    assert max(peak) <= 2
    with pytest.raises(ValueError, match="size must be >= 1"):
        HelperThreads(0, "none")
