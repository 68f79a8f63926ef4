"""``NonBlockingCalls``: the route of an ``AgentHost``'s calls that hold no caller thread.

The semantics are the blocking calls' (``AgentHost.send`` and
``Incarnations.call``, ``ask_running``), driven by completion callbacks
instead of a waiting thread:

```
futures.send ── record.op_lock.when_free(ticket)   queued in the session's FIFO (SessionGate)
   granted ── future running ── serving now? ── runtime.submit(..., done)   no thread waits
                     └ no: helper thread ── Incarnations.serving (reactivate / wait) ┘
   done(answer | error) on the completing thread (session's, pipe reader's, timer's):
      NotDelivered ── helper: await_end, then once more (SessionCrashed the 2nd time)
      SessionCrashed ── helper: await_end (its end is reported first), then the error
      else ── last_active; gate released (next call starts); future settled
```

A turn's checkpoint is saved before its outcome reaches ``done`` (by the
runtime, as for a blocking call), so a future resolves only once the turn is
durable. Deadlines run on one ``CallTimer`` thread; the few steps that must
wait run on ``HelperThreads`` (at most ``HELPERS`` threads, none when idle).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

import pykka

from actors import GetHistory, Send, TakeSnapshot
from supervisor._checkpoints import Checkpoints
from supervisor._gate import Ticket
from supervisor._helpers import HelperThreads
from supervisor._host_policy import HostPolicy
from supervisor._host_record import SessionRecord
from supervisor._incarnations import Incarnations
from supervisor._runtime import NotDelivered, SessionRuntime
from supervisor._session_table import SessionTable
from supervisor._timer import CallTimer, Deadline
from supervisor.errors import HostShutDown, SessionCrashed, SessionNotFound

__all__ = ["HELPERS", "NonBlockingCalls"]

logger = logging.getLogger("supervisor.host")

T = TypeVar("T")

HELPERS = 4
"""Most helper threads of a host (see ``supervisor._helpers``)."""

_CLOSED = "this AgentHost shut down before the call completed"


def settle(future: Future[T], value: T | None, error: BaseException | None) -> None:
    """Resolve ``future`` unless it is resolved already (cancelled, or failed at shutdown)."""
    try:
        if error is None:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(error)
    except InvalidStateError:
        pass


class NonBlockingCalls:
    """Runs one host's non-blocking calls. Thread-safe.

    Every future it returns resolves exactly once: with the call's outcome, or
    with ``RuntimeError`` if the host shut down first (``close``), including a call
    still queued that finds its session stopped by the shutdown (see ``failure``).
    """

    def __init__(
        self,
        sessions: Incarnations,
        runtime: SessionRuntime,
        checkpoints: Checkpoints,
        policy: HostPolicy,
        table: SessionTable,
    ) -> None:
        self.sessions = sessions
        self.runtime = runtime
        self.checkpoints = checkpoints
        self.policy = policy
        self._table = table
        self.timer = CallTimer("sessionvisor-call-timer")
        self.helpers = HelperThreads(HELPERS, "sessionvisor-helper")
        self._pending: set[Future[Any]] = set()  # unresolved, for ``close``
        self._lock = threading.Lock()
        self._closed = False

    # -- futures the host hands out ------------------------------------------------------

    def new_future(self) -> Future[Any]:
        """A future that ``close`` fails if it is still unresolved then."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(HostShutDown())
                return future
            self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    def close(self) -> None:
        """After the host stopped its sessions: fail what is still unresolved, wait for the
        helper threads, stop the timer thread."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending), set()
        error = HostShutDown(_CLOSED)
        for future in pending:
            settle(future, None, error)
        if not self.helpers.join(self.policy.call_timeout):
            logger.warning("helper threads of non-blocking calls still run after shutdown")
        self.timer.close()

    def failure(self, error: BaseException | None) -> BaseException | None:
        """``error`` as the caller must see it: once the host is shutting down, the
        ``SessionNotFound`` of a session its shutdown stopped (a call still queued then)
        is the ``RuntimeError`` promised for calls the shutdown leaves unresolved. The
        session exists (its checkpoint stands): "not found" would tell the caller, or a
        gateway's client (a 404), that it is gone."""
        if isinstance(error, SessionNotFound) and self._table.closed:
            closed = HostShutDown(_CLOSED)
            closed.__cause__ = error
            return closed
        return error

    # -- the three kinds of call -----------------------------------------------------------

    def exclusive(self, record: SessionRecord, request: Send, timeout: float) -> Future[Any]:
        """A call that holds the session's gate: ``send`` (see the module docstring)."""
        future = self.new_future()
        if not future.done():
            _Exclusive(self, record, future, timeout, request).queue()
        return future

    def exclusive_op(
        self, record: SessionRecord, work: Callable[[], Any], timeout: float
    ) -> Future[Any]:
        """``work()`` on a helper thread once the session's gate is this call's (stop_session)."""
        future = self.new_future()
        if not future.done():
            _Exclusive(self, record, future, timeout, work).queue()
        return future

    def helper(self, work: Callable[[], Any]) -> Future[Any]:
        """``work()`` on a helper thread (lifecycle calls): its result or error."""
        future = self.new_future()

        def run() -> None:
            if running(future):  # not cancelled while it waited for a helper
                try:
                    value = work()
                except Exception as exc:
                    settle(future, None, self.failure(exc))
                else:
                    settle(future, value, None)

        if not future.done():
            self.helpers.run(run)
        return future

    def ask_running(
        self,
        record: SessionRecord,
        request: GetHistory | TakeSnapshot,
        answered: Callable[[Any], Any],
        otherwise: Callable[[], Any],
    ) -> Future[Any]:
        """``Incarnations.ask_running`` without waiting: ``answered(answer)`` when a running
        incarnation answers (on the thread that completes the call), else ``otherwise()``
        on a helper thread (the session is not running: its checkpoint has the answer)."""
        future = self.new_future()
        if not running(future):  # it starts at once: no longer cancellable
            return future
        ref = self.sessions.serving_now(record)
        if ref is None:
            self.helpers.run(lambda: _run_into(future, otherwise))
            return future

        def done(value: Any, error: BaseException | None) -> None:
            if isinstance(error, (NotDelivered, SessionCrashed)):
                self.helpers.run(lambda: self._after_end(ref, future, otherwise))
            elif error is not None:
                settle(future, None, error)
            else:
                _run_into(future, lambda: answered(value))

        try:
            self.runtime.submit(
                record.session_id, ref, request, self.policy.call_timeout, done, self.timer
            )
        except Exception as exc:
            settle(future, None, exc)
        return future

    def _after_end(
        self, ref: pykka.ActorRef[Any], future: Future[Any], otherwise: Callable[[], Any]
    ) -> None:
        self.sessions.await_end(ref)
        _run_into(future, otherwise)


def running(future: Future[Any]) -> bool:
    """Mark ``future`` running; False if it was cancelled, or failed at shutdown, already."""
    try:
        return future.set_running_or_notify_cancel()
    except RuntimeError:  # resolved already: the host shut down
        return False


def _run_into(future: Future[Any], work: Callable[[], Any]) -> None:
    """Settle ``future`` with what ``work()`` returns or raises."""
    try:
        value = work()
    except Exception as exc:
        settle(future, None, exc)
    else:
        settle(future, value, None)


class _Exclusive:
    """One call that holds its session's gate: queued in turn, started, retried once, settled.

    ``job`` is a ``Send`` carried through the runtime (``Incarnations.call``'s
    semantics), or a function run on a helper thread (``stop_session``).
    """

    __slots__ = ("attempt", "calls", "future", "job", "record", "ref", "ticket", "timeout", "wait")

    def __init__(
        self,
        calls: NonBlockingCalls,
        record: SessionRecord,
        future: Future[Any],
        timeout: float,
        job: Send | Callable[[], Any],
    ) -> None:
        self.calls = calls
        self.record = record
        self.future = future
        self.timeout = timeout
        self.job = job
        self.ticket = Ticket(self._start)
        self.wait: Deadline | None = None
        self.ref: pykka.ActorRef[Any] | None = None
        self.attempt = 0

    def queue(self) -> None:
        """Take a place in the session's queue (starting at once if it is free); a call
        still queued when the future is cancelled, or after ``timeout``, leaves it."""
        self.future.add_done_callback(self._cancelled)
        self.record.op_lock.when_free(self.ticket)
        if self.ticket.granted:
            return
        try:
            self.wait = self.calls.timer.call_later(self.timeout, self._waited_too_long)
        except RuntimeError as exc:  # the host shut down meanwhile
            if self.record.op_lock.withdraw(self.ticket):
                settle(self.future, None, exc)
            return
        if self.ticket.granted:  # granted meanwhile: ``_start`` may have missed the deadline
            self._cancel_wait()

    def _cancelled(self, future: Future[Any]) -> None:
        if future.cancelled() and self.record.op_lock.withdraw(self.ticket):
            self._cancel_wait()

    def _waited_too_long(self) -> None:
        if self.record.op_lock.withdraw(self.ticket):
            detail = f"session {self.record.session_id!r} stayed busy with another call"
            settle(self.future, None, TimeoutError(f"{detail} for {self.timeout} s"))

    def _cancel_wait(self) -> None:
        wait, self.wait = self.wait, None
        if wait is not None:
            wait.cancel()

    # -- holding the gate (from here on, ``_finish`` releases it) -------------------------

    def _start(self) -> None:
        self._cancel_wait()
        if not running(self.future):
            self.record.op_lock.release()
            return
        if isinstance(self.job, Send):
            self._try(1)
        else:
            work = self.job
            self.calls.helpers.run(lambda: self._run(work))

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            value = work()
        except Exception as exc:
            self._finish(None, exc)
        else:
            self._finish(value, None)

    def _try(self, attempt: int) -> None:
        """Carry the call to the serving incarnation; reactivating or waiting for one is
        left to a helper thread."""
        self.attempt = attempt
        ref = self.calls.sessions.serving_now(self.record)
        if ref is None:
            self.calls.helpers.run(self._try_when_serving)
        else:
            self._submit(ref)

    def _try_when_serving(self) -> None:
        try:
            ref = self.calls.sessions.serving(self.record)
        except Exception as exc:
            self._finish(None, exc)
        else:
            self._submit(ref)

    def _submit(self, ref: pykka.ActorRef[Any]) -> None:
        self.ref = ref
        assert isinstance(self.job, Send)
        calls = self.calls
        try:
            calls.runtime.submit(
                self.record.session_id, ref, self.job, self.timeout, self._done, calls.timer
            )
        except Exception as exc:
            self._finish(None, exc)

    def _done(self, value: Any, error: BaseException | None) -> None:
        if isinstance(error, (NotDelivered, SessionCrashed)):
            self.calls.helpers.run(lambda: self._after_end(error))
        else:
            self._finish(value, error)

    def _after_end(self, error: NotDelivered | SessionCrashed) -> None:
        """As ``Incarnations.call``: wait for the ended incarnation's notices, then send
        once more (never taken) or fail (it died during the call)."""
        assert self.ref is not None
        self.calls.sessions.await_end(self.ref)
        if isinstance(error, SessionCrashed):
            self._finish(None, error)
        elif self.attempt == 2:
            detail = f"it ended twice before taking the call ({error})"
            crashed = SessionCrashed(self.record.session_id, detail)
            crashed.__cause__ = error
            self._finish(None, crashed)
        else:
            self._try(2)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        self.record.last_active = self.calls.policy.clock()
        self.record.op_lock.release()
        settle(self.future, value, self.calls.failure(error))
