"""An awaited call that fails leaves nothing in a reference cycle.

A failed call's future holds its exception, the exception its traceback, and the
traceback the frames it went through, with their callers (``f_back``) and locals. Three
such frames held the future: ``wait_future``'s (which raised the error while ``future``
was its local), the helper thread's work of ``_after_lookup`` and ``NonBlockingCalls.helper``
(the caller of ``outcome_of``, whose closure held the future), and ``_with_record``'s (the
future it failed was its local); ``_off_the_loop`` held the executor's future that failed
an ``EventStream``'s subscription. So every failed call (a ``SessionNotFound`` a gateway
answers with a 404, a model's error, a duplicate ``start_session``) left its future,
exception and every frame of the traceback to the cyclic collector, in the oldest
generation for a call that outlived a young collection, as the successful calls no longer
do (``test_host_aio.test_awaited_calls_leave_no_garbage_cycle``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future

import pytest

from actors import Snapshot
from supervisor import AgentHost, AsyncAgentHost, CheckpointInfo, MemoryCheckpointStore
from supervisor.aio import wait_future
from tests.supervisor.host_helpers import (
    CyclicGarbage,
    FlakyModel,
    HostFactory,
    template,
)

_CALL_PARTS = (Future, asyncio.Future, BaseException)

Call = Callable[[AsyncAgentHost, str], Awaitable[object]]

CALLS: dict[str, Call] = {
    "send to nobody": lambda ahost, sid: ahost.send("nobody", "hello"),
    "history of nobody": lambda ahost, sid: ahost.history("nobody"),
    "stop nobody": lambda ahost, sid: ahost.stop_session("nobody"),
    "hibernate nobody": lambda ahost, sid: ahost.hibernate("nobody"),
    "steer nobody": lambda ahost, sid: ahost.steer("nobody", "left"),
    "start a duplicate": lambda ahost, sid: ahost.start_session(template(), session_id=sid),
    "resume nobody": lambda ahost, sid: ahost.resume("nobody", template()),
    "events of nobody": lambda ahost, sid: anext(ahost.events("nobody")),
}

EXPECTED = {
    "send to nobody": "SessionNotFound",
    "history of nobody": "SessionNotFound",
    "stop nobody": "SessionNotFound",
    "hibernate nobody": "SessionNotFound",
    "steer nobody": "SessionNotFound",
    "start a duplicate": "SessionAlreadyExists",
    "resume nobody": "CheckpointNotFound",
    "events of nobody": "SessionNotFound",
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_failed_awaited_call_leaves_no_garbage_cycle(make_host: HostFactory, name: str) -> None:
    _assert_no_cycle(make_host, CALLS[name], EXPECTED[name])


def test_a_models_error_awaited_leaves_no_garbage_cycle(make_host: HostFactory) -> None:
    """In process mode ``SessionLink._submit``'s ``settled`` raised the worker reply's
    error to read it (``Reply.result``, whose frame held the reply), on the thread that
    settled the reply (``Reply._settle``'s frame held the error): it reads it now
    (``Reply.exception``)."""
    _assert_no_cycle(make_host, lambda ahost, sid: ahost.send(sid, "!fail now"), "ModelDown")


def _assert_no_cycle(make_host: HostFactory, call: Call, expected: str) -> None:
    """``call`` fails with ``expected`` (by type name: in process mode a model's error
    comes back as its own type too) and, after the first time, leaves no cycle."""
    host = make_host()
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template(model=FlakyModel()))

    async def fail() -> str:
        try:
            await call(ahost, sid)
        except Exception as exc:
            return type(exc).__name__
        return "no error"

    assert asyncio.run(fail()) == expected  # the loop's and the route's first use
    with CyclicGarbage(_CALL_PARTS) as garbage:
        results = [asyncio.run(fail()) for _ in range(3)]
    assert results == [expected] * 3
    assert garbage.names == []
    assert host.send(sid, "after").content == "echo: after"  # the session went on


def test_wait_future_raises_a_futures_error_without_a_cycle() -> None:
    """The same for any future ``wait_future`` awaits, with the error's type and message."""

    def failed() -> Future[str]:  # (a local of ``fail`` would make a cycle of its own)
        future: Future[str] = Future()
        future.set_exception(LookupError("no such thing"))
        return future

    async def fail() -> str:
        try:
            await wait_future(failed())
        except LookupError as exc:
            return str(exc)
        return "no error"

    assert asyncio.run(fail()) == "no such thing"
    with CyclicGarbage(_CALL_PARTS) as garbage:
        assert [asyncio.run(fail()) for _ in range(3)] == ["no such thing"] * 3
    assert garbage.names == []


class _BrokenStore(MemoryCheckpointStore):
    """A store whose reads (``load``) and writes (``save``) fail once ``broken`` is set."""

    broken = False

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        if self.broken:
            raise OSError("the disk is gone")
        return super().load(session_id, checkpoint_id)

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.broken:
            raise OSError("the disk is gone")
        return super().save(snapshot)


STORE_CALLS: dict[str, Call] = {
    "history of a hibernated session": lambda ahost, sid: ahost.history(sid),
    "checkpoint of a hibernated session": lambda ahost, sid: ahost.checkpoint(sid),
    "send to a hibernated session": lambda ahost, sid: ahost.send(sid, "wake up"),
}


@pytest.mark.parametrize("name", sorted(STORE_CALLS))
def test_a_store_error_of_an_awaited_call_leaves_no_garbage_cycle(name: str) -> None:
    """A hibernated session whose checkpoint cannot be read: the call reading it (on a
    helper thread: ``_run_into``, ``_Exclusive._try_when_serving``) fails with the store's
    error, and neither the error nor the future is left in a cycle. (A ``send`` reactivates
    the session: ``Incarnations._reraise`` held the error in a local of a frame of its
    traceback, and made the ``ChildStartError``, which holds it, its hidden context; the
    supervisor's ``start_child`` waited in pykka's ``ask(block=True)``, whose frame held
    the reply, and ``actors._mailbox.Reply.get``'s frame held the error it raised.)"""
    store = _BrokenStore()
    with AgentHost(store=store) as host:
        ahost = AsyncAgentHost(host)
        sid = host.start_session(template())
        host.send(sid, "hello")
        assert host.hibernate(sid)
        store.broken = True
        call = STORE_CALLS[name]

        async def fail() -> str:
            try:
                await call(ahost, sid)
            except OSError as exc:
                return str(exc)
            return "no error"

        assert asyncio.run(fail()) == "the disk is gone"
        with CyclicGarbage(_CALL_PARTS) as garbage:
            results = [asyncio.run(fail()) for _ in range(3)]
        assert results == ["the disk is gone"] * 3
        assert garbage.names == []
        store.broken = False
        assert host.send(sid, "after").content == "echo: after"  # it comes back then


def test_a_failed_checkpoint_save_leaves_no_garbage_cycle(make_host: HostFactory) -> None:
    """A running session's ``checkpoint`` whose save fails (``_answer``, on the thread that
    completes the call): the store's error reaches the task, and neither it nor the call's
    future is left in a cycle. (``raise_tamed``, whose frame is in the error's traceback,
    held it as a local.)"""
    store = _BrokenStore()
    host = make_host(store=store)
    ahost = AsyncAgentHost(host)
    sid = host.start_session(template())

    async def fail() -> str:
        try:
            await ahost.checkpoint(sid)
        except OSError as exc:
            return str(exc)
        return "no error"

    store.broken = True
    try:
        assert asyncio.run(fail()) == "the disk is gone"
        with CyclicGarbage(_CALL_PARTS) as garbage:
            results = [asyncio.run(fail()) for _ in range(3)]
    finally:
        store.broken = False
    assert results == ["the disk is gone"] * 3
    assert garbage.names == []
    assert host.send(sid, "after").content == "echo: after"
