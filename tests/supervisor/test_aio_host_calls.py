"""``AsyncAgentHost``'s listing, kill, store and whole-host calls: coroutines that return
and raise what the blocking ``AgentHost`` calls do, in every mode."""

from __future__ import annotations

import asyncio

import pytest

from supervisor import AgentHost, AsyncAgentHost, MemoryCheckpointStore, SessionNotFound
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import HostFactory, host_options, pairs, template, watch_events


def test_listing_and_session_info_answer_as_the_host_does(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(template(), "a1", tenant_id="acme")
        await ahost.start_session(template(), "b1", tenant_id="beta")
        await ahost.send(sid, "hello")
        listed = await ahost.list_sessions("acme")
        assert [(i.session_id, i.status) for i in listed] == [("a1", "active")]
        assert sorted(i.session_id for i in await ahost.list_sessions()) == ["a1", "b1"]
        info = await ahost.session_info(sid, tenant_id="acme")
        assert (info.session_id, info.tenant_id) == ("a1", "acme")
        assert info == host.session_info(sid)
        with pytest.raises(SessionNotFound):  # another tenant's session: as a missing one
            await ahost.session_info("b1", tenant_id="acme")
        with pytest.raises(SessionNotFound):
            await ahost.session_info("nobody")

    asyncio.run(main())


def test_latest_checkpoint_reads_the_store_and_keeps_tenants_apart(
    make_host: HostFactory,
) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(template(), "s1", tenant_id="acme")
        await ahost.send(sid, "remember me", tenant_id="acme")
        latest = await ahost.latest_checkpoint(sid, tenant_id="acme")
        assert latest is not None
        assert [t for t, _ in pairs(latest.messages())] == ["remember me"]
        with pytest.raises(SessionNotFound):
            await ahost.latest_checkpoint(sid, tenant_id="beta")

    asyncio.run(main())


def test_kill_is_a_crash_the_supervisor_recovers_from(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)

    async def main() -> None:
        sid = await ahost.start_session(template(), "s1")
        await ahost.send(sid, "before")
        waiter = watch_events(host, sid)
        assert await ahost.kill(sid, "testing") is True
        crashed = await asyncio.to_thread(waiter.wait_for, "crashed")
        assert "testing" in str(crashed.data)
        await asyncio.to_thread(waiter.wait_for, "resumed")
        assert (await ahost.send(sid, "after")).content == "echo: after"
        assert [t for t, _ in pairs(await ahost.history(sid))] == ["before", "after"]
        with pytest.raises(SessionNotFound):
            await ahost.kill("nobody")

    asyncio.run(main())


def test_whole_host_calls_run_off_the_loop(mode: str) -> None:
    store, clock = MemoryCheckpointStore(), FakeClock(100.0)
    options = host_options(mode)
    with AgentHost(
        store=store, hibernate_after_ms=1000, auto_hibernate=False, clock=clock, **options
    ) as first:
        ahost = AsyncAgentHost(first)

        async def run_first() -> None:
            assert await ahost.wait_for_workers(30) is True
            sid = await ahost.start_session(template(), "idle")
            await ahost.send(sid, "zzz")
            assert await ahost.hibernate_idle() == []  # not idle long enough
            clock.now += 1.5
            assert await ahost.hibernate_idle() == [sid]
            assert [i.status for i in await ahost.list_sessions()] == ["hibernated"]

        asyncio.run(run_first())
    with AgentHost(store=store, **options) as second:
        ahost = AsyncAgentHost(second)

        async def run_second() -> None:
            assert await ahost.resume_all(template()) == ["idle"]
            assert [t for t, _ in pairs(await ahost.history("idle"))] == ["zzz"]

        asyncio.run(run_second())


def test_stop_without_a_final_checkpoint_in_every_form(make_host: HostFactory) -> None:
    host = make_host()
    ahost = AsyncAgentHost(host)
    for sid in ("blocking", "future", "awaited"):
        host.start_session(template(), sid)
        host.send(sid, "hi")
    saved = {sid: [i.checkpoint_id for i in host.store.list(sid)] for sid in host.store.sessions()}

    host.stop_session("blocking", checkpoint=False)
    host.futures.stop_session("future", checkpoint=False).result(30)
    asyncio.run(ahost.stop_session("awaited", checkpoint=False))

    assert host.list_sessions() == []
    for sid, ids in saved.items():  # no final checkpoint was added
        assert [i.checkpoint_id for i in host.store.list(sid)] == ids
    with pytest.raises(TypeError, match="checkpoint must be True or False"):
        host.futures.stop_session("future", checkpoint=1)  # type: ignore[arg-type]
