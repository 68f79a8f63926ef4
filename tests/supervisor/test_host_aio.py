"""``AsyncAgentHost``: the host's calls as coroutines, and a session's events as an async
iterator, in every mode. Each test runs its own event loop (``asyncio.run``)."""

from __future__ import annotations

import asyncio
import gc
import threading
from concurrent.futures import Future

import pytest

from actors import Event, Snapshot
from supervisor import (
    AgentHost,
    AsyncAgentHost,
    EventStream,
    MemoryCheckpointStore,
    SessionCrashed,
    SessionNotFound,
)
from supervisor._nonblocking import HELPERS
from tests.supervisor.host_helpers import (
    WAIT,
    CyclicGarbage,
    Fifo,
    FlakyModel,
    HostFactory,
    ModelDown,
    assert_threads_back,
    host_options,
    pairs,
    same_error,
    template,
)
from tests.supervisor.test_host_futures import held_session


async def next_of(stream: EventStream, type_: str) -> Event:
    """The stream's next event of ``type_`` (bounded)."""

    async def find() -> Event:
        async for event in stream:
            if event.type == type_:
                return event
        raise AssertionError(f"the stream ended before a {type_!r} event")

    return await asyncio.wait_for(find(), WAIT)


def test_calls_are_coroutines_with_the_blocking_calls_results(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(template(), "s1")
        answers = await asyncio.gather(*(ahost.send(sid, f"m{n}") for n in range(10)))
        assert [a.content for a in answers] == [f"echo: m{n}" for n in range(10)]
        assert [t for t, _ in pairs(await ahost.history(sid))] == [f"m{n}" for n in range(10)]
        assert (await ahost.checkpoint(sid, "mine")).label == "mine"
        await ahost.steer(sid, "be brief")  # injected before the next turn's user message
        assert (await ahost.send(sid, "steered")).content == "echo: steered"
        assert [t for t, _ in pairs(await ahost.history(sid))][-1] == "steered"
        assert [m.content for m in await ahost.history(sid)][-3] == "be brief"
        assert await ahost.hibernate(sid)
        assert (await ahost.send(sid, "awake")).content == "echo: awake"
        await ahost.stop_session(sid)
        assert await ahost.resume(sid, template()) == sid

    asyncio.run(main())
    assert [t for t, _ in pairs(host.store.load("s1").messages())][-1] == "awake"


def test_cancelling_the_awaiting_task_leaves_the_turn_to_complete_and_be_saved(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = held_session(host, fifo)

    async def main() -> None:
        stream = ahost.events(sid)
        running = asyncio.create_task(ahost.send(sid, "running"))
        await next_of(stream, "turn_started")
        queued = asyncio.create_task(ahost.send(sid, "queued"))
        await asyncio.sleep(0)  # one loop iteration: the task's first step makes its call
        running.cancel()
        queued.cancel()
        for task in (running, queued):
            with pytest.raises(asyncio.CancelledError):
                await task
        fifo.release(3)
        # Calls to a session complete in order: once this one answers, both are done.
        assert (await ahost.send(sid, "after")).content == "echo: after"
        await stream.aclose()

    asyncio.run(main())
    saved = pairs(host.store.load(sid).messages())
    assert saved == [
        ("running", "echo: running"),
        ("queued", "echo: queued"),
        ("after", "echo: after"),
    ]


def test_timeouts_and_errors_reach_the_awaiting_task_with_their_types(
    make_host: HostFactory, fifo: Fifo
) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    held = held_session(host, fifo)
    flaky = host.start_session(template(model=FlakyModel()))

    async def main() -> None:
        with pytest.raises(TimeoutError, match=r"did not answer within 0\.1 s"):
            await ahost.send(held, "slow", timeout=0.1)
        with pytest.raises(TimeoutError):  # asyncio's own, around a call queued behind it
            await asyncio.wait_for(ahost.send(held, "late"), 0.05)
        with pytest.raises(Exception) as failed:
            await ahost.send(flaky, "!fail please")
        assert same_error(failed.value, ModelDown)
        with pytest.raises(SessionCrashed):
            await ahost.send(flaky, "/exit_tool {}")
        with pytest.raises(SessionNotFound):
            await ahost.send("nobody", "hello")
        with pytest.raises(SessionNotFound):
            await ahost.history(flaky, tenant_id="another")
        with pytest.raises(TypeError, match="as a str"):
            await ahost.send(flaky, 42)  # type: ignore[arg-type]
        assert (await ahost.send(flaky, "fine")).content == "echo: fine"

    asyncio.run(main())
    fifo.release(2)  # the timed-out turn and the one queued behind it complete


def test_a_thousand_awaited_sends_leak_no_thread(mode: str) -> None:
    before = set(threading.enumerate())
    host = AgentHost(store=MemoryCheckpointStore(), **host_options(mode))
    ahost = AsyncAgentHost(host)
    sids = [host.start_session(template()) for _ in range(10)]
    idle = threading.active_count()
    peak = idle

    async def main() -> None:
        nonlocal peak
        for _ in range(4):  # in waves of 250, to sample the threads while calls are in flight
            wave = [
                asyncio.ensure_future(ahost.send(sid, f"m{n}")) for n in range(25) for sid in sids
            ]
            peak = max(peak, threading.active_count())
            assert all((a.content or "").startswith("echo: m") for a in await asyncio.gather(*wave))
            peak = max(peak, threading.active_count())

    asyncio.run(main())
    assert peak - idle <= 1 + HELPERS  # the call timer, and helpers at most: none per call
    assert all(len(host.history(sid)) == 200 for sid in sids)
    host.shutdown()
    assert_threads_back(before)


def test_events_stream_across_a_restart_and_end_when_the_session_stops(
    make_host: HostFactory,
) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())
    host.send(sid, "before")
    cursor = host.events(sid).cursor

    async def main() -> list[str]:
        seen: list[str] = []
        stream = ahost.events(sid, since=cursor)

        async def read() -> None:
            async for event in stream:
                seen.append(event.type)

        reader = asyncio.create_task(read())
        await ahost.send(sid, "one")
        host.kill(sid)
        await ahost.send(sid, "two")  # taken by the resumed incarnation
        await ahost.stop_session(sid)
        await asyncio.wait_for(reader, WAIT)  # ends by itself
        assert stream.missed == 0
        return seen

    seen = asyncio.run(main())
    turn = ["turn_started", "model_response", "turn_finished"]
    assert seen == [*turn, "crashed", "resumed", *turn]


def test_an_events_stream_counts_what_it_missed(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template(), event_buffer_size=4)
    for n in range(3):  # 9 events; the buffer keeps the last 4
        host.send(sid, f"m{n}")

    async def main() -> None:
        stream = ahost.events(sid, since=0)
        async with stream:
            first = await anext(stream)
            assert first.seq == 6
            assert stream.missed == 5
            assert [e.seq for e in await _take(stream, 3)] == [7, 8, 9]
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        with pytest.raises(SessionNotFound):
            await anext(ahost.events("nobody"))

    asyncio.run(main())


async def _take(stream: EventStream, count: int) -> list[Event]:
    return [await anext(stream) for _ in range(count)]


def test_aclose_from_another_task_ends_a_reader_waiting_for_events(
    make_host: HostFactory,
) -> None:
    """A disconnect handler closing the stream ends the ``async for`` that waits on it."""
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())

    async def main() -> list[str]:
        seen: list[str] = []
        stream = ahost.events(sid)
        turn_read = asyncio.Event()

        async def read() -> None:
            async for event in stream:
                seen.append(event.type)
                if event.type == "turn_finished":
                    turn_read.set()

        reader = asyncio.create_task(read())
        await ahost.send(sid, "one")
        await asyncio.wait_for(turn_read.wait(), WAIT)
        await stream.aclose()  # the reader now waits for the next event, or is about to
        await asyncio.wait_for(reader, WAIT)  # ends, instead of waiting for ever
        return seen

    assert asyncio.run(main()) == ["turn_started", "model_response", "turn_finished"]
    assert host.send(sid, "two").content == "echo: two"  # the session goes on


def test_a_stream_left_with_break_unsubscribes(make_host: HostFactory) -> None:
    """``async for ... break`` calls no ``aclose``: the stream, once dropped, must not stay
    subscribed (and be woken on every later event) for as long as the session runs."""
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())
    buffer = host._table.live(sid, None).events
    before = len(buffer._subscribers)

    async def main() -> list[str | None]:
        answers: list[str | None] = []
        for n in range(5):  # wait for each turn's end the natural way, then leave the loop
            cursor = host.events(sid).cursor
            sent = asyncio.ensure_future(ahost.send(sid, f"m{n}"))
            async for event in ahost.events(sid, since=cursor):
                if event.type == "turn_finished":
                    break
            answers.append((await sent).content)
        return answers

    assert asyncio.run(main()) == [f"echo: m{n}" for n in range(5)]
    gc.collect()  # (CPython frees them at once; a collection covers other interpreters)
    assert len(buffer._subscribers) == before
    assert host.send(sid, "after").content == "echo: after"  # nobody left to wake


def test_awaited_calls_leave_no_garbage_cycle() -> None:
    """An awaited call's futures (the host's and the loop's) and what it returned are freed
    once it is awaited, not left in a reference cycle for a full collection: the loop's
    future held the host's as its result while the host's held the loop's in a callback,
    and a checkpoint's snapshot with them."""
    with AgentHost(store=MemoryCheckpointStore()) as host:
        ahost = AsyncAgentHost(host)
        sid = host.start_session(template())

        async def calls() -> list[object]:
            answer = await ahost.send(sid, "hello")
            history = await ahost.history(sid)
            snapshot = await ahost.checkpoint(sid)
            return [answer.content, len(history), snapshot.session_id]

        assert asyncio.run(calls()) == ["echo: hello", 2, sid]  # the loop's first use
        with CyclicGarbage(_CALL_PARTS) as garbage:
            results = [asyncio.run(calls()) for _ in range(5)]
    assert results == [["echo: hello", 2 * n, sid] for n in range(2, 7)]
    assert garbage.names == []


_CALL_PARTS = (Future, asyncio.Future, Snapshot)
