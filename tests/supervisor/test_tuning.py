"""``tune_interpreter``: the switch interval for a process with many session threads."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import weakref
from collections.abc import Iterator

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import (
    SWITCH_INTERVAL,
    AgentHost,
    freeze_startup_objects,
    tune_interpreter,
    tuning,
)


@pytest.fixture(autouse=True)
def _restore_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    thresholds = gc.get_threshold()
    yield
    sys.setswitchinterval(before)
    gc.set_threshold(*thresholds)


def test_it_makes_full_collections_rarer_and_never_more_frequent() -> None:
    """A full collection stalls thousands of session threads (see the module docstring)."""
    gc.set_threshold(700, 10, 10)
    tune_interpreter()
    assert gc.get_threshold() == (700, 10, tuning.FULL_COLLECTION_EVERY)
    gc.set_threshold(500, 20, 1000)  # a program's own, rarer still: kept
    tune_interpreter()
    assert gc.get_threshold() == (500, 20, 1000)


def test_it_sets_the_interval_and_returns_the_one_before() -> None:
    sys.setswitchinterval(0.005)
    assert tune_interpreter() == pytest.approx(0.005)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
    assert tune_interpreter(0.01) == pytest.approx(SWITCH_INTERVAL)
    assert sys.getswitchinterval() == pytest.approx(0.01)


@pytest.mark.parametrize("bad", [0, -0.01, 1.5, True, "0.05", None, float("nan")])
def test_a_bad_interval_is_refused_and_nothing_changes(bad: object) -> None:
    sys.setswitchinterval(0.005)
    with pytest.raises(ValueError, match=r"switch_interval must be seconds in \(0, 1\]"):
        tune_interpreter(bad)  # type: ignore[arg-type]
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_host_with_many_threads_at_the_default_interval_says_once_what_to_do(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tuning, "HINT_THREADS", threading.active_count())  # "many": already
    monkeypatch.setattr(tuning, "_HINTED", threading.Lock())
    sys.setswitchinterval(0.005)
    with caplog.at_level(logging.WARNING, "supervisor.host"), AgentHost() as host:
        for _ in range(3):
            host.start_session(AgentTemplate(model=EchoModel()))
    hints = [r.getMessage() for r in caplog.records if "tune_interpreter" in r.getMessage()]
    assert len(hints) == 1, hints
    assert "GIL switch interval of 0.005 s" in hints[0]
    assert "supervisor.pin_to_one_cpu() (serve --cpu N)" in hints[0]


def test_a_tuned_or_small_host_gets_no_hint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tuning, "_HINTED", threading.Lock())
    with caplog.at_level(logging.WARNING, "supervisor.host"):
        monkeypatch.setattr(tuning, "HINT_THREADS", threading.active_count())
        tune_interpreter()
        with AgentHost() as host:
            host.start_session(AgentTemplate(model=EchoModel()))
        sys.setswitchinterval(0.005)
        monkeypatch.setattr(tuning, "HINT_THREADS", 100_000)
        with AgentHost() as host:
            host.start_session(AgentTemplate(model=EchoModel()))
    assert not [r for r in caplog.records if "tune_interpreter" in r.getMessage()]


class _Cycle:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_freezing_keeps_startup_objects_out_of_collections_and_later_ones_in() -> None:
    """What exists when ``freeze_startup_objects`` runs is frozen (a full collection skips
    it); cyclic garbage made afterwards, a session's for instance, is still collected."""
    kept = _Cycle()  # alive at the freeze: frozen with the rest
    try:
        frozen = freeze_startup_objects()
        assert frozen == gc.get_freeze_count() > 1000  # the imports' objects at least
        assert all(found is not kept for found in gc.get_objects(generation=2))  # skipped
        later = weakref.ref(_Cycle())  # garbage at once, in a cycle
        gc.collect()
        assert later() is None
    finally:
        gc.unfreeze()  # the rest of the test process collects as before
    assert gc.get_freeze_count() == 0
