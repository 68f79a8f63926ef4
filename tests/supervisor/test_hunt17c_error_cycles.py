"""A call that fails leaves its error out of any reference cycle: a store's error too.

An error's traceback holds the frames it went through, with their callers and locals. A
frame there that holds the error itself (or what holds it) makes a cycle that only the
cyclic collector frees, with every frame of the traceback. Fixed: ``raise_tamed``
(``_outcome.py``: a checkpoint's save that failed, raised as is or as a ``CallAborted``)
and ``_reraise`` (``_incarnations.py``: a session's start that failed) held the error they
raised in a local; ``_reraise`` also raised the start's error in the ``except`` that
caught its ``ChildStartError``, which made the wrapper the error's hidden ``__context__``
while the wrapper holds the error. In process mode ``SessionLink._submit``'s ``settled``
and ``SessionLink._call`` (``workers/_proxy.py``) held the error and the worker's reply,
which holds it.

A blocking call: in thread mode pykka's ``ActorRef.ask(block=True)`` frame held its reply
(``_thread_runtime.call``; a supervisor's ``start_child`` too, ``handle.py``), and
``actors._mailbox.Reply.get``'s the error it raised; in process mode ``Reply.result``'s
(``workers/_client.py``) held the reply, and ``WorkerClient.wait``'s too. A save that fails
in ``on_reply`` (``finish_send``) has in its traceback the frame that caught it
(``Reply._deliver``) and, through it, every frame of the thread delivering the reply, each
of which held the reply (``_deliver_entry``, ``_deliver``, ``_drain``, ``_dispatch``, and on
a caller's thread ``_await`` and ``ask``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from actors import Snapshot
from supervisor import (
    AgentHost,
    AsyncAgentHost,
    CallAborted,
    CheckpointInfo,
    ChildStartError,
    MemoryCheckpointStore,
)
from supervisor._incarnations import _reraise
from tests.supervisor.host_helpers import (
    CyclicGarbage,
    FlakyModel,
    HostFactory,
    template,
)

_CALL_PARTS = (Future, asyncio.Future, BaseException)


class _SaveFails(MemoryCheckpointStore):
    """A store whose ``save`` raises ``failure("the disk is gone")`` once it is set."""

    failure: type[BaseException] | None = None

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        if self.failure is not None:
            raise self.failure("the disk is gone")
        return super().save(snapshot)


def _failure_of(error: BaseException) -> str:
    """What a test compares: the error's type and message, or its type and its cause's."""
    cause = error.__cause__
    if cause is None:
        return f"{type(error).__name__}: {error}"
    return f"{type(error).__name__} from {type(cause).__name__}: {cause}"


def _assert_fails_without_a_cycle(
    host: AgentHost, sid: str, call: str, store: _SaveFails, expected: str
) -> None:
    """``call`` (``checkpoint`` or ``send``, awaited) fails with ``expected`` while the
    store's saves fail, each time, and leaves no cycle after the first time."""
    ahost = AsyncAgentHost(host)

    async def fail() -> str:
        try:
            if call == "send":
                await ahost.send(sid, "hello")
            else:
                await ahost.checkpoint(sid)
        except (OSError, CallAborted) as exc:
            return _failure_of(exc)
        return "no error"

    try:
        assert asyncio.run(fail()) == expected  # the loop's and the route's first use
        with CyclicGarbage(_CALL_PARTS) as garbage:
            results = [asyncio.run(fail()) for _ in range(3)]
    finally:
        store.failure = None
    assert results == [expected] * 3
    assert garbage.names == []
    assert host.send(sid, "after").content == "echo: after"  # the session went on


def test_an_awaited_send_whose_save_fails_leaves_no_garbage_cycle(
    make_host: HostFactory,
) -> None:
    """The checkpoint of a turn fails: the store's error reaches the task as it was raised
    (the turn is rolled back, the session goes on), and neither it nor the call's future is
    left in a cycle (``raise_tamed``'s frame held it). (A ``checkpoint`` whose save fails:
    ``test_hunt16a_aio_error_cycle``.)"""
    store = _SaveFails()
    host = make_host(store=store)
    sid = host.start_session(template())
    store.failure = OSError
    _assert_fails_without_a_cycle(host, sid, "send", store, "OSError: the disk is gone")


@pytest.mark.parametrize("call", ["checkpoint", "send"])
def test_a_save_that_exits_fails_the_awaited_call_without_a_cycle(call: str) -> None:
    """A store's ``SystemExit`` off the main thread: the call fails with a ``CallAborted``
    caused by it (``raise_tamed``), and neither is left in a cycle."""
    store = _SaveFails()
    with AgentHost(store=store) as host:
        sid = host.start_session(template())
        store.failure = SystemExit
        expected = "CallAborted from SystemExit: the disk is gone"
        _assert_fails_without_a_cycle(host, sid, call, store, expected)


def test_a_blocking_send_that_fails_leaves_no_garbage_cycle(make_host: HostFactory) -> None:
    """``host.send`` whose model fails raises the model's error (by type name: in process
    mode it comes back as its own type too), and leaves no cycle after the first time."""
    host = make_host()
    sid = host.start_session(template(model=FlakyModel()))

    def fail() -> str:
        try:
            host.send(sid, "!fail now")
        except Exception as exc:
            return type(exc).__name__
        return "no error"

    assert fail() == "ModelDown"
    with CyclicGarbage(_CALL_PARTS) as garbage:
        results = [fail() for _ in range(3)]
    assert results == ["ModelDown"] * 3
    assert garbage.names == []


def test_a_blocking_send_whose_save_fails_leaves_no_garbage_cycle(make_host: HostFactory) -> None:
    """``host.send`` whose turn's checkpoint cannot be saved raises the store's error (the
    turn is rolled back, the session goes on), and leaves no cycle after the first time.
    (In process mode the caller's own thread delivers the reply, and saves there.)"""
    store = _SaveFails()
    host = make_host(store=store)
    sid = host.start_session(template())

    def fail() -> str:
        try:
            host.send(sid, "hello")
        except OSError as exc:
            return _failure_of(exc)
        return "no error"

    store.failure = OSError
    try:
        assert fail() == "OSError: the disk is gone"
        with CyclicGarbage(_CALL_PARTS) as garbage:
            results = [fail() for _ in range(3)]
    finally:
        store.failure = None
    assert results == ["OSError: the disk is gone"] * 3
    assert garbage.names == []
    assert host.send(sid, "after").content == "echo: after"


def _failed_start(cause: Callable[[], BaseException]) -> None:
    """Raise a ``ChildStartError`` caused by ``cause()``, as a supervisor does, and hand it
    to ``_reraise`` as ``Incarnations`` does (in the ``except`` that caught it). (No frame
    here holds the error in a local once it is raised: that would be a cycle of its own.)"""
    try:
        try:
            raise cause()
        except BaseException as exc:
            raise ChildStartError("s1", exc) from exc
    except ChildStartError as err:
        _reraise(err)


def _raised_in(error: BaseException) -> str:
    """The name of the function that raised ``error`` first (its traceback's last frame)."""
    trace = error.__traceback__
    assert trace is not None
    while trace.tb_next is not None:
        trace = trace.tb_next
    return trace.tb_frame.f_code.co_name


def test_a_failed_starts_error_is_raised_as_it_came_and_without_a_cycle() -> None:
    """The start's own error is raised (not its ``ChildStartError``), with the cause and
    context it came with (none here), its traceback still going down to where it was
    raised; nothing is left in a cycle (``_reraise`` held the error in a local, and made
    the ``ChildStartError``, which holds it, its hidden ``__context__``)."""

    def fail() -> tuple[str, object, object, bool, str]:
        try:
            _failed_start(lambda: LookupError("no such model"))
        except LookupError as exc:
            return (
                _failure_of(exc),
                exc.__cause__,
                exc.__context__,
                exc.__suppress_context__,
                _raised_in(exc),
            )
        return ("no error", None, None, False, "")

    expected = ("LookupError: no such model", None, None, True, "_failed_start")
    assert fail() == expected
    with CyclicGarbage((BaseException,)) as garbage:
        results = [fail() for _ in range(3)]
    assert results == [expected] * 3
    assert garbage.names == []


def test_a_start_that_exits_raises_its_child_start_error_without_a_cycle() -> None:
    """A start that raised a ``SystemExit`` stays wrapped in its ``ChildStartError`` (it
    must not end the caller's thread), caused by it; nothing is left in a cycle."""

    def fail() -> str:
        try:
            _failed_start(lambda: SystemExit(3))
        except ChildStartError as exc:
            return _failure_of(exc)
        return "no error"

    assert fail() == "ChildStartError from SystemExit: 3"
    with CyclicGarbage((BaseException,)) as garbage:
        results = [fail() for _ in range(3)]
    assert results == ["ChildStartError from SystemExit: 3"] * 3
    assert garbage.names == []
