"""Supervisor restarts of a group whose member cannot start, and backoff after failed starts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from supervisor import Backoff, ChildSpec, ChildStartError, SupervisorHandle, demonitor, monitor
from tests.supervisor.helpers import WAIT, FakeClock, Starts, Worker, crash, worker_spec


def _failing_when(gate: threading.Event, name: str, starts: Starts) -> ChildSpec:
    def start() -> pykka.ActorRef[Any]:
        if gate.is_set():
            raise RuntimeError(f"{name} cannot start")
        return Worker.start(name, starts=starts)

    return ChildSpec(name, start, max_restarts=1, max_seconds=60.0)


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_a_member_given_up_during_a_group_restart_does_not_strand_the_rest(
    strategy: Any,
) -> None:
    starts = Starts()
    broken = threading.Event()
    given_up: list[str] = []
    handle = SupervisorHandle.start(
        [worker_spec("a", starts), _failing_when(broken, "b", starts), worker_spec("c", starts)],
        strategy=strategy,
        max_restarts=100,
        on_give_up=lambda child_id, _reason: given_up.append(child_id),
    )
    broken.set()
    crash(starts.latest("a" if strategy == "one_for_all" else "b"))
    # b fails to restart twice (past its own max_restarts=1) and is given up; c, stopped
    # for the group restart, must still be started again.
    starts.wait("c", 2)
    children = handle.which_children()
    assert [c.id for c in children] == ["a", "c"]
    assert all(c.actor_ref is not None and c.actor_ref.is_alive() for c in children)
    assert given_up == ["b"]
    assert handle.count_children().active == 2
    assert handle.stop() == []


class _Timers:
    """Stands in for ``threading.Timer``: records each delay; the test fires them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.made: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def __call__(self, interval: float, function: Callable[..., None], args: Any = ()) -> Any:
        timers = self

        class _Timer:
            name = ""
            daemon = True

            def start(self) -> None:
                with timers._cond:
                    timers.made.append((interval, function, tuple(args)))
                    timers._cond.notify_all()

            def cancel(self) -> None:
                pass

        return _Timer()

    def wait(self, count: int) -> list[float]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.made) >= count, WAIT)
            return [interval for interval, _, _ in self.made]

    def fire(self, index: int) -> None:
        _, function, args = self.made[index]
        function(*args)


def test_restarts_that_fail_back_off_more_and_more_after_a_long_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers = _Timers()
    monkeypatch.setattr(threading, "Timer", timers)
    starts = Starts()
    clock = FakeClock()
    broken = threading.Event()
    attempts: list[str] = []

    def start() -> pykka.ActorRef[Any]:
        attempts.append("a")
        if broken.is_set():
            raise RuntimeError("what a needs is down")
        return Worker.start("a", starts=starts)

    backoff = Backoff(initial=0.5, factor=4.0, max_delay=30.0, reset_after=60.0)
    handle = SupervisorHandle.start(
        [ChildSpec("a", start)], backoff=backoff, clock=clock, max_restarts=None
    )
    clock.now += 3600.0  # it ran for an hour: its first crash starts a new streak
    broken.set()
    crash(starts.latest("a"))
    assert timers.wait(1) == [0.5]
    timers.fire(0)  # fails: it never ran, so the streak goes on
    assert timers.wait(2) == [0.5, 2.0]
    timers.fire(1)
    assert timers.wait(3) == [0.5, 2.0, 8.0]
    assert attempts == ["a"] * 3  # the static start, then the two failed restarts
    assert handle.stop() == []


@pytest.mark.parametrize(
    ("shutdown", "error", "match"),
    [
        ("soon", TypeError, "shutdown must be a number of seconds, got str"),
        (True, TypeError, "shutdown must be a number of seconds, got bool"),
        (-1.0, ValueError, r"shutdown must be > 0 seconds and finite, got -1\.0"),
        (float("nan"), ValueError, "shutdown must be > 0 seconds and finite, got nan"),
    ],
)
def test_a_bad_shutdown_for_terminate_child_is_refused_before_anything_stops(
    shutdown: Any, error: type[Exception], match: str
) -> None:
    starts = Starts()
    handle = SupervisorHandle.start([worker_spec("x", starts)])
    with pytest.raises(error, match=match):
        handle.terminate_child("x", shutdown=shutdown)
    [child] = handle.which_children()
    assert child.actor_ref is starts.latest("x")
    assert child.actor_ref.is_alive()
    assert handle.terminate_child("x", shutdown=WAIT) is True
    assert handle.stop() == []


def test_demonitor_of_something_else_than_a_monitor_ref_names_the_mistake() -> None:
    ref = Worker.start("m")
    try:
        mref = monitor(ref, lambda _down: None)
        with pytest.raises(TypeError, match=r"needs the MonitorRef that monitor\(\) returned"):
            demonitor("not a monitor")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="the actor's ref, not its monitor's"):
            demonitor(ref)  # type: ignore[arg-type]
        assert demonitor(mref) is True
    finally:
        ref.stop()


def test_a_start_function_that_calls_its_own_supervisor_fails_at_once() -> None:
    starts = Starts()
    handle = SupervisorHandle.start([worker_spec("a", starts)], timeout=0.5)

    def start() -> pykka.ActorRef[Any]:
        handle.which_children()  # the supervisor's thread runs this: it would wait on itself
        return Worker.start("b", starts=starts)

    with pytest.raises(ChildStartError) as caught:
        handle.start_child(ChildSpec("b", start))
    assert isinstance(caught.value.cause, RuntimeError)
    assert "own thread" in str(caught.value.cause)
    assert [c.id for c in handle.which_children()] == ["a"]
    assert handle.stop() == []


def test_on_give_up_that_calls_the_supervisor_is_refused_and_the_supervisor_goes_on() -> None:
    starts = Starts()
    answers: list[BaseException] = []
    called = threading.Event()
    handle: SupervisorHandle | None = None

    def on_give_up(_child_id: str, _reason: object) -> None:
        assert handle is not None
        try:
            handle.count_children()
        except BaseException as exc:
            answers.append(exc)
        finally:
            called.set()

    spec = ChildSpec("x", lambda: Worker.start("x", starts=starts), max_restarts=0)
    handle = SupervisorHandle.start(
        [worker_spec("a", starts), spec], on_give_up=on_give_up, timeout=0.5
    )
    crash(starts.latest("x"))
    assert called.wait(WAIT)
    [answer] = answers
    assert isinstance(answer, RuntimeError)
    assert "own thread" in str(answer)
    assert [c.id for c in handle.which_children()] == ["a"]
    assert handle.stop() == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on_give_up": "log it"}, "on_give_up must be None or a callable"),
        ({"name": 7}, "name must be a str or None, got 7"),
    ],
)
def test_options_used_only_later_are_checked_before_anything_starts(
    kwargs: dict[str, Any], match: str
) -> None:
    starts = Starts()
    with pytest.raises(TypeError, match=match):
        SupervisorHandle.start([worker_spec("a", starts)], **kwargs)
    assert starts.count("a") == 0
