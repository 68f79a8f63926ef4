"""``AsyncAgentHost``: an ``AgentHost`` for asyncio programs (ASGI apps, aiohttp, FastAPI).

Every coroutine is a ``host.futures`` call awaited on the running event loop:
the call's completion is handed to the loop with ``loop.call_soon_threadsafe``
from whichever thread completed it, so no thread waits for a pending call
(no ``to_thread``, no executor). ``events`` follows a session's event stream
as an async iterator, woken the same way. On a cluster node, a call naming a
session the node does not hold first looks it up (a database read, and maybe a
take-over: a resume) on a thread, never on the loop.

Cancelling a task that awaits a call detaches that task only: the call goes
on (queued calls run in their turn), and its turn is checkpointed as usual.
To withdraw a call that has not started, use ``host.futures`` and ``cancel()``.

No coroutine here raises ``SystemExit`` or ``KeyboardInterrupt`` (a store's or a
plugin's, raised on a thread of the host): asyncio re-raises those two out of
the event loop, which would stop the whole application. The awaiting task gets a
``CallAborted`` (a ``RuntimeError``) caused by it instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Self, TypeVar, Unpack

from actors import AgentTemplate, Event, Message, Snapshot
from supervisor._futures import EventWatch
from supervisor._host_policy import check_since
from supervisor._host_record import SessionInfo
from supervisor._outcome import raise_tamed
from supervisor._session_attrs import SessionMetadata
from supervisor.errors import NodeFenced, OwnershipLost
from supervisor.host import AgentHost

__all__ = ["AsyncAgentHost", "EventStream", "wait_future"]

T = TypeVar("T")


async def wait_future(future: Future[T]) -> T:
    """Await a ``concurrent.futures.Future`` on the running loop without a waiting thread.

    Its outcome (result or exception, with its type) is passed to the loop with
    ``call_soon_threadsafe`` by the thread that resolves it. Cancelling the
    awaiting task leaves ``future`` alone: what it stands for goes on.

    The waiter only wakes the coroutine, and the exception is raised here, in the
    awaiting coroutine, not set on an asyncio future: asyncio refuses to hold a
    ``StopIteration`` (a model calling ``next`` on an exhausted iterator raises
    one), which left the awaiting task waiting forever. A coroutine cannot raise
    one either, so that one arrives as the ``RuntimeError`` Python makes of it,
    the ``StopIteration`` as its ``__cause__``. A ``StopAsyncIteration`` arrives
    the same way: raised as is, it would silently end the iteration of an
    ``__anext__`` awaiting the call. A ``SystemExit`` or ``KeyboardInterrupt``
    arrives as a ``CallAborted`` caused by it (see the module docstring). Every
    other exception arrives as is.

    Nothing of the call is left in a reference cycle once it is awaited: a waiter that
    held ``future`` as its result, while ``future``'s done-callback held the waiter, left
    both (and what they held) to a full collection; and a call that failed left its
    future and exception so (the exception's traceback holds this frame, which held the
    future, which holds the exception).
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def resolved(_: Future[T]) -> None:  # on the thread that resolved ``future``
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits any more
            loop.call_soon_threadsafe(_wake, waiter)

    future.add_done_callback(resolved)
    await waiter
    if future.cancelled():
        raise asyncio.CancelledError
    error = future.exception()
    if error is None:
        return future.result()
    # The traceback of what is raised here holds this frame: it must hold neither
    # ``future`` (which holds ``error``) nor ``error``, or each failed call is a cycle.
    del future
    try:
        with _no_exit("the awaited call"):
            if isinstance(error, StopAsyncIteration):
                raise RuntimeError("the call raised StopAsyncIteration") from error
            raise error
    finally:
        del error


@contextlib.contextmanager
def _no_exit(during: str) -> Iterator[None]:
    """Raise a ``SystemExit`` or ``KeyboardInterrupt`` raised inside (handed over from
    another thread) as a ``CallAborted`` caused by it; anything else as it is. A task
    raising one of those two stops its event loop."""
    try:
        yield
    except BaseException as exc:
        raise_tamed(exc, during)


async def _to_thread(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``asyncio.to_thread(call, ...)``, whose ``SystemExit`` or ``KeyboardInterrupt``
    arrives as a ``CallAborted`` (``_no_exit``)."""
    with _no_exit(getattr(call, "__qualname__", "the call")):
        return await asyncio.to_thread(call, *args, **kwargs)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # else the awaiting task was cancelled
        waiter.set_result(None)


class AsyncAgentHost:
    """The calls of ``host`` as coroutines, for code running in an asyncio event loop.

    Thread-safe, like the host it wraps: several loops may share one (each call
    is bridged to the loop that awaits it). The coroutines take the arguments
    of the ``AgentHost`` methods of the same names, return what they return and
    raise what they raise, with the same types; see ``HostFutures`` for what
    runs where. Cancelling an awaiting task detaches it; the call completes.

    The host is yours: shut it down (``await ahost.shutdown()``, or
    ``host.shutdown()`` from a thread) when the application stops.

    Args:
        host: The host to drive.
    """

    def __init__(self, host: AgentHost) -> None:
        self.host = host

    async def send(
        self,
        session_id: str,
        text: str,
        timeout: float | None = None,
        *,
        tenant_id: str | None = None,
        tag: str | None = None,
    ) -> Message:
        """``AgentHost.send``: the answer once the turn (and its checkpoint) is done."""
        return await wait_future(
            self.host.futures.send(session_id, text, timeout, tenant_id=tenant_id, tag=tag)
        )

    async def history(self, session_id: str, *, tenant_id: str | None = None) -> list[Message]:
        """``AgentHost.history``."""
        return await wait_future(self.host.futures.history(session_id, tenant_id=tenant_id))

    async def checkpoint(
        self, session_id: str, label: str | None = None, *, tenant_id: str | None = None
    ) -> Snapshot:
        """``AgentHost.checkpoint``: the snapshot, once saved."""
        return await wait_future(
            self.host.futures.checkpoint(session_id, label, tenant_id=tenant_id)
        )

    async def steer(self, session_id: str, text: str, *, tenant_id: str | None = None) -> None:
        """``AgentHost.steer``."""
        await wait_future(self.host.futures.steer(session_id, text, tenant_id=tenant_id))

    async def hibernate(self, session_id: str, *, tenant_id: str | None = None) -> bool:
        """``AgentHost.hibernate``."""
        return await wait_future(self.host.futures.hibernate(session_id, tenant_id=tenant_id))

    async def stop_session(
        self, session_id: str, *, tenant_id: str | None = None, checkpoint: bool = True
    ) -> None:
        """``AgentHost.stop_session``, after the calls to the session made before it."""
        await wait_future(
            self.host.futures.stop_session(session_id, tenant_id=tenant_id, checkpoint=checkpoint)
        )

    async def start_session(
        self,
        template: AgentTemplate,
        session_id: str | None = None,
        tenant_id: str = "default",
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str:
        """``AgentHost.start_session``; the session's id."""
        return await wait_future(
            self.host.futures.start_session(template, session_id, tenant_id, api_key, **attrs)
        )

    async def resume(
        self,
        session_id: str,
        template: AgentTemplate,
        checkpoint_id: str | None = None,
        *,
        tenant_id: str | None = None,
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str:
        """``AgentHost.resume``; the session's id."""
        return await wait_future(
            self.host.futures.resume(
                session_id, template, checkpoint_id, tenant_id=tenant_id, api_key=api_key, **attrs
            )
        )

    def events(
        self, session_id: str, since: int | None = None, *, tenant_id: str | None = None
    ) -> EventStream:
        """The session's events after cursor ``since`` (all it still holds if ``None``), then
        each new one as it is published, across restarts; the iteration ends once the
        session is stopped and its last events were read. See ``EventStream``.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``); raised
                by the first ``__anext__``.
            TypeError: ``since`` is neither an ``int`` nor ``None`` (here, at the call).
            NodeFenced: (a cluster node) the node fenced itself, as ``AgentHost.events``
                raises it: here, at the call, and by the first ``__anext__`` (which ends
                the stream) if it fenced itself meanwhile.
            OwnershipLost: (a cluster node) another node took the session over and the
                copy here is being stopped; raised by the first ``__anext__``.
        """
        cursor = check_since(since)
        node = self.host.node
        if node is not None:  # (a cheap read of the node's own state; the session's, later)
            node.check_serving()
        return EventStream(self.host, session_id, cursor, tenant_id)

    async def kill(
        self, session_id: str, reason: str = "killed", *, tenant_id: str | None = None
    ) -> bool:
        """``AgentHost.kill``: a crash; the supervisor resumes the session. False if no
        incarnation was serving (nothing was killed). On a cluster node, one it does not
        hold is looked up (and may be taken over) on an executor thread."""
        if self.host.futures.finds_at_once(session_id):
            return self.host.kill(session_id, reason, tenant_id=tenant_id)  # no user code
        return await _to_thread(self.host.kill, session_id, reason, tenant_id=tenant_id)

    async def list_sessions(self, tenant_id: str | None = None) -> list[SessionInfo]:
        """``AgentHost.list_sessions`` (the host's table, in memory: nothing waits)."""
        return self.host.list_sessions(tenant_id)

    async def session_info(self, session_id: str, *, tenant_id: str | None = None) -> SessionInfo:
        """``AgentHost.session_info`` (the host's table, in memory: nothing waits)."""
        return self.host.session_info(session_id, tenant_id=tenant_id)

    # The calls below read or write the store, or wait for many sessions at once: each
    # runs on a thread of asyncio's default executor (as asyncio runs file I/O), one
    # thread per call, not per session.

    async def latest_checkpoint(
        self, session_id: str, *, tenant_id: str | None = None
    ) -> Snapshot | None:
        """``AgentHost.latest_checkpoint``: a store read, on an executor thread."""
        return await _to_thread(self.host.latest_checkpoint, session_id, tenant_id=tenant_id)

    async def hibernate_idle(self) -> list[str]:
        """``AgentHost.hibernate_idle``, on an executor thread (it waits for each
        session's final checkpoint)."""
        return await _to_thread(self.host.hibernate_idle)

    async def resume_all(
        self, template: AgentTemplate | Callable[[str], AgentTemplate | None]
    ) -> list[str]:
        """``AgentHost.resume_all``, on an executor thread (it reads the store and starts
        every session)."""
        return await _to_thread(self.host.resume_all, template)

    async def wait_for_workers(self, timeout: float | None = None) -> bool:
        """``AgentHost.wait_for_workers``, on an executor thread. Cancelling the awaiting
        task leaves that thread waiting until ``timeout`` (or the workers serve): give one."""
        return await _to_thread(self.host.wait_for_workers, timeout)

    async def shutdown(self) -> None:
        """``AgentHost.shutdown`` on a thread of its own (it waits for every session)."""
        await _to_thread(self.host.shutdown)


class EventStream:
    """``async for event in ahost.events(sid, since=cursor)``: one session's events.

    Subscribes at the first ``__anext__`` (on the loop that iterates) and wakes
    with ``call_soon_threadsafe`` when the session publishes; no thread waits.
    Iterate it from one task. The stream ends (``StopAsyncIteration``) once the
    session is stopped or the host shut down; ``aclose()`` (or leaving an
    ``async with`` block) ends it early and unsubscribes, and so does dropping
    the last reference to it (an ``async for`` left with ``break``).

    On a cluster node, the first read answers as ``AgentHost.events`` does: fenced, or
    with the session lost to another node, it raises ``NodeFenced`` or ``OwnershipLost``
    and the stream ends (``cursor`` is unchanged: go on from it elsewhere). A stream read
    once goes on with the copy's events: when another node takes the session over, the
    node stops its copy once it learns of it (its first renewal after a fence, or a save
    refused), and that ends the stream.

    Attributes:
        cursor: The seq of the last event handed out (or read past: events the
            stream missed, or none published): pass it as ``since`` to a later
            ``events`` call to go on from here. Events read from the session but
            not handed out yet (a reader that left with ``break``) are after it.
        missed: How many events after the starting cursor this stream could not
            hand out (dropped from the session's full buffer before it read them,
            see ``actors.EventBatch.missed``). A reader that must see every
            event checks it, or gives the session a larger ``event_buffer_size``.
    """

    def __init__(
        self, host: AgentHost, session_id: str, since: int | None, tenant_id: str | None
    ) -> None:
        self.session_id = session_id
        self.cursor = since
        self.missed = 0
        self._read = since  # where the next read of the session's buffer starts
        self._host = host
        self._tenant_id = tenant_id
        self._ready: collections.deque[Event] = collections.deque()
        self._watch: EventWatch | None = None
        self._wake: asyncio.Event | None = None
        self._subscription: _Subscription | None = None
        self._freed: weakref.finalize[[], EventStream] | None = None  # ``_Subscription.drop``
        self._stopped = False
        self._closed = False
        self._serving = False  # the node passed ``_check_serving`` after the first read

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._ready:
                event = self._ready.popleft()
                self.cursor = event.seq if self._ready else self._read
                return event
            if self._closed:
                raise StopAsyncIteration
            wake = self._wake
            if wake is None:
                await self._open()
                continue  # closed meanwhile?
            wake.clear()
            stopped = self._stopped  # before reading: a stop's last events are in by then
            assert self._watch is not None
            batch = self._watch.since(self._read)
            if not self._serving:
                await self._check_serving()
            self._read = batch.cursor
            self.missed += batch.missed
            self._ready.extend(batch.events)
            if self._ready:
                continue
            self.cursor = batch.cursor  # nothing to hand out: read past
            if stopped:
                await self.aclose()
                raise StopAsyncIteration
            await wake.wait()

    async def _open(self) -> None:
        """Subscribe to the session (see ``HostFutures.watch``). A cluster node looks a
        session it does not hold up in the database, and may take it over: that runs on
        an executor thread, never on the loop (see ``HostFutures.finds_at_once``)."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        # The session's buffer and table hold the subscription, never the stream itself: a
        # stream its reader dropped (an ``async for`` left with ``break``, which calls no
        # ``aclose``) is freed, and then unsubscribed, instead of being woken on every later
        # event of the session for as long as the session runs.
        subscription = _Subscription(loop, wake, self)
        futures = self._host.futures
        subscribe = functools.partial(
            futures.watch,
            self.session_id,
            subscription.notify,
            subscription.stopped,
            tenant_id=self._tenant_id,
        )
        if futures.finds_at_once(self.session_id):
            watch = subscribe()
        else:  # a take-over may load a checkpoint (a store's ``SystemExit``: ``_no_exit``)
            with _no_exit("subscribing to the session's events"):
                watch = await _off_the_loop(loop, subscribe)
        subscription.watch = watch
        self._watch = watch
        self._subscription = subscription
        self._freed = weakref.finalize(self, subscription.drop)
        self._wake = wake
        if self._closed:  # ``aclose`` while it subscribed
            self._freed.detach()
            watch.close()

    async def _check_serving(self) -> None:
        """After the first read of the session's buffer: refuse it, and end the stream, if
        the host's node is fenced or lost the session (its copy here may lack the new
        owner's events). Passed, the session was this node's when it was read (as
        ``AgentHost.events`` reasons), and the stream then goes on with its events."""
        node = self._host.node
        if node is not None:
            try:
                node.check_serving(self.session_id)
            except (NodeFenced, OwnershipLost):
                await self.aclose()
                raise
        self._serving = True

    async def aclose(self) -> None:
        """End the stream now and unsubscribe (events already read are still handed out
        first). Idempotent.

        A task waiting in ``__anext__`` (another task's ``async for``) is woken and its
        iteration ends, so a disconnect handler can end a reader that waits for events.
        """
        self._closed = True
        if self._freed is not None:
            self._freed.detach()
        subscription = self._subscription
        if subscription is not None:
            subscription.close()
            subscription.notify()  # thread-safe: ``aclose`` may run on another loop

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Subscription:
    """What a session's buffer and table hold for one ``EventStream`` (its ``notify`` and
    ``stopped``): the stream's loop and wake-up, and the stream only weakly."""

    __slots__ = ("_loop", "_stream", "_wake", "dropped", "watch")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event, stream: EventStream
    ) -> None:
        self._loop = loop
        self._wake = wake
        self._stream = weakref.ref(stream)
        self.watch: EventWatch | None = None
        self.dropped = False

    def notify(self, _event: object = None) -> None:
        """Wake the stream's reader; on the publishing or stopping thread, which holds no
        lock of the session's then. A stream freed meanwhile is unsubscribed here."""
        if self.dropped:
            self.close()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody iterates
            self._loop.call_soon_threadsafe(self._wake.set)

    def stopped(self) -> None:
        """The session is stopped: the stream ends once it read the last events."""
        stream = self._stream()
        if stream is not None:
            stream._stopped = True
        self.notify()

    def close(self) -> None:
        """Unsubscribe (``EventWatch.close``: idempotent)."""
        if self.watch is not None:
            self.watch.close()

    def drop(self) -> None:
        """The stream was freed: unsubscribe on its loop, or at the session's next event
        or stop if the loop is closed; never here. The garbage collector frees a stream
        caught in a reference cycle on whatever thread allocates when it runs: maybe one
        holding the lock of the session's event buffer (publishing, or reading), which
        ``close`` takes. That thread would wait for itself for ever."""
        self.dropped = True
        with contextlib.suppress(RuntimeError):  # closed: ``notify`` closes it
            self._loop.call_soon_threadsafe(self.close)


async def _off_the_loop(
    loop: asyncio.AbstractEventLoop, subscribe: Callable[[], EventWatch]
) -> EventWatch:
    """``subscribe()`` on an executor thread. Cancelled while it runs, the watch it makes
    is closed once made: nobody would read it, and it would be called on every event of
    the session for as long as the session runs. A failed subscription (``SessionNotFound``)
    leaves no reference cycle: this frame, in the error's traceback, lets ``pending``
    (which holds the error) go."""
    pending = loop.run_in_executor(None, subscribe)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(_close_unread)
        raise
    finally:
        del pending


def _close_unread(pending: asyncio.Future[EventWatch]) -> None:
    if not pending.cancelled() and pending.exception() is None:
        pending.result().close()


for _cls in (AsyncAgentHost, EventStream):
    _cls.__module__ = "supervisor"
wait_future.__module__ = "supervisor"
