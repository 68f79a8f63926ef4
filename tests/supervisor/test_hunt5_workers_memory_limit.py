"""``worker_memory_limit`` leaves room for sessions, and says so when it runs out.

The limit is ``RLIMIT_AS``: address space, which a thread reserves whole (its
stack) and glibc's allocator reserves in 64 MiB arenas, one per thread up to
eight per core. Each session in a worker runs on a thread of its own, so a worker
limited to 512 MiB could not start its sixth session (fewer on a machine with
more cores), and the caller got a bare ``RuntimeError: can't start new thread``.
A limited worker now keeps two arenas, and a start past its limit says which
limit and what to do.
"""

from __future__ import annotations

import pytest

from actors import AgentTemplate, EchoModel
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT

MIB = 2**20


def test_a_worker_limited_to_512_mib_runs_two_dozen_sessions() -> None:
    template = AgentTemplate(model=EchoModel())
    with AgentHost(MemoryCheckpointStore(), workers=1, worker_memory_limit=512 * MIB) as host:
        sessions = [host.start_session(template, f"s{i}") for i in range(24)]
        for sid in sessions:
            assert host.send(sid, f"hi {sid}").content == f"echo: hi {sid}"
        assert host.worker_deaths == 0


def test_a_start_past_the_limit_names_it_and_the_fix() -> None:
    """512 (bytes: meant as MiB) lets the worker serve what it has mapped already, and
    no thread more."""
    template = AgentTemplate(model=EchoModel())
    with AgentHost(MemoryCheckpointStore(), workers=1, worker_memory_limit=512) as host:
        with pytest.raises(RuntimeError) as caught:
            host.start_session(template, "s")
        text = str(caught.value)
        assert "can't start new thread" in text
        assert "worker_memory_limit=512 bytes" in text
        assert "address space" in text
        assert "raise worker_memory_limit" in text
        assert host.worker_deaths == 0
        assert host.wait_for_workers(WAIT)
