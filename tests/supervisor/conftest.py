"""Fixtures of the host tests: every host test runs in each of ``MODES``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.cluster_helpers import Cluster
from tests.supervisor.host_helpers import MODES, Fifo, HostFactory, host_options


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Where the test's hosts run their sessions (see ``host_helpers.MODES``); a test may
    narrow it with ``thread_only`` or ``xfail_in_process``."""
    return str(request.param)


@pytest.fixture
def make_host(mode: str) -> Iterator[HostFactory]:
    """Build hosts in ``mode`` (a ``MemoryCheckpointStore`` unless ``store=`` is given; other
    keyword arguments override the mode's); shut all down after the test."""
    hosts: list[AgentHost] = []

    def _make(**kwargs: Any) -> AgentHost:
        kwargs.setdefault("store", MemoryCheckpointStore())
        host = AgentHost(**{**host_options(mode), **kwargs})
        hosts.append(host)
        return host

    yield _make
    for host in hosts:
        host.shutdown()


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Fifo]:
    """A ``Fifo`` in the test's directory, opened for every reader at the end."""
    gate = Fifo(tmp_path / "gate")
    yield gate
    gate.close()


@pytest.fixture
def cluster(pg_dsn: str, pg_schema: str) -> Iterator[Cluster]:
    """Hosts as nodes of one cluster on the test's own schema (``cluster_helpers``); all
    shut down, and their stores closed, after the test."""
    made = Cluster(pg_dsn, pg_schema)
    yield made
    made.close()
