"""Hunt 17i: an event stream open on a host that shuts down ends after the session's last event.

``AsyncAgentHost.events`` ends once the session's stop is over (its ``when_stopped``
watchers). ``stop_session`` and a move call them once the session's copy has ended
(hunt 17e), but a shutdown called them as it marked each session stopped, after its
final checkpoint and before it stopped the copies: what a copy published as it was
shut down (a plugin's failing ``session_end`` is a ``plugin_error``) came after the
stream had ended.

As in hunt 17e, another watcher of the session's stop holds the stopping thread until
the stream ended (bounded by ``WAIT``): the stream ended before the last event whenever
its loop was faster than the shutting-down thread.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from actors import Event, Plugin, PluginContext
from supervisor import AgentHost, AsyncAgentHost, EventStream, MemoryCheckpointStore
from tests.supervisor.host_helpers import WAIT, Fifo, HostFactory, template
from tests.supervisor.stop_helpers import FailingEnd, HeldStop


class _StuckEnd(Plugin):
    """``session_end`` waits for a byte of the fifo at ``path`` (a cleanup stuck on a dead
    remote), past the host's ``call_timeout``. Picklable, for worker processes."""

    name = "stuck_end"

    def __init__(self, path: Path) -> None:
        self.path = path

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        with self.path.open("rb") as gate:
            gate.read(1)


async def _read_through_shutdown(host: AgentHost, session_id: str) -> list[Event]:
    """Every event of the session's stream (from its start) once ``host.shutdown()`` (on a
    thread) stopped it: the stream must end by itself."""
    stream: EventStream = AsyncAgentHost(host).events(session_id, since=0)
    events = [await asyncio.wait_for(stream.__anext__(), WAIT)]  # open, and read
    held = HeldStop(host, session_id)
    try:
        shutting = asyncio.ensure_future(asyncio.to_thread(host.shutdown))
        async with asyncio.timeout(WAIT):
            events.extend([event async for event in stream])
        held.ended.set()
        await asyncio.wait_for(shutting, WAIT)
    finally:
        held.close()
        await stream.aclose()
    return events


def test_a_stream_open_at_shutdown_ends_after_the_sessions_last_event(
    make_host: HostFactory,
) -> None:
    store = MemoryCheckpointStore()
    host = make_host(call_timeout=WAIT, store=store)
    sid = host.start_session(template(plugins=[FailingEnd()]))
    host.send(sid, "hello")
    saved = len(store.list(sid))
    events = asyncio.run(_read_through_shutdown(host, sid))
    types = [event.type for event in events]
    assert types[-1] == "plugin_error", types  # was: the stream ended before the copy's end
    assert events[-1].data["plugin"] == "failing_end"
    assert events[-1].data["hook"] == "session_end"
    assert types.count("plugin_error") == 1
    seqs = [event.seq for event in events]
    assert seqs == sorted(seqs)  # nothing read twice, nothing out of order
    assert len(store.list(sid)) == saved + 1  # the final checkpoint was still taken


def test_a_stream_ends_at_shutdown_though_the_sessions_end_is_stuck(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host(call_timeout=0.5)
    sid = host.start_session(template(plugins=[_StuckEnd(fifo.path)]))
    host.send(sid, "hello")

    async def read() -> list[Event]:
        stream: EventStream = AsyncAgentHost(host).events(sid, since=0)
        events = [await asyncio.wait_for(stream.__anext__(), WAIT)]
        shutting = asyncio.ensure_future(asyncio.to_thread(host.shutdown))
        try:
            async with asyncio.timeout(WAIT):  # the stuck session_end is abandoned
                events.extend([event async for event in stream])
        finally:
            fifo.release()
            await asyncio.wait_for(shutting, WAIT)
            await stream.aclose()
        return events

    events = asyncio.run(read())
    assert events[-1].type == "turn_finished", [event.type for event in events]


def test_shutdown_tells_every_watcher_of_a_sessions_stop_once(make_host: HostFactory) -> None:
    host = make_host(call_timeout=WAIT)
    sids = [host.start_session(template(plugins=[FailingEnd()])) for _ in range(3)]
    calls: dict[str, int] = dict.fromkeys(sids, 0)

    def watcher(sid: str) -> None:
        calls[sid] += 1

    watches = [host.futures.watch(s, lambda _e: None, functools.partial(watcher, s)) for s in sids]
    host.shutdown()
    assert calls == dict.fromkeys(sids, 1)
    host.shutdown()  # a second shutdown calls none again
    assert calls == dict.fromkeys(sids, 1)
    for watch in watches:
        watch.close()
