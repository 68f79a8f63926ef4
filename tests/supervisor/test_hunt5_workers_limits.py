"""An absurd worker count is refused before any process starts.

``AgentHost(workers=10**6)`` (a typo, a unit mix-up, a value read from the wrong
setting) tried to start a million processes, one after the other, until the
machine ran out of processes or memory. It raises a ``ValueError`` naming the
limit, at construction, before anything starts.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from supervisor import AgentHost, MemoryCheckpointStore, WorkerPool
from supervisor.workers import _pool


class _NoProcess(Exception):
    """What the stand-in for a worker raises: a worker was about to start."""


@pytest.fixture
def no_worker_starts(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Any worker the test would start raises ``_NoProcess`` instead (so a missing check
    fails the test rather than forking); returns the attempts."""
    attempts: list[object] = []

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        attempts.append(args)
        raise _NoProcess

    monkeypatch.setattr(_pool, "WorkerClient", refuse)
    return attempts


@pytest.mark.parametrize("count", [1025, 10**6, 2**63])
def test_the_host_refuses_an_absurd_worker_count(
    no_worker_starts: list[object], count: int
) -> None:
    with pytest.raises(ValueError, match=r"workers must be at most 1024") as caught:
        AgentHost(MemoryCheckpointStore(), workers=count)
    message = str(caught.value)
    assert f"got {count}" in message
    assert "each worker is a process" in message  # why
    assert no_worker_starts == []


def test_the_pool_refuses_it_too(no_worker_starts: list[object]) -> None:
    with pytest.raises(ValueError, match=r"workers must be at most 1024, got 1000000"):
        WorkerPool(10**6)
    assert no_worker_starts == []


def test_the_limit_itself_is_accepted(no_worker_starts: list[object]) -> None:
    """1024 passes the check (the stand-in then refuses to start the first worker)."""
    with pytest.raises(_NoProcess):
        AgentHost(MemoryCheckpointStore(), workers=1024)
    assert len(no_worker_starts) == 1
