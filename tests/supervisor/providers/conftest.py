"""Fixtures of the host tests of the provider adapters: every test runs in each mode
(``mode``, ``make_host`` from the parent conftest) and for each adapter (``flavour``)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor import AgentHost
from tests.providers.flavours import flavour, make_adapter, server
from tests.supervisor.host_helpers import HostFactory

__all__ = ["flavour", "make_adapter", "make_provider_host", "server"]


@pytest.fixture
def make_provider_host(make_host: HostFactory, mode: str) -> HostFactory:
    """``make_host`` with one worker in process modes: each worker imports the SDK once,
    which is most of the cost of a process-mode test here."""

    def make(**kwargs: Any) -> AgentHost:
        if mode != "thread":
            kwargs.setdefault("workers", 1)
        return make_host(**kwargs)

    return make
