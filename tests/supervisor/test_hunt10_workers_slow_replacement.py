"""A session resumed on a replacement worker still starting is not killed by its call timeout.

When a worker dies its sessions resume on a live worker, often its replacement
(the least loaded). The replacement may not serve yet: the process imports the
host's modules and runs ``worker_initializer`` first (loading a tokenizer, a
client pool...). The start's first request, ``load_template``, was written at
once and timed by ``worker_call_timeout`` from then on, so a replacement slower to
start than that timeout was killed for it, its own replacement too, and the
session was given up after its restart intensity: one crash ended the session
for good. A start now waits for its worker to serve before its requests are timed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import template
from tests.supervisor.workers.worker_tools import watch_events, worker_pid

_REPLACEMENT_START = 2.0
"""Seconds the initializer takes in every worker but the first (a slow set-up)."""

_CALL_TIMEOUT = 0.5
"""``worker_call_timeout``: far less than a replacement's start."""

_RESUME_WAIT = 30.0
"""Bound on the resume: the replacement's start, on a busy machine."""


def slow_after_first(marker: str) -> None:
    """The first worker starts at once (and leaves ``marker``); later ones take a while."""
    if os.path.exists(marker):
        time.sleep(_REPLACEMENT_START)  # the set-up being slow is the point of the test
    else:
        Path(marker).touch()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[AgentHost]:
    made = AgentHost(
        MemoryCheckpointStore(),
        workers=1,
        worker_call_timeout=_CALL_TIMEOUT,
        worker_initializer=slow_after_first,
        worker_initargs=(str(tmp_path / "first-worker-started"),),
    )
    yield made
    made.shutdown()


def test_a_session_resumes_on_a_replacement_slower_to_start_than_the_call_timeout(
    host: AgentHost,
) -> None:
    sid = host.start_session(template(), "s")
    assert host.send(sid, "before").content == "echo: before"
    waiter = watch_events(host, sid)
    deaths = host.worker_deaths

    os.kill(worker_pid(host, sid), signal.SIGKILL)

    waiter.wait_for("resumed", timeout=_RESUME_WAIT)
    assert host.send(sid, "after").content == "echo: after"
    assert [e.type for e in waiter.events].count("given_up") == 0
    assert host.worker_deaths == deaths + 1  # the killed worker only: no replacement killed
