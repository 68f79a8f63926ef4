"""``tune_interpreter``: the switch interval for a process with many session threads."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from supervisor import SWITCH_INTERVAL, tune_interpreter


@pytest.fixture(autouse=True)
def _restore_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


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
