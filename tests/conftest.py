"""Shared fixtures: every test must leave no actor and no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pykka
import pytest

JOIN_TIMEOUT = 5.0


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves threads running after it.

    Actors still running at the end are stopped first (like pykka's own test
    suite does), so one forgetful test cannot cascade into the next; but any
    thread that then fails to exit within the bound is reported as a leak.
    """
    before = set(threading.enumerate())
    yield
    pykka.ActorRegistry.stop_all(timeout=JOIN_TIMEOUT)
    for thread in _new_threads(before):
        thread.join(JOIN_TIMEOUT)
    leaked = _new_threads(before)
    assert not leaked, f"test leaked threads: {[t.name for t in leaked]}"
