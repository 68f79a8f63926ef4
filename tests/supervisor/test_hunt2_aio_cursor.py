"""``EventStream.cursor`` is where a reader that leaves (``break``) goes on from: the seq
of the last event it was handed. It used to jump to the end of each batch the stream
read from the session, so a reader resuming from it lost the batch's other events."""

from __future__ import annotations

import asyncio

from actors import AgentTemplate
from supervisor import AsyncAgentHost, EventStream
from tests.supervisor.host_helpers import WAIT, HostFactory


async def take(stream: EventStream, count: int) -> list[int]:
    """The seqs of the stream's next ``count`` events (bounded)."""
    seqs = []
    async with asyncio.timeout(WAIT):
        async for event in stream:
            seqs.append(event.seq)
            if len(seqs) == count:
                break
    return seqs


def test_a_reader_resuming_from_the_cursor_misses_nothing(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(AgentTemplate(model="echo"), "s")
        await ahost.send(sid, "one")
        await ahost.send(sid, "two")
        every = [e.seq for e in host.events(sid, since=0).events]
        assert len(every) >= 6
        first = ahost.events(sid, since=0)
        assert await take(first, 1) == every[:1]  # the stream read them all, handed out one
        assert first.cursor == every[0]
        await first.aclose()
        rest = ahost.events(sid, since=first.cursor)
        assert await take(rest, len(every) - 1) == every[1:]
        assert rest.cursor == every[-1]
        await rest.aclose()

    asyncio.run(main())
