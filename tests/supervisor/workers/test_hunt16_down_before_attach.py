"""Hunt 16: a session's ``down`` that comes before its proxy is attached is not lost.

A ``down`` (the session died in its worker, or on the host delivering its frames: a
subscriber's exit on an event of its start) can be read between the worker's answer to
``start`` and ``WorkerPool.attach``, which records the proxy. The pool dropped it (no
proxy to crash yet): the session was then shown serving while it was gone in the worker,
or was never ended as the exit asked. Now the pool keeps it, and crashes the proxy as it
is attached, as it does for a worker that died meanwhile.

The pool is driven directly (a real worker process; the proxy's ``kill`` recorded): when
a ``down`` is read relative to the attach depends on timing otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors import EventBuffer
from supervisor.workers import _pool
from supervisor.workers._pool import WorkerPool
from tests.supervisor.host_helpers import WAIT


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    made: list[tuple[Any, str]] = []
    monkeypatch.setattr(_pool, "kill", lambda ref, reason: made.append((ref, reason)))
    return made


def test_a_down_before_the_attach_crashes_the_proxy_as_it_is_attached(
    kills: list[tuple[Any, str]],
) -> None:
    pool = WorkerPool(1)
    try:
        client = pool.place("s1", EventBuffer(), WAIT)
        other = pool.place("s2", EventBuffer(), WAIT)
        pool._on_push(client, {"op": "down", "session": "s1", "reason": "gone"})
        assert kills == []  # no proxy yet
        proxy: Any = object()  # stands for a proxy's ref (``kill`` is recorded, not run)
        other_proxy: Any = object()
        pool.attach("s2", other, other_proxy)
        pool.attach("s1", client, proxy)
        assert kills == [(proxy, f"died in worker pid {client.pid}: gone")]
        assert client.alive  # the worker and its other session go on
    finally:
        pool.close()


def test_a_down_of_an_earlier_placement_is_not_held_against_the_next(
    kills: list[tuple[Any, str]],
) -> None:
    pool = WorkerPool(1)
    try:
        client = pool.place("s1", EventBuffer(), WAIT)
        pool._on_push(client, {"op": "down", "session": "s1", "reason": "gone"})
        pool.release("s1", client)  # that start failed: its placement is forgotten
        again = pool.place("s1", EventBuffer(), WAIT)
        proxy: Any = object()
        pool.attach("s1", again, proxy)
        assert kills == []
    finally:
        pool.close()
