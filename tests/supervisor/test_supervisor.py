"""Supervisor: strategies x restart types x exit reasons, intensity, nesting, shutdown."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykka
import pytest

from supervisor import (
    NORMAL,
    SHUTDOWN,
    ChildAlreadyExists,
    ChildNotFound,
    ChildSpec,
    ChildStartError,
    RestartIntensityExceeded,
    Supervisor,
    SupervisorHandle,
    monitor,
    terminate,
)
from tests.supervisor.helpers import WAIT, Downs, FakeClock, Starts, Worker, crash, worker_spec


@pytest.fixture
def starts() -> Starts:
    return Starts()


def _exit(ref: pykka.ActorRef[Any], how: str) -> None:
    """Make a child exit with the given kind of reason and wait until its Downs are out."""
    downs = Downs()
    monitor(ref, downs)  # added after the supervisor's: delivered after it
    if how == "normal":
        ref.stop()
    elif how == "shutdown":
        terminate(ref, WAIT)
    elif how == "exception":
        crash(ref)
    else:
        crash(ref, SystemExit(1))
    downs.wait()


def _refs(handle: SupervisorHandle) -> dict[str, pykka.ActorRef[Any] | None]:
    return {c.id: c.actor_ref for c in handle.which_children()}


RESTARTS = {
    "permanent": {"normal", "shutdown", "exception", "system_exit"},
    "transient": {"exception", "system_exit"},
    "temporary": set(),
}


@pytest.mark.parametrize("how", ["normal", "shutdown", "exception", "system_exit"])
@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
def test_strategy_restart_type_and_exit_reason(
    strategy: Any, restart: str, how: str, starts: Starts
) -> None:
    specs = [
        worker_spec("a", starts),
        worker_spec("b", starts, restart=restart),
        worker_spec("c", starts),
    ]
    handle = SupervisorHandle.start(specs, strategy=strategy)
    before = _refs(handle)
    _exit(before["b"], how)  # type: ignore[arg-type]
    after = _refs(handle)
    restarted = how in RESTARTS[restart]
    if not restarted:
        assert list(after) == ["a", "c"]  # not restarted: removed
        assert after == {"a": before["a"], "c": before["c"]}
    else:
        assert list(after) == ["a", "b", "c"]
        assert after["b"] is not before["b"]
        assert after["b"] is starts.latest("b")
        renewed = {
            "one_for_one": set(),
            "one_for_all": {"a", "c"},
            "rest_for_one": {"c"},
        }[strategy]
        for sibling in ["a", "c"]:
            assert (after[sibling] is not before[sibling]) == (sibling in renewed)
        if strategy == "one_for_all":
            assert starts.order[-3:] == ["a", "b", "c"]  # restarted in start order
    assert all(ref is not None and ref.is_alive() for ref in after.values())
    assert handle.count_children().active == len(after)
    assert handle.stop() == []


def test_temporary_sibling_terminated_by_one_for_all_is_not_restarted(starts: Starts) -> None:
    specs = [worker_spec("a", starts), worker_spec("t", starts, restart="temporary")]
    handle = SupervisorHandle.start(specs, strategy="one_for_all")
    _exit(_refs(handle)["a"], "exception")  # type: ignore[arg-type]
    assert list(_refs(handle)) == ["a"]
    assert starts.count("t") == 1
    handle.stop()


def test_intensity_exactly_at_the_limit_keeps_running(starts: Starts) -> None:
    clock = FakeClock()
    handle = SupervisorHandle.start(
        [worker_spec("a", starts)], max_restarts=3, max_seconds=5.0, clock=clock
    )
    for n in range(3):
        _exit(starts.latest("a"), "exception")
        starts.wait("a", n + 2)
    assert handle.is_alive()
    assert handle.count_children().active == 1
    handle.stop()


def test_intensity_one_past_the_limit_escalates(starts: Starts) -> None:
    clock = FakeClock()
    stops: list[str] = []
    specs = [worker_spec(n, starts, stops=stops) for n in ["a", "b", "c"]]
    handle = SupervisorHandle.start(specs, max_restarts=3, max_seconds=5.0, clock=clock, name="top")
    downs = Downs()
    monitor(handle.actor_ref, downs)
    for n in range(3):
        _exit(starts.latest("b"), "exception")
        starts.wait("b", n + 2)
    stops.clear()
    boom = RuntimeError("fourth")
    crash(starts.latest("b"), boom)
    [down] = downs.wait()
    assert isinstance(down.reason, RestartIntensityExceeded)
    assert down.reason.child_id == "b"
    assert down.reason.last_reason is boom
    assert down.reason.__cause__ is boom
    assert "top" in str(down.reason)
    assert stops == ["c", "a"]  # survivors stopped in reverse start order
    assert starts.count("b") == 4
    assert pykka.ActorRegistry.get_all() == []


def test_intensity_window_slides_with_the_clock(starts: Starts) -> None:
    clock = FakeClock()
    handle = SupervisorHandle.start(
        [worker_spec("a", starts)], max_restarts=1, max_seconds=5.0, clock=clock
    )
    for n in range(4):
        clock.now += 5.001  # each restart outside the window of the previous one
        _exit(starts.latest("a"), "exception")
        starts.wait("a", n + 2)
    assert handle.is_alive()
    clock.now += 5.0  # exactly max_seconds later: still inside the window (as OTP)
    downs = Downs()
    monitor(handle.actor_ref, downs)
    _exit(starts.latest("a"), "exception")
    assert isinstance(downs.wait()[0].reason, RestartIntensityExceeded)


def test_max_restarts_zero_gives_up_at_the_first_crash(starts: Starts) -> None:
    handle = SupervisorHandle.start([worker_spec("a", starts)], max_restarts=0)
    downs = Downs()
    monitor(handle.actor_ref, downs)
    crash(starts.latest("a"))
    assert isinstance(downs.wait()[0].reason, RestartIntensityExceeded)
    assert starts.count("a") == 1


def test_nested_supervisor_escalates_up_the_tree(starts: Starts) -> None:
    clock = FakeClock()
    sub = Supervisor.child_spec(
        "sub", [worker_spec("w", starts)], max_restarts=1, clock=clock, name="sub"
    )
    top = SupervisorHandle.start([sub], max_restarts=0, clock=clock, name="top")
    downs = Downs()
    monitor(top.actor_ref, downs)
    [info] = top.which_children()
    assert info.supervisor
    crash(starts.latest("w"))
    starts.wait("w", 2)
    crash(starts.latest("w"))
    [down] = downs.wait()
    assert isinstance(down.reason, RestartIntensityExceeded)
    assert down.reason.child_id == "sub"
    inner = down.reason.__cause__
    assert isinstance(inner, RestartIntensityExceeded)
    assert inner.child_id == "w"
    assert pykka.ActorRegistry.get_all() == []


def test_parent_restarts_a_failed_nested_supervisor_with_fresh_children(starts: Starts) -> None:
    sub = Supervisor.child_spec("sub", [worker_spec("w", starts)], max_restarts=0)
    top = SupervisorHandle.start([sub])
    first_sub = top.which_children()[0].actor_ref
    crash(starts.latest("w"))
    starts.wait("w", 2)
    assert top.which_children()[0].actor_ref is not first_sub
    assert starts.latest("w").ask("ping", timeout=WAIT) == "pong"
    top.stop()


def test_shutdown_stops_children_in_reverse_start_order(starts: Starts) -> None:
    stops: list[str] = []
    nested = Supervisor.child_spec("nested", [worker_spec("n1", starts, stops=stops)])
    specs = [worker_spec("a", starts, stops=stops), nested, worker_spec("c", starts, stops=stops)]
    handle = SupervisorHandle.start(specs)
    handle.start_child(worker_spec("d", starts, stops=stops))
    downs = Downs()
    monitor(handle.actor_ref, downs)
    assert handle.stop() == []
    assert stops == ["d", "c", "n1", "a"]
    assert downs.wait()[0].reason == NORMAL
    assert pykka.ActorRegistry.get_all() == []


def test_nested_supervisor_stopped_by_its_parent_exits_with_shutdown(starts: Starts) -> None:
    top = SupervisorHandle.start([Supervisor.child_spec("sub", [worker_spec("w", starts)])])
    sub_ref = top.which_children()[0].actor_ref
    assert sub_ref is not None
    downs = Downs()
    monitor(sub_ref, downs)
    assert top.terminate_child("sub") is True
    assert downs.wait()[0].reason == SHUTDOWN
    assert not starts.latest("w").is_alive()
    top.stop()


def test_child_that_does_not_stop_in_time_is_reported_and_abandoned(starts: Starts) -> None:
    stops: list[str] = []
    specs = [
        worker_spec("a", starts, stops=stops),
        worker_spec("slow", starts, shutdown=0.05, stops=stops),
        worker_spec("c", starts, stops=stops),
    ]
    handle = SupervisorHandle.start(specs)
    gate = threading.Event()
    slow = starts.latest("slow")
    busy = slow.ask(("block", gate), block=False)
    assert handle.stop() == ["slow"]
    assert stops == ["c", "a"]  # shutdown went on past the stuck child
    assert slow.is_alive()  # abandoned, still running
    gate.set()
    assert busy.get(timeout=WAIT) == "unblocked"
    assert terminate(slow, WAIT)  # it then handles the queued stop
    assert stops == ["c", "a", "slow"]


def test_concurrent_stop_waits_for_stuck_children_together(starts: Starts) -> None:
    """``stop(concurrently=True)`` asks every child to stop at once: children stuck past
    their shutdown time cost the longest of those times, not their sum (OTP's
    shutdown of a ``simple_one_for_one`` supervisor's independent children)."""
    stops: list[str] = []
    names = ["a", "b", "c", "d"]
    handle = SupervisorHandle.start(
        [worker_spec(name, starts, shutdown=0.5, stops=stops) for name in names]
    )
    gate = threading.Event()
    busy = [starts.latest(name).ask(("block", gate), block=False) for name in names]
    began = time.monotonic()
    try:
        abandoned = handle.stop(concurrently=True)
        took = time.monotonic() - began
    finally:
        gate.set()
    assert abandoned == ["d", "c", "b", "a"]  # reverse start order, as a plain stop
    assert took < 1.5, f"stop took {took:.2f} s; one after the other it takes 2 s"
    assert [future.get(timeout=WAIT) for future in busy] == ["unblocked"] * 4
    for name in names:
        assert terminate(starts.latest(name), WAIT)  # each then handles its queued stop
    assert sorted(stops) == names


def test_dynamic_children(starts: Starts) -> None:
    handle = SupervisorHandle.start([worker_spec("a", starts)])
    ref = handle.start_child(worker_spec("b", starts, restart="transient"))
    assert ref.ask("ping", timeout=WAIT) == "pong"
    with pytest.raises(ChildAlreadyExists):
        handle.start_child(worker_spec("b", starts))
    counts = handle.count_children()
    assert (counts.specs, counts.active, counts.workers, counts.supervisors) == (2, 2, 2, 0)
    assert handle.terminate_child("b") is True
    assert not ref.is_alive()
    assert [c.id for c in handle.which_children()] == ["a"]
    with pytest.raises(ChildNotFound):
        handle.terminate_child("b")
    handle.stop()


def test_a_child_slow_to_stop_holds_up_only_the_caller_of_terminate_child(
    starts: Starts,
) -> None:
    """The supervisor asks the child to stop and goes on serving; ``terminate_child``
    returns once the child has finished, or False (abandoned) after its shutdown time."""
    stops: list[str] = []
    handle = SupervisorHandle.start([worker_spec("slow", starts, stops=stops)])
    slow = starts.latest("slow")
    gate = threading.Event()
    busy = slow.ask(("block", gate), block=False)  # the stop waits behind this
    with ThreadPoolExecutor(1) as pool:
        terminating = pool.submit(handle.terminate_child, "slow")
        other = handle.start_child(worker_spec("other", starts))  # not held up
        assert other.ask("ping", timeout=WAIT) == "pong"
        assert [c.id for c in handle.which_children()] == ["other"]
        assert not terminating.done()
        assert stops == []
        gate.set()
        assert terminating.result(WAIT) is True
    assert stops == ["slow"]
    assert not slow.is_alive()
    assert busy.get(timeout=WAIT) == "unblocked"

    stuck = handle.start_child(worker_spec("stuck", starts, shutdown=0.05))
    gate = threading.Event()
    stuck.ask(("block", gate), block=False)
    assert handle.terminate_child("stuck") is False  # abandoned after 0.05 s
    assert stuck.is_alive()
    assert handle.terminate_child("other", shutdown=WAIT) is True
    assert handle.which_children() == []
    gate.set()
    assert terminate(stuck, WAIT)
    handle.stop()


def test_failed_start_child_adds_nothing(starts: Starts) -> None:
    handle = SupervisorHandle.start()

    def broken() -> pykka.ActorRef[Any]:
        raise OSError("no upstream")

    with pytest.raises(ChildStartError) as info:
        handle.start_child(ChildSpec("x", broken))
    assert isinstance(info.value.__cause__, OSError)
    plain = pykka.ThreadingActor.start
    with pytest.raises(ChildStartError, match="SupervisedActor"):
        handle.start_child(ChildSpec("y", plain))
    assert handle.which_children() == []
    handle.stop()


def test_static_child_start_failure_stops_the_started_ones(starts: Starts) -> None:
    stops: list[str] = []

    def broken() -> pykka.ActorRef[Any]:
        raise OSError("down")

    specs = [
        worker_spec("a", starts, stops=stops),
        worker_spec("b", starts, stops=stops),
        ChildSpec("x", broken),
    ]
    with pytest.raises(ChildStartError) as info:
        Supervisor.start(specs)
    assert info.value.child_id == "x"
    assert stops == ["b", "a"]
    assert pykka.ActorRegistry.get_all() == []


def test_restart_whose_start_fails_is_retried_then_escalates(starts: Starts) -> None:
    attempts: list[int] = []

    def flaky() -> pykka.ActorRef[Any]:
        attempts.append(1)
        if len(attempts) > 1:
            raise OSError("upstream down")
        return Worker.start("f", starts=starts)

    handle = SupervisorHandle.start([ChildSpec("f", flaky)], max_restarts=3, clock=FakeClock())
    downs = Downs()
    monitor(handle.actor_ref, downs)
    crash(starts.latest("f"))
    [down] = downs.wait()
    assert isinstance(down.reason, RestartIntensityExceeded)
    assert isinstance(down.reason.last_reason, OSError)
    assert len(attempts) == 4  # the first start, then 3 allowed restarts that failed


def test_child_dying_in_on_start_counts_as_a_crash() -> None:
    monitored = threading.Event()
    starts = itertools.count()

    def doomed() -> pykka.ActorRef[Any]:
        if next(starts) > 0:  # restarts wait until the test monitors the supervisor: else
            monitored.wait(WAIT)  # it could be gone before, and its Down say only 'noproc'
        return Worker.start(fail_on_start=RuntimeError("bad config"))

    handle = SupervisorHandle.start([ChildSpec("d", doomed)], max_restarts=2, clock=FakeClock())
    downs = Downs()
    monitor(handle.actor_ref, downs)
    monitored.set()
    reason = downs.wait()[0].reason
    assert isinstance(reason, RestartIntensityExceeded)
    assert isinstance(reason.last_reason, RuntimeError)


def test_supervisor_is_stopped_cleanly_by_stop_all(starts: Starts) -> None:
    handle = SupervisorHandle.start([worker_spec(n, starts) for n in ["a", "b"]])
    handle.start_child(worker_spec("c", starts))
    downs = Downs()
    monitor(handle.actor_ref, downs)
    pykka.ActorRegistry.stop_all(timeout=WAIT)
    downs.wait()
    assert handle.stop() == []  # already gone
    assert pykka.ActorRegistry.get_all() == []


def test_handle_requires_a_supervisor_ref() -> None:
    ref = Worker.start()
    with pytest.raises(TypeError, match="Supervisor"):
        SupervisorHandle(ref)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        SupervisorHandle(Supervisor.start(), timeout=0)


@pytest.mark.parametrize(
    ("timeout", "error", "match"),
    [
        (0, ValueError, "timeout must be > 0 seconds and finite, got 0"),
        (float("inf"), ValueError, "got inf"),
        (float("nan"), ValueError, "got nan"),
        ("5", TypeError, "timeout must be a number of seconds, got str"),
    ],
)
def test_a_bad_timeout_is_refused_before_the_supervisor_starts(
    timeout: object, error: type[Exception], match: str
) -> None:
    running = pykka.ActorRegistry.get_all()
    threads = threading.active_count()
    with pytest.raises(error, match=match):
        SupervisorHandle.start(timeout=timeout)  # type: ignore[arg-type]
    assert pykka.ActorRegistry.get_all() == running  # no supervisor left running
    assert threading.active_count() == threads


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"strategy": "one_for_some"}, ValueError, "strategy"),
        ({"max_restarts": -1}, ValueError, "max_restarts must be >= 0"),
        ({"max_restarts": 1.5}, TypeError, "max_restarts"),
        ({"max_seconds": 0}, ValueError, "max_seconds"),
        ({"clock": 3}, TypeError, "clock"),
        ({"backoff": 1.0}, TypeError, "backoff"),
        ({"children": ["x"]}, TypeError, "ChildSpec"),
    ],
)
def test_invalid_options_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Supervisor.start(**kwargs)


def test_duplicate_static_ids_are_refused(starts: Starts) -> None:
    with pytest.raises(ValueError, match="unique"):
        Supervisor.start([worker_spec("a", starts), worker_spec("a", starts)])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"id": ""}, ValueError, "id"),
        ({"start": None}, TypeError, "callable"),
        ({"restart": "sometimes"}, ValueError, "restart must be one of"),
        ({"shutdown": 0}, ValueError, "shutdown"),
        ({"shutdown": "5"}, TypeError, "shutdown"),
    ],
)
def test_child_spec_validation(kwargs: dict[str, Any], error: type, match: str) -> None:
    base: dict[str, Any] = {"id": "a", "start": Worker.start}
    with pytest.raises(error, match=match):
        ChildSpec(**(base | kwargs))


# -- per-child restart intensity (a host of independent sessions) ----------------------


def test_child_past_its_own_intensity_is_given_up_alone(starts: Starts) -> None:
    clock = FakeClock()
    given_up: list[tuple[str, Any]] = []
    reported = threading.Event()

    def report(child_id: str, reason: Any) -> None:  # called once the child is dropped
        given_up.append((child_id, reason))
        reported.set()

    flaky = ChildSpec(
        "flaky",
        lambda: Worker.start("flaky", starts=starts),
        max_restarts=2,
        max_seconds=5.0,
    )
    handle = SupervisorHandle.start(
        [worker_spec("steady", starts), flaky], max_restarts=None, clock=clock, on_give_up=report
    )
    steady = starts.latest("steady")
    for n in range(2):  # exactly at the child's limit: restarted
        _exit(starts.latest("flaky"), "exception")
        starts.wait("flaky", n + 2)
    boom = RuntimeError("third crash")
    downs = Downs()
    monitor(starts.latest("flaky"), downs)
    crash(starts.latest("flaky"), boom)
    downs.wait()
    assert reported.wait(5)  # our DOWN can come before the supervisor has handled its own
    assert handle.is_alive()
    assert list(_refs(handle)) == ["steady"]
    assert _refs(handle)["steady"] is steady  # the sibling was not touched
    assert given_up == [("flaky", boom)]
    assert starts.count("flaky") == 3
    handle.stop()


def test_child_intensity_window_forgets_old_restarts(starts: Starts) -> None:
    clock = FakeClock()
    spec = ChildSpec("w", lambda: Worker.start("w", starts=starts), max_restarts=1, max_seconds=5.0)
    handle = SupervisorHandle.start([spec], max_restarts=None, clock=clock)
    for n in range(4):  # one restart per window is always allowed
        _exit(starts.latest("w"), "exception")
        starts.wait("w", n + 2)
        clock.now += 6.0
    assert list(_refs(handle)) == ["w"]
    handle.stop()


def test_no_supervisor_wide_limit_never_escalates(starts: Starts) -> None:
    handle = SupervisorHandle.start(
        [worker_spec("a", starts)], max_restarts=None, clock=FakeClock()
    )
    for n in range(20):
        _exit(starts.latest("a"), "exception")
        starts.wait("a", n + 2)
    assert handle.is_alive()
    handle.stop()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_restarts": -1}, "max_restarts must be >= 0"),
        ({"max_restarts": 1, "max_seconds": 0}, "max_seconds must be finite and > 0"),
    ],
)
def test_child_intensity_is_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChildSpec("x", lambda: Worker.start("x", starts=Starts()), **kwargs)
