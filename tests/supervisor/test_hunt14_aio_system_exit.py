"""A ``SystemExit`` or ``KeyboardInterrupt`` raised by a checkpoint store on a host thread
fails the call that saved, as an ordinary ``CallAborted`` (a ``RuntimeError``) caused by
it; it never reaches an asyncio task as it is.

Found by a bug hunt: a store's ``SystemExit`` in the save of ``checkpoint``,
``hibernate`` or ``stop_session`` was set as is on the ``host.futures`` future, and
``AsyncAgentHost`` raised it in the awaiting task, which asyncio re-raises out of the
event loop: the whole server stopped. In process mode a turn's save raising it ended
the thread reading the worker's pipe: the call never resolved, and the worker (every
session on it) was killed at ``call_timeout``. In thread mode the save ran on the
session's thread and crashed the session (a ``KeyboardInterrupt`` there stops every
actor of the process). On the main thread a blocking call still raises them as they
are: there they mean "stop the program" (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

import pytest

from actors import Message, ScriptedModel, Snapshot, ToolCall, tool
from supervisor import (
    AgentHost,
    AsyncAgentHost,
    CallAborted,
    CheckpointInfo,
    MemoryCheckpointStore,
    SessionCrashed,
    wait_future,
)
from tests.supervisor.host_helpers import WAIT, HostFactory, template

EXITS = [SystemExit, KeyboardInterrupt]
EXIT_IDS = ["SystemExit", "KeyboardInterrupt"]


class ExitingStore(MemoryCheckpointStore):
    """Every ``save`` (and ``load``, if ``loads`` too) raises ``exit`` while ``failing``."""

    def __init__(self, exit: type[BaseException]) -> None:
        super().__init__()
        self.exit = exit
        self.failing = False
        self.loads = False

    def save(self, snapshot: Snapshot, *args: Any, **kwargs: Any) -> CheckpointInfo:
        if self.failing:
            raise self.exit("the store gave up")
        return super().save(snapshot, *args, **kwargs)

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        if self.failing and self.loads:
            raise self.exit("the store gave up reading")
        return super().load(session_id, checkpoint_id)


def _aborted_by(error: BaseException | None, exit: type[BaseException]) -> CallAborted:
    """``error``, checked to be a ``CallAborted`` whose cause is the store's ``exit``."""
    assert isinstance(error, CallAborted), repr(error)
    assert isinstance(error, RuntimeError)
    assert isinstance(error.__cause__, exit)
    assert error.error is error.__cause__
    assert exit.__name__ in str(error)
    return error


CALLS: dict[str, Callable[[AsyncAgentHost, str], Coroutine[Any, Any, object]]] = {
    "send": lambda ahost, sid: ahost.send(sid, "lost", timeout=WAIT),
    "checkpoint": lambda ahost, sid: ahost.checkpoint(sid),
    "hibernate": lambda ahost, sid: ahost.hibernate(sid),
    "stop_session": lambda ahost, sid: ahost.stop_session(sid),
}


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
@pytest.mark.parametrize("call", list(CALLS))
def test_a_store_exit_fails_the_awaited_call_and_the_loop_goes_on(
    make_host: HostFactory, call: str, exit: type[BaseException]
) -> None:
    store = ExitingStore(exit)
    host = make_host(store=store)
    ahost = AsyncAgentHost(host)

    async def main() -> BaseException | None:
        sid = await ahost.start_session(template())
        other = await ahost.start_session(template())
        assert (await ahost.send(sid, "kept")).content == "echo: kept"
        store.failing = True
        task = asyncio.create_task(CALLS[call](ahost, sid))
        done, _ = await asyncio.wait([task], timeout=WAIT)
        assert done, f"{call} never resolved"
        store.failing = False
        # The same loop goes on, and so do the session and its neighbour.
        assert (await ahost.send(other, "next door")).content == "echo: next door"
        assert (await ahost.send(sid, "again", timeout=WAIT)).content == "echo: again"
        history = await ahost.history(sid)
        assert [m.content for m in history if m.role == "user"] == ["kept", "again"]
        return task.exception()

    try:
        error = asyncio.run(main())
    finally:
        store.failing = False  # the host's shutdown saves
    _aborted_by(error, exit)


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_a_store_exit_never_sits_on_a_futures_future(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    store = ExitingStore(exit)
    host = make_host(store=store)
    sid = host.start_session(template())
    assert host.send(sid, "kept").content == "echo: kept"
    store.failing = True
    for call in (host.futures.send, host.futures.checkpoint, host.futures.hibernate):
        argument = ("lost",) if call == host.futures.send else ()
        _aborted_by(call(sid, *argument).exception(WAIT), exit)
    store.failing = False
    assert host.futures.send(sid, "again").result(WAIT).content == "echo: again"


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_a_blocking_call_off_the_main_thread_gets_the_same_error(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    """A server's request thread calling ``host.send`` or ``host.checkpoint``: a bare
    ``SystemExit`` would have ended that thread silently."""
    store = ExitingStore(exit)
    host = make_host(store=store)
    sid = host.start_session(template())
    errors: list[BaseException | None] = []

    def on_a_thread() -> None:
        for call in (lambda: host.send(sid, "lost", timeout=WAIT), lambda: host.checkpoint(sid)):
            try:
                call()
            except BaseException as exc:  # what the thread's caller would see
                errors.append(exc)
            else:
                errors.append(None)

    store.failing = True
    thread = threading.Thread(target=on_a_thread)
    thread.start()
    thread.join(2 * WAIT + 1)
    assert not thread.is_alive()
    store.failing = False
    assert len(errors) == 2
    for error in errors:
        _aborted_by(error, exit)
    assert host.send(sid, "again", timeout=WAIT).content == "echo: again"


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_on_the_main_thread_a_blocking_checkpoint_keeps_the_exit(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    """Ctrl-C (or a SIGTERM handler's ``sys.exit``) lands on the main thread: a blocking
    call made there must not turn it into an error a ``except Exception`` would swallow."""
    assert threading.current_thread() is threading.main_thread()
    store = ExitingStore(exit)
    host = make_host(store=store)
    sid = host.start_session(template())
    store.failing = True
    with pytest.raises(exit):
        host.checkpoint(sid)
    store.failing = False
    assert host.checkpoint(sid).session_id == sid


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_an_exit_reading_the_store_reaches_no_task(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    """The calls ``AsyncAgentHost`` runs on an executor thread (``latest_checkpoint``) and
    on a helper thread (``resume``) read the store there."""
    store = ExitingStore(exit)
    host: AgentHost = make_host(store=store)
    ahost = AsyncAgentHost(host)

    async def main() -> list[CallAborted]:
        sid = await ahost.start_session(template())
        await ahost.send(sid, "kept")
        store.failing = store.loads = True
        errors = []
        with pytest.raises(CallAborted) as failed:
            await asyncio.wait_for(ahost.latest_checkpoint(sid), WAIT)
        errors.append(failed.value)
        store.failing = False
        await ahost.stop_session(sid)
        store.failing = True
        with pytest.raises(CallAborted) as failed:
            await asyncio.wait_for(ahost.resume(sid, template()), WAIT)
        errors.append(failed.value)
        store.failing = False
        assert await ahost.resume(sid, template()) == sid
        assert (await ahost.send(sid, "again")).content == "echo: again"
        return errors

    try:
        errors = asyncio.run(main())
    finally:
        store.failing = False
    for error in errors:
        _aborted_by(error, exit)


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_wait_future_turns_an_exit_into_call_aborted(exit: type[BaseException]) -> None:
    """``wait_future`` is public: a future of the application's own holding an exit."""
    future: Future[int] = Future()

    async def main() -> str:
        waiting = asyncio.create_task(wait_future(future))
        await asyncio.sleep(0)
        future.set_exception(exit("from elsewhere"))
        with pytest.raises(CallAborted) as failed:
            await asyncio.wait_for(waiting, WAIT)
        assert isinstance(failed.value.__cause__, exit)
        return "the loop went on"

    assert asyncio.run(main()) == "the loop went on"


@pytest.mark.parametrize("exit", EXITS, ids=EXIT_IDS)
def test_a_tools_exit_fails_only_its_turn_for_the_awaiting_task(
    make_host: HostFactory, exit: type[BaseException]
) -> None:
    """A tool raising an exit inside the turn crashes its session (it is resumed), as the
    blocking ``send`` says; the awaiting task gets ``SessionCrashed``, the loop goes on."""
    host = make_host()
    ahost = AsyncAgentHost(host)
    name = "exit_tool" if exit is SystemExit else "interrupt_tool"
    model = ScriptedModel([Message.assistant(None, (ToolCall("c1", name, {}),)), "unused"])

    async def main() -> None:
        sid = await ahost.start_session(template(model=model, tools=[interrupt_tool]))
        other = await ahost.start_session(template())
        with pytest.raises(SessionCrashed) as crashed:
            await asyncio.wait_for(ahost.send(sid, "go"), WAIT)
        assert exit.__name__ in str(crashed.value)
        assert (await ahost.send(other, "still here")).content == "echo: still here"

    asyncio.run(main())


@tool
def interrupt_tool() -> str:
    """Raise ``KeyboardInterrupt``, as a tool interrupted by hand would."""
    raise KeyboardInterrupt
