"""A replacement worker that cannot be started is retried, then given up visibly.

When a worker died the pool started a replacement once; if starting it failed
(no free file descriptors or memory, a thread that could not start) that was
only logged: the pool kept one worker fewer for good, never tried again, and
``workers_given_up`` stayed false, so a readiness probe said "being replaced"
for ever. As an OTP supervisor does, the pool now retries the replacement (with
a short backoff) within its restart intensity: a transient failure heals, and
one that lasts a whole ``worker_max_seconds`` window gives the workers up, as
workers dying too often do.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import supervisor.workers._pool as pool_module
from supervisor import AgentHost, MemoryCheckpointStore, WorkerStartError
from supervisor.workers._client import WorkerClient
from tests.supervisor.host_helpers import poll_until, template
from tests.supervisor.workers.worker_tools import worker_pid

_SETTLE = 20.0
"""Bound on the replacement being started again, or given up (a busy machine)."""


class _FailingStarts:
    """Stands in for ``WorkerClient`` in the pool: the next ``failures`` starts raise
    ``OSError`` (EMFILE: out of file descriptors), later ones start a real worker."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self._lock = threading.Lock()
        self._real = WorkerClient

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.attempts += 1
            fail = self.attempts <= self.failures
        if fail:
            raise OSError(errno.EMFILE, "Too many open files")
        return self._real(*args, **kwargs)


@pytest.fixture
def host() -> Iterator[AgentHost]:
    made = AgentHost(MemoryCheckpointStore(), workers=1, worker_max_seconds=1.0)
    yield made
    made.shutdown()


def _kill_the_worker(host: AgentHost, monkeypatch: pytest.MonkeyPatch, starts: object) -> str:
    """Start a session, make worker starts fail as ``starts`` says, SIGKILL its worker."""
    sid = host.start_session(template(), "s")
    assert host.send(sid, "before").content == "echo: before"
    monkeypatch.setattr(pool_module, "WorkerClient", starts)
    deaths = host.worker_deaths
    os.kill(worker_pid(host, sid), signal.SIGKILL)
    assert poll_until(lambda: host.worker_deaths == deaths + 1, _SETTLE)  # noticed
    return sid


def test_a_replacement_that_fails_to_start_a_few_times_is_retried(
    host: AgentHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = _FailingStarts(failures=2)
    sid = _kill_the_worker(host, monkeypatch, starts)

    assert host.wait_for_workers(_SETTLE) is True  # one worker again, as asked for
    assert starts.attempts == 3
    assert host.workers_given_up is False
    assert len(host.workers()) == 1
    assert host.send(sid, "after").content == "echo: after"  # resumed on the replacement


def test_a_replacement_that_never_starts_gives_the_workers_up(
    host: AgentHost, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    starts = _FailingStarts(failures=10**6)
    caplog.set_level(logging.ERROR, logger="supervisor.workers")
    _kill_the_worker(host, monkeypatch, starts)

    # At once False when no replacement will come (not after the whole wait).
    assert host.wait_for_workers(_SETTLE) is False
    assert host.workers_given_up is True
    assert starts.attempts > 1  # retried before giving up

    def given_up() -> list[str]:
        return [r.getMessage() for r in caplog.records if "no longer replacing" in r.getMessage()]

    assert poll_until(lambda: len(given_up()) == 1)  # logged just after ``gave_up`` is set
    assert "Too many open files" in given_up()[0]
    attempts = starts.attempts
    with pytest.raises(WorkerStartError, match="Too many open files"):
        host.start_session(template(), "t")
    assert starts.attempts == attempts  # no retry after giving up
