"""``HostFutures``: an ``AgentHost``'s calls in non-blocking form (``host.futures``).

Each method takes the arguments of the blocking method of the same name and
returns a ``concurrent.futures.Future`` at once. ``send``, ``history`` and
``checkpoint`` hold no thread while the session works (see
``supervisor._nonblocking``); the lifecycle calls run on the host's few helper
threads.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any, Protocol, Unpack

from actors import (
    AgentTemplate,
    EventBatch,
    EventBuffer,
    GetHistory,
    Message,
    Snapshot,
    Subscriber,
    TakeSnapshot,
)
from supervisor._checkpoints import Checkpoints
from supervisor._host_policy import (
    call_wait,
    check_label,
    check_stop_checkpoint,
    check_subscriber,
    resume_arguments,
    start_arguments,
)
from supervisor._host_record import SessionRecord
from supervisor._nonblocking import (
    NonBlockingCalls,
    outcome_of,
    running_weakly,
    settle,
    settle_weakly,
)
from supervisor._session_attrs import SessionMetadata, plain_text, send_request
from supervisor._session_table import SessionTable, require_session_id, require_tenant_arg
from supervisor.checkpoint_store import check_session_id_for

__all__ = ["EventWatch", "HostFutures"]

logger = logging.getLogger("supervisor.host")


class _Host(Protocol):
    """What ``HostFutures`` runs on helper threads: ``AgentHost``'s blocking methods."""

    call_timeout: float

    def start_session(
        self,
        template: AgentTemplate,
        session_id: str | None = None,
        tenant_id: str = "default",
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str: ...

    def resume(
        self,
        session_id: str,
        template: AgentTemplate,
        checkpoint_id: str | None = None,
        *,
        tenant_id: str | None = None,
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str: ...

    def hibernate(self, session_id: str, *, tenant_id: str | None = None) -> bool: ...

    def steer(self, session_id: str, text: str, *, tenant_id: str | None = None) -> None: ...


class HostFutures:
    """``host.futures``: ``AgentHost``'s calls, each returning a ``concurrent.futures.Future``.

    Thread-safe: call it from any thread, an event loop's included; no method
    blocks on a session. A future resolves with what the blocking method returns,
    or fails with what it raises, with the same types (``SessionNotFound``,
    ``SessionFailed``, ``SessionCrashed``, ``TimeoutError``, the model's own
    error, ...). Only invalid arguments raise at the call itself (``TypeError``,
    ``ValueError``), as programming errors, with the blocking method's checks and
    messages, before anything is queued or sent: a ``send``'s text, tag and
    ``timeout``, a ``checkpoint``'s label, a ``steer``'s text, and the id, template,
    checkpoint id and attributes of ``start_session`` and ``resume``. A session that
    does not exist is no argument error: that future fails with ``SessionNotFound``.
    A future still unresolved when the host shuts down fails with ``HostShutDown``
    (a ``RuntimeError``), as does a call made once it is shut down: a call still
    queued in its session then does not report the session missing
    (``SessionNotFound``), for it is not.

    Calls that change what runs a session (``send``, ``stop_session``) wait for
    it in one FIFO queue per session, shared with the blocking methods: they run
    in the order they were made, one at a time, and no thread waits for a queued
    one. ``cancel()`` withdraws a call still queued (it never runs); a call that
    has started cannot be cancelled (``concurrent.futures`` semantics), and runs
    to its end: its turn is checkpointed as usual.

    On a cluster node, a call naming a session the node does not hold looks it up
    (who owns it? a database read) and may take it over (a resume) on a helper
    thread, never on the caller's (see ``finds_at_once``); its ``cancel()`` withdraws
    it until the session is found, and from then on the call runs.

    The future's done-callbacks run on the thread that completes the call: the
    session's own (thread mode), the one reading its worker's pipe (process
    mode), the host's timer thread (a timeout) or a helper thread. They must be
    quick and must not block; hand longer work to your own executor.
    """

    def __init__(
        self,
        host: _Host,
        table: SessionTable,
        checkpoints: Checkpoints,
        calls: NonBlockingCalls,
    ) -> None:
        self._host = host
        self._table = table
        self._checkpoints = checkpoints
        self._calls = calls

    def send(
        self,
        session_id: str,
        text: str,
        timeout: float | None = None,
        *,
        tenant_id: str | None = None,
        tag: str | None = None,
    ) -> Future[Message]:
        """``AgentHost.send`` without a waiting thread: the answer once the turn (and its
        checkpoint, with the default policy) is done.

        ``timeout`` (default ``call_timeout``) bounds the wait in the session's
        queue and, again, the turn itself, as the blocking form does: past it the
        future fails with ``TimeoutError`` (a turn under way goes on).

        Raises:
            TypeError, ValueError: ``text`` or ``tag`` is not a ``str`` or holds text no
                checkpoint can store, or ``timeout`` is not a positive, finite number of
                seconds or ``None`` (at the call, not in the future; see
                ``AgentHost.send``).
        """
        request = send_request(text, tag)
        wait = call_wait(timeout, self._host.call_timeout)
        return self._with_record(
            session_id, tenant_id, lambda record: self._calls.exclusive(record, request, wait)
        )

    def history(self, session_id: str, *, tenant_id: str | None = None) -> Future[list[Message]]:
        """``AgentHost.history`` without a waiting thread (from the last checkpoint, on a
        helper thread, when the session is not running)."""

        sessions = self._calls.sessions

        def ask(record: SessionRecord) -> Future[Any]:
            return self._calls.ask_running(
                record,
                GetHistory(),
                answered=_same,
                otherwise=lambda: sessions.saved_history(session_id),
            )

        return self._with_record(session_id, tenant_id, ask)

    def checkpoint(
        self, session_id: str, label: str | None = None, *, tenant_id: str | None = None
    ) -> Future[Snapshot]:
        """``AgentHost.checkpoint`` without a waiting thread: the snapshot once it is saved.

        Raises:
            TypeError, ValueError: an invalid ``label`` (at the call).
        """
        label = check_label(label)
        checkpoints = self._checkpoints

        sessions = self._calls.sessions

        def ask(record: SessionRecord) -> Future[Any]:
            return self._calls.ask_running(
                record,
                TakeSnapshot(label),
                answered=lambda snapshot: checkpoints.save(
                    snapshot, record.events, record.save_order
                ),
                otherwise=lambda: sessions.checkpoint(record, label),  # on a helper thread
            )

        return self._with_record(session_id, tenant_id, ask)

    def stop_session(
        self, session_id: str, *, tenant_id: str | None = None, checkpoint: bool = True
    ) -> Future[None]:
        """``AgentHost.stop_session``, in its turn in the session's queue (after the calls
        made before it), on a helper thread.

        Raises:
            TypeError: ``checkpoint`` is not a ``bool`` (at the call).
        """
        check_stop_checkpoint(checkpoint)
        sessions = self._calls.sessions
        table = self._table
        timeout = self._host.call_timeout

        def stop(record: SessionRecord) -> None:
            table.check_current(record)  # not stopped while this call waited
            sessions.stop(record, checkpoint=checkpoint)

        return self._with_record(
            session_id,
            tenant_id,
            lambda record: self._calls.exclusive_op(record, lambda: stop(record), timeout),
        )

    def hibernate(self, session_id: str, *, tenant_id: str | None = None) -> Future[bool]:
        """``AgentHost.hibernate`` on a helper thread (False if the session was busy).

        Raises:
            TypeError: ``session_id`` is not a ``str`` (at the call).
        """
        require_session_id(session_id)
        require_tenant_arg(tenant_id)
        return self._calls.helper(lambda: self._host.hibernate(session_id, tenant_id=tenant_id))

    def steer(self, session_id: str, text: str, *, tenant_id: str | None = None) -> Future[None]:
        """``AgentHost.steer`` on a helper thread (in process mode it is a round trip to
        the worker).

        Raises:
            TypeError, ValueError: ``text`` is not a ``str``, or holds a lone surrogate,
                or ``session_id`` is not a ``str`` (at the call).
        """
        require_session_id(session_id)
        require_tenant_arg(tenant_id)
        steering = plain_text("the steering text", text)
        return self._calls.helper(
            lambda: self._host.steer(session_id, steering, tenant_id=tenant_id)
        )

    def start_session(
        self,
        template: AgentTemplate,
        session_id: str | None = None,
        tenant_id: str = "default",
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> Future[str]:
        """``AgentHost.start_session`` on a helper thread; the session's id.

        Raises:
            TypeError, ValueError: an invalid id, template or attribute (at the call).
        """
        checked = start_arguments(template, session_id, tenant_id, api_key, attrs)
        if checked is not None:
            check_session_id_for(self._checkpoints.store, checked)
        host = self._host
        return self._calls.helper(
            lambda: host.start_session(template, session_id, tenant_id, api_key, **attrs)
        )

    def resume(
        self,
        session_id: str,
        template: AgentTemplate,
        checkpoint_id: str | None = None,
        *,
        tenant_id: str | None = None,
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> Future[str]:
        """``AgentHost.resume`` on a helper thread; the session's id.

        Raises:
            TypeError, ValueError: an invalid id, template, checkpoint id or attribute
                (at the call).
        """
        resume_arguments(session_id, template, checkpoint_id, tenant_id, api_key, attrs)
        host = self._host
        return self._calls.helper(
            lambda: host.resume(
                session_id, template, checkpoint_id, tenant_id=tenant_id, api_key=api_key, **attrs
            )
        )

    def watch(
        self,
        session_id: str,
        on_event: Subscriber,
        on_stopped: Callable[[], None],
        *,
        tenant_id: str | None = None,
    ) -> EventWatch:
        """Follow the session's event stream: ``on_event`` gets every new event (as
        ``AgentHost.subscribe``'s subscriber, on the publishing thread) and ``on_stopped``
        is called once when the session's stop is over (``stop_session``, a move to
        another node or the host's shutdown: after its last event, ``moved`` for a
        move; at once if it is over already). Both must be quick and not block; one
        that raises is logged and skipped (the stop, and the session's other
        watchers, go on). The returned ``EventWatch`` reads the stream by cursor, even
        after the stop. Unlike the calls above, it finds the session on the caller's
        thread: on a cluster node, one it does not hold is looked up in the database and
        may be taken over there and then (an event loop asks ``finds_at_once`` first).

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TypeError: ``on_event`` or ``on_stopped`` is not callable.
        """
        check_subscriber(on_event, "on_event")
        check_subscriber(on_stopped, "on_stopped", "once the session is stopped")
        record = self._table.live(session_id, tenant_id)
        unsubscribe = record.events.subscribe(on_event, quick=True)
        unwatch = self._table.when_stopped(record, _logged(on_stopped, session_id))
        return EventWatch(record.events, unsubscribe, unwatch)

    def finds_at_once(self, session_id: str) -> bool:
        """Whether a call naming ``session_id`` finds it without waiting: this host holds
        it, or is no cluster node (the host installs ``SessionTable.on_missing`` on a
        cluster node only). A cluster node asks the database about a session it does
        not hold (who owns it?) and may take it over there and then (a resume: its
        checkpoint loaded, its ``session_start`` run), which no event loop may wait for."""
        if self._table.on_missing is None or not isinstance(session_id, str):
            return True
        try:
            record = self._table.get(session_id)
        except TypeError:  # unhashable: ``live`` names it
            return True
        return record is not None and record.status != "stopped"

    def _with_record(
        self,
        session_id: str,
        tenant_id: str | None,
        call: Callable[[SessionRecord], Future[Any]],
    ) -> Future[Any]:
        """``call(record)``, or a future failed with ``SessionNotFound`` (no such session
        for ``tenant_id``) or, once the host is shut down, ``HostShutDown`` (its sessions
        are stopped, not missing: their checkpoints stand). A session this host does not
        hold is looked up on a helper thread (see ``finds_at_once``)."""
        require_session_id(session_id)  # at the call, as every argument
        require_tenant_arg(tenant_id)
        if not self.finds_at_once(session_id):
            return self._after_lookup(session_id, tenant_id, call)
        try:
            self._table.check_open()
            record = self._table.live(session_id, tenant_id)
        except Exception as exc:
            return _failed(exc)
        return call(record)

    def _after_lookup(
        self,
        session_id: str,
        tenant_id: str | None,
        call: Callable[[SessionRecord], Future[Any]],
    ) -> Future[Any]:
        """``call(record)`` once a helper thread found the session (taking it over if the
        cluster says so); its outcome is relayed to the future returned here. Cancelling
        that future withdraws the call until the session is found; from then on the call
        is made and runs (the future is running: ``cancel()`` returns False)."""
        calls = self._calls
        outer = calls.new_future()
        # ``look_up`` holds ``outer`` weakly (``_pending`` and the caller keep it): its
        # frame is in the traceback of a failed look-up (as the caller of ``outcome_of``),
        # which ``outer`` holds, so a strong reference there would make a reference cycle
        # of each such call. For the same reason it drops ``error`` once it is handed on.
        reference = weakref.ref(outer)

        def look_up() -> None:
            if not running_weakly(reference):  # cancelled, or failed at shutdown, meanwhile
                return
            record, error = outcome_of(lambda: self._table.live(session_id, tenant_id))
            if error is not None:
                settle_weakly(reference, None, calls.failure(error))
                del error
                return
            inner, error = outcome_of(lambda: call(record))
            if error is not None:
                settle_weakly(reference, None, error)
                del error
            else:
                inner.add_done_callback(functools.partial(_relay, reference))

        if not outer.done():
            calls.helpers.run(look_up)
        return outer


class EventWatch:
    """What ``HostFutures.watch`` returns: reads one session's stream, and ends the watch.

    Thread-safe (the stream's buffer is).
    """

    __slots__ = ("_buffer", "_unsubscribe", "_unwatch")

    def __init__(
        self,
        buffer: EventBuffer,
        unsubscribe: Callable[[], None],
        unwatch: Callable[[], None],
    ) -> None:
        self._buffer = buffer
        self._unsubscribe = unsubscribe
        self._unwatch = unwatch

    def since(self, cursor: int | None) -> EventBatch:
        """The events after ``cursor`` (see ``AgentHost.events``)."""
        return self._buffer.since(cursor)

    def close(self) -> None:
        """Stop calling ``on_event`` and ``on_stopped``. Idempotent."""
        self._unsubscribe()
        self._unwatch()


def _failed(error: Exception) -> Future[Any]:
    """A future failed with ``error``, made in a frame of its own: the frame that caught
    ``error`` is in its traceback, so a future held there (the exception holding the frame,
    the frame the future, the future the exception) would leave all three, and every frame
    of the traceback, in a reference cycle for the collector."""
    failed: Future[Any] = Future()
    failed.set_exception(error)
    return failed


def _same(answer: list[Message]) -> list[Message]:
    return answer


def _relay(reference: weakref.ref[Future[Any]], done: Future[Any]) -> None:
    """Settle the future behind ``reference`` as ``done`` ended (on the thread that
    completed it)."""
    outer = reference()
    if outer is None:  # resolved at shutdown, and dropped by its caller
        return
    if done.cancelled():  # (nobody holds ``done`` to cancel it; if it were, say so)
        settle(outer, None, CancelledError())
    else:
        error = done.exception()
        settle(outer, None if error is not None else done.result(), error)


def _logged(on_stopped: Callable[[], None], session_id: str) -> Callable[[], None]:
    """``on_stopped`` for the stopping thread: what it raises is logged, as an event
    subscriber's is. Raised there, it would abort the stop half-way (the session left
    listed, not forgotten) and keep the session's other watchers from being told."""

    def stopped() -> None:
        try:
            on_stopped()
        except Exception:
            logger.exception("on_stopped of a watch of session %r failed", session_id)

    return stopped


for _cls in (EventWatch, HostFutures):
    _cls.__module__ = "supervisor"
