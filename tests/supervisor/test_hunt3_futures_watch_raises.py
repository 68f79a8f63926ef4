"""An ``on_stopped`` callback of ``host.futures.watch`` that raises is logged and skipped,
as an event subscriber that raises is. It used to propagate out of the stop itself:
``stop_session`` raised the callback's error, the other watchers of the session (the
``AsyncAgentHost`` event streams of other readers) were never told and waited for
ever, and the session was left listed as stopped instead of being forgotten."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from actors import Event
from supervisor import AsyncAgentHost
from tests.supervisor.host_helpers import WAIT, HostFactory, template


def test_an_on_stopped_that_raises_harms_neither_the_stop_nor_the_other_watchers(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())
    told = threading.Event()

    def ignore(_: Event) -> None:
        pass

    def broken() -> None:
        raise ValueError("this watcher is broken")

    host.futures.watch(sid, ignore, broken)
    host.futures.watch(sid, ignore, told.set)

    async def main() -> list[str]:
        seen: list[str] = []

        async def read() -> None:
            async for event in ahost.events(sid):
                seen.append(event.type)

        reader = asyncio.create_task(read())
        await ahost.send(sid, "hello")
        await ahost.stop_session(sid)  # raised the watcher's ValueError
        await asyncio.wait_for(reader, WAIT)  # ends: it was told of the stop
        return seen

    assert asyncio.run(main()) == ["turn_started", "model_response", "turn_finished"]
    assert told.wait(WAIT)
    assert host.list_sessions() == []
    assert any(
        isinstance(r.exc_info[1], ValueError)
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.exc_info
    )
