"""Restart intensity and backoff, as pure policy and inside a running supervisor."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor import Backoff, RestartIntensity, SupervisorHandle, monitor
from tests.supervisor.helpers import Downs, FakeClock, Starts, crash, worker_spec


def test_intensity_counts_restarts_inside_the_window() -> None:
    clock = FakeClock()
    intensity = RestartIntensity(2, 10.0, clock)
    assert intensity.allow()
    clock.now = 4.0
    assert intensity.allow()
    clock.now = 10.0  # the restart at 0 is exactly max_seconds old: it still counts
    assert not intensity.allow()
    clock.now = 14.5  # 0 and 4 have left the window
    assert intensity.allow()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((-1, 5.0), ValueError),
        ((True, 5.0), TypeError),
        ((1, -2.0), ValueError),
        ((1, "5"), TypeError),
    ],
)
def test_intensity_validation(args: tuple[Any, Any], error: type) -> None:
    with pytest.raises(error):
        RestartIntensity(args[0], args[1], FakeClock())


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(initial=0.5, factor=2.0, max_delay=3.0)
    assert [backoff.delay(n) for n in range(6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.delay(10_000) == 3.0  # no overflow on long streaks
    assert Backoff(initial=0.0).delay(5) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"initial": -1}, ValueError),
        ({"factor": 0.5}, ValueError),
        ({"factor": "2"}, TypeError),
        ({"initial": 2.0, "max_delay": 1.0}, ValueError),
        ({"reset_after": 0}, ValueError),
    ],
)
def test_backoff_validation(kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        Backoff(**kwargs)


def test_backoff_delays_the_restart_and_a_long_uptime_resets_the_streak() -> None:
    starts = Starts()
    clock = FakeClock()
    backoff = Backoff(initial=0.01, factor=1000.0, max_delay=10.0, reset_after=60.0)
    handle = SupervisorHandle.start(
        [worker_spec("a", starts)], backoff=backoff, clock=clock, max_restarts=100
    )
    crash(starts.latest("a"))
    starts.wait("a", 2)  # first restart of a streak: 0.01 s
    handle.which_children()  # the supervisor has finished that restart
    clock.now += 61.0  # it then ran long enough: the next crash starts a new streak
    crash(starts.latest("a"))
    starts.wait("a", 3)  # 0.01 s again (10 s would time the wait out)
    handle.stop()


def test_stop_cancels_a_pending_backoff_restart() -> None:
    starts = Starts()
    backoff = Backoff(initial=10.0, max_delay=10.0)
    handle = SupervisorHandle.start(
        [worker_spec("a", starts)], backoff=backoff, clock=FakeClock(), max_restarts=100
    )
    downs = Downs()
    monitor(starts.latest("a"), downs)
    crash(starts.latest("a"))
    downs.wait()
    [info] = handle.which_children()
    assert info.actor_ref is None  # waiting out its backoff
    assert handle.count_children().active == 0
    assert handle.stop() == []
    assert starts.count("a") == 1
