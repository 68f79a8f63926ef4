"""Hunt 17e: an event stream open on a node that loses its session ends with ``moved``.

``moved`` is the event a client needs to go and follow the session at its new owner. But
a node stopping a copy another node took over marked the session stopped, which tells its
open streams to end once they read what is there, before it stopped the copy and
published ``moved``: an ``AsyncAgentHost.events`` stream (and the gateway's SSE
``/events``, built on it) read the last turn's events and ended, without ``moved``.
``subscribe`` got it. A stopped session's other last events went the same way: what its
incarnation published as it was stopped (a plugin's ``session_end`` failing is a
``plugin_error``) came after the stream had ended.

Each stream is read on the loop while another watcher of the session's stop holds the
stopping thread until the stream ended (bounded by ``WAIT``): the stream ended at the
stop, before the last event, whenever its loop was faster than the stopping thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from actors import Event
from supervisor import AgentHost, AsyncAgentHost, EventStream
from tests.supervisor.cluster_helpers import (
    FENCE_TTL,
    FENCED,
    Cluster,
    FakeClock,
    expire,
    quiesce,
)
from tests.supervisor.host_helpers import WAIT, HostFactory, template
from tests.supervisor.stop_helpers import FailingEnd, HeldStop

TTL = FENCE_TTL


async def _read_to_the_end(
    host: AgentHost, session_id: str, stop: Callable[[], object]
) -> list[Event]:
    """Every event of the session's stream on ``host`` (from its start) once ``stop()``
    (on a thread) stopped the session there: the stream must end by itself."""
    stream: EventStream = AsyncAgentHost(host).events(session_id, since=0)
    events = [await asyncio.wait_for(stream.__anext__(), WAIT)]  # open, and read
    held = HeldStop(host, session_id)  # watches the stop after the stream: called after it
    try:
        stopping = asyncio.ensure_future(asyncio.to_thread(stop))
        async with asyncio.timeout(WAIT):
            events.extend([event async for event in stream])
        held.ended.set()
        await asyncio.wait_for(stopping, WAIT)
    finally:
        held.close()
        await stream.aclose()
    return events


def _lost_at_renewal(cluster: Cluster) -> tuple[AgentHost, Callable[[], object]]:
    """Node ``a`` runs ``s``, fences itself, ``b`` takes ``s`` over; the callable renews
    ``a``'s lease, which finds ``s`` claimed elsewhere: ``a``'s housekeeping stops its copy."""
    clock = FakeClock()
    a, b = cluster.node("a", ttl=TTL, clock=clock), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")

    def lose() -> object:
        clock.advance(FENCED)
        expire(a.store, "a")
        assert b.send("s", "two").content == "echo: two"
        assert a.node is not None
        return a.node.renew()

    return a, lose


def _lost_at_a_refused_save(cluster: Cluster) -> tuple[AgentHost, Callable[[], object]]:
    """Node ``a`` runs ``s``; the database sees ``a`` dead (``a`` does not know) and ``b``
    takes ``s`` over; the callable sends ``a`` a turn, whose save is refused: ``a`` stops
    its copy on the caller's thread."""
    a, b = cluster.node("a"), cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")

    def lose() -> object:
        quiesce(a)
        expire(a.store, "a")
        assert b.send("s", "two").content == "echo: two"
        with pytest.raises(Exception, match="no longer owned by node 'a'"):
            a.send("s", "late")
        return None

    return a, lose


LOSSES = {"renewal": _lost_at_renewal, "refused save": _lost_at_a_refused_save}


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_a_stream_open_on_the_node_that_lost_the_session_ends_with_moved(
    cluster: Cluster, loss: str
) -> None:
    a, lose = LOSSES[loss](cluster)
    events = asyncio.run(_read_to_the_end(a, "s", lose))
    types = [event.type for event in events]
    assert types[-1] == "moved", types  # was: the stream ended after a's last turn event
    assert types.count("moved") == 1
    assert events[-1].data["reason"] == "another node owns it now"
    seqs = [event.seq for event in events]
    assert seqs == sorted(seqs)  # nothing read twice, nothing out of order


def test_a_stream_of_a_stopped_session_ends_after_its_last_event(make_host: HostFactory) -> None:
    host = make_host(call_timeout=WAIT)
    sid = host.start_session(template(plugins=[FailingEnd()]))
    host.send(sid, "hello")
    events = asyncio.run(_read_to_the_end(host, sid, lambda: host.stop_session(sid)))
    types = [event.type for event in events]
    assert types[-1] == "plugin_error", types  # was: the stream ended at the stop, before
    assert events[-1].data["plugin"] == "failing_end"  # the stopping incarnation published it
    assert events[-1].data["hook"] == "session_end"
