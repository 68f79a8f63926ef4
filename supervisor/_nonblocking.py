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
      OwnershipLost ── helper: the stale copy stopped here (Incarnations.lose), then the error
      else ── last_active; gate released (next call starts); future settled
```

A turn's checkpoint is saved before its outcome reaches ``done`` (by the
runtime, as for a blocking call), so a future resolves only once the turn is
durable. Deadlines run on one ``CallTimer`` thread; the few steps that must
wait run on ``HelperThreads`` (at most ``HELPERS`` threads, none when idle).
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
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
from supervisor._outcome import tamed
from supervisor._runtime import NotDelivered, SessionRuntime
from supervisor._session_table import SessionTable
from supervisor._timer import CallTimer, Deadline
from supervisor.errors import HostShutDown, OwnershipLost, SessionCrashed, SessionNotFound

__all__ = ["HELPERS", "NonBlockingCalls"]

logger = logging.getLogger("supervisor.host")

T = TypeVar("T")

HELPERS = 4
"""Most helper threads of a host (see ``supervisor._helpers``)."""

_CLOSED = "this AgentHost shut down before the call completed"


def settle(future: Future[T], value: T | None, error: BaseException | None) -> None:
    """Resolve ``future`` unless it is resolved already (cancelled, or failed at shutdown).

    A ``SystemExit`` or ``KeyboardInterrupt`` (a store's, a plugin's) is set as a
    ``CallAborted`` caused by it (``tamed``): raised as is by ``result()``, it would
    stop whoever reads it (an asyncio event loop, a server's request thread).

    Its done-callbacks run here, on the thread completing the call (a session's, a
    worker pipe's reader, ...). ``concurrent.futures`` logs an ``Exception`` one of
    them raises, but lets ``SystemExit`` and the like through: that would crash the
    session, or end the reader of a worker's pipe (every session of that worker then
    stops answering), so it is logged here instead. A ``KeyboardInterrupt`` (Ctrl-C,
    on the main thread) still goes through.
    """
    try:
        if error is None:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(tamed(error))
    except InvalidStateError:
        pass
    except KeyboardInterrupt:
        raise
    except BaseException:  # from a done-callback: the future is resolved
        logger.exception("a done-callback of a non-blocking call's future raised")


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
        return self._new_future()[0]

    def _new_future(self) -> tuple[Future[Any], _Resolved]:
        """``new_future``, and its one done-callback (which a queued call joins)."""
        future: Future[Any] = Future()
        resolved = _Resolved(self._pending)
        with self._lock:
            if self._closed:
                future.set_exception(HostShutDown())
                return future, resolved
            self._pending.add(future)
        future.add_done_callback(resolved)
        return future, resolved

    def close(self) -> None:
        """After the host stopped its sessions: fail what is still unresolved, wait for the
        helper threads, stop the timer thread.

        Each future gets an exception object of its own: every raise of one appends the
        raising frames to its traceback, so one shared by all would carry, in the last
        caller's traceback, the frames of every other caller (and keep them alive)."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending), set()
        for future in pending:
            settle(future, None, HostShutDown(_CLOSED))
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
        return self._exclusive(record, request, timeout)

    def exclusive_op(
        self, record: SessionRecord, work: Callable[[], Any], timeout: float
    ) -> Future[Any]:
        """``work()`` on a helper thread once the session's gate is this call's (stop_session)."""
        return self._exclusive(record, work, timeout)

    def _exclusive(
        self, record: SessionRecord, job: Send | Callable[[], Any], timeout: float
    ) -> Future[Any]:
        future, resolved = self._new_future()
        if not future.done():
            call = _Exclusive(self, record, future, timeout, job)
            resolved.call = weakref.ref(call)  # withdrawn from the queue if cancelled
            call.queue()
        return future

    def helper(self, work: Callable[[], Any]) -> Future[Any]:
        """``work()`` on a helper thread (lifecycle calls): its result or error."""
        future = self.new_future()
        # ``run`` holds ``future`` weakly (``_pending`` and the caller keep it), and drops
        # ``error`` once handed on: its frame is in the traceback of what ``work`` raises
        # (as the caller of ``outcome_of``), which ``future`` holds; a strong reference
        # there made a reference cycle of each failed call.
        reference = weakref.ref(future)

        def run() -> None:
            if running_weakly(reference):  # not cancelled while it waited for a helper
                value, error = outcome_of(work)
                settle_weakly(reference, value, self.failure(error))
                del value, error

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
        on a helper thread (the session is not running: its checkpoint has the answer).
        Refused, as the blocking calls are, while the host's node is fenced or lost the
        session (``check_serving``): asked before the session is, and again before
        ``answered`` runs (a history handed on, a snapshot saved)."""
        future = self.new_future()
        if not running(future):  # it starts at once: no longer cancellable
            return future
        serving = functools.partial(self.sessions.ownership.check_serving, record.session_id)
        try:
            serving()
        except Exception as exc:
            settle(future, None, exc)
            return future
        # From here on ``future`` is held weakly (``_pending`` and the caller keep it): the
        # steps below run ``answered`` and ``otherwise`` (a store's save or read), whose
        # errors' tracebacks hold the frames of these steps and their callers; the future
        # holds the error, so a strong reference there made a reference cycle of each.
        reference = weakref.ref(future)
        ref = self.sessions.serving_now(record)
        if ref is None:
            self.helpers.run(lambda: _run_into(reference, otherwise))
            return future

        def done(value: Any, error: BaseException | None) -> None:
            if isinstance(error, (NotDelivered, SessionCrashed)):
                self.helpers.run(lambda: self._after_end(ref, reference, otherwise))
            elif error is not None:
                settle_weakly(reference, None, error)
            elif (refused := outcome_of(serving)[1]) is not None:
                settle_weakly(reference, None, refused)  # (not lost here: the node stops it)
            else:
                self._answer(record, reference, lambda: answered(value))

        try:
            self.runtime.submit(
                record.session_id, ref, request, self.policy.call_timeout, done, self.timer
            )
        except Exception as exc:
            settle(future, None, exc)
        return future

    def _answer(
        self, record: SessionRecord, reference: weakref.ref[Future[Any]], work: Callable[[], Any]
    ) -> None:
        """Settle the future with what ``work()`` (a checkpoint's save) returns or raises. A
        save refused because another node owns the session (``OwnershipLost``) first stops
        the stale copy here, as the blocking call does, on a helper thread: ``lose`` never
        runs on the session's own. (This frame is in the error's traceback: it lets the
        error go, and holds the future weakly, see ``ask_running``.)"""
        value, error = outcome_of(work)
        if isinstance(error, OwnershipLost):
            lost = error
            self.helpers.run(lambda: self._lose(record, reference, lost))
            del lost
        else:
            settle_weakly(reference, value, error)
        del value, error

    def _lose(
        self, record: SessionRecord, reference: weakref.ref[Future[Any]], error: OwnershipLost
    ) -> None:
        """On a helper thread: stop the session here for good (another node owns it now,
        ``Incarnations.lose``), then fail the future with ``error``."""
        try:
            self.sessions.lose(record)
        finally:
            settle_weakly(reference, None, error)

    def _after_end(
        self,
        ref: pykka.ActorRef[Any],
        reference: weakref.ref[Future[Any]],
        otherwise: Callable[[], Any],
    ) -> None:
        self.sessions.await_end(ref)
        _run_into(reference, otherwise)


def running(future: Future[Any]) -> bool:
    """Mark ``future`` running; False if it was cancelled, or failed at shutdown, already.

    Under the lock ``concurrent.futures`` resolves it with (reentrant), so that a
    failure at shutdown cannot come between the look and the mark: marking a resolved
    future running logs a CRITICAL "unexpected state" before it raises.
    """
    with future._condition:
        return not future.done() and future.set_running_or_notify_cancel()


def running_weakly(reference: weakref.ref[Future[Any]]) -> bool:
    """``running`` for the future behind ``reference``; False if it is gone.

    For a helper thread's work that must not hold its future strongly: the work's frame
    is in the traceback of an error raised below it, which the future then holds."""
    future = reference()
    return future is not None and running(future)


def settle_weakly(
    reference: weakref.ref[Future[T]], value: T | None, error: BaseException | None
) -> None:
    """``settle`` the future behind ``reference``, unless it is gone (resolved already,
    at shutdown, and dropped by its caller: nobody waits for it)."""
    future = reference()
    if future is not None:
        settle(future, value, error)


class _Resolved:
    """The one done-callback of a future ``NonBlockingCalls`` hands out (one rather than
    three: each ``add_done_callback`` takes the future's lock):

    * the future leaves the unresolved ones that ``close`` fails;
    * a cancelled call never runs, so its future is told at once
      (``set_running_or_notify_cancel``), as an executor tells a job it withdrew: that is
      what wakes ``concurrent.futures.wait`` and ``as_completed``, which else never count
      it done (``running`` leaves it alone from then on);
    * a cancelled call still in its session's queue leaves it. ``call`` holds it weakly
      (see ``_Exclusive``).
    """

    __slots__ = ("_pending", "call")

    def __init__(self, pending: set[Future[Any]]) -> None:
        self._pending = pending
        self.call: weakref.ref[_Exclusive] | None = None

    def __call__(self, future: Future[Any]) -> None:
        self._pending.discard(future)
        if future.cancelled():
            future.set_running_or_notify_cancel()
            queued = None if self.call is None else self.call()
            if queued is not None:
                queued.withdraw()


def outcome_of(work: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(work(), None)``, or ``(None, what it raised)`` whatever its type, as the blocking
    call raises it to its caller. A ``SystemExit`` or ``GeneratorExit`` (from a store, say)
    must reach the call's future (``settle`` makes the first a ``CallAborted``), not escape
    the thread that ran the work: the future
    would never resolve, a ``stop_session`` would hold its session's queue for good, and
    a session's thread (a checkpoint's save) or a worker pipe's reader would end."""
    try:
        return work(), None
    except BaseException as exc:  # handed to the caller, as said above
        return None, exc


def _run_into(reference: weakref.ref[Future[Any]], work: Callable[[], Any]) -> None:
    """Settle the future behind ``reference`` with what ``work()`` returns or raises.

    This frame, and its caller's, are in the traceback of what ``work`` raises, which the
    future holds: neither may hold the future strongly, nor this one the error once it is
    handed on, or each failure is a reference cycle."""
    value, error = outcome_of(work)
    settle_weakly(reference, value, error)
    del value, error


_FINISHED: Future[Any] = Future()
_FINISHED.set_result(None)
"""The future of a call that finished (``_Exclusive._finish``): it holds its own no more."""

_LEFT = Ticket(lambda: None)
_LEFT.granted = True
"""The ticket of a call that left the session's queue (started, withdrawn): the gate holds
its own no more, and a granted ticket is never withdrawn."""


class _Exclusive:
    """One call that holds its session's gate: queued in turn, started, retried once, settled.

    ``job`` is a ``Send`` carried through the runtime (``Incarnations.call``'s
    semantics), or a function run on a helper thread (``stop_session``).

    Kept alive by whatever calls it next (the gate's queue, the timer, the runtime, a
    helper thread), never by a cycle of its own: its future's done-callback holds it
    weakly and its ticket is dropped once it left the queue (``_leave_queue``). Each call
    left its future, its ticket and itself (17 objects) as cyclic garbage, which a turn
    that outlives a young collection takes to the oldest generation: freed only by the
    (rare, long) full collections.
    """

    __slots__ = (
        "__weakref__", "attempt", "calls", "future", "job", "record", "ref", "ticket", "timeout",
        "wait",
    )  # fmt: skip

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
        still queued when the future is cancelled (``_Resolved``), or after ``timeout``,
        leaves it."""
        self.record.op_lock.when_free(self.ticket)
        if self.ticket.granted:
            return
        try:
            self.wait = self.calls.timer.call_later(self.timeout, self._waited_too_long)
        except RuntimeError as exc:  # the host shut down meanwhile
            if self._leave_queue():
                settle(self.future, None, exc)
            return
        if self.ticket.granted:  # granted meanwhile: ``_start`` may have missed the deadline
            self._cancel_wait()

    def withdraw(self) -> None:
        """Leave the session's queue (the future was cancelled), if still in it."""
        if self._leave_queue():
            self._cancel_wait()

    def _leave_queue(self) -> bool:
        """Take the call out of the session's queue; False if it was granted, or left,
        already."""
        if not self.record.op_lock.withdraw(self.ticket):
            return False
        self.ticket = _LEFT
        return True

    def _waited_too_long(self) -> None:
        if self._leave_queue():
            detail = f"session {self.record.session_id!r} stayed busy with another call"
            settle(self.future, None, TimeoutError(f"{detail} for {self.timeout} s"))

    def _cancel_wait(self) -> None:
        wait, self.wait = self.wait, None
        if wait is not None:
            wait.cancel()

    # -- holding the gate (from here on, ``_finish`` releases it) -------------------------

    def _start(self) -> None:
        self.ticket = _LEFT
        self._cancel_wait()
        if not running(self.future):
            self.record.op_lock.release()
            return
        if isinstance(self.job, Send):
            try:  # as ``Incarnations.call``: a fenced cluster node takes no turn
                self.calls.sessions.ownership.check_serving(self.record.session_id)
            except Exception as exc:
                self._finish(None, exc)
            else:
                self._try(1)
        else:
            work = self.job
            self.calls.helpers.run(lambda: self._run(work))

    def _run(self, work: Callable[[], Any]) -> None:
        value, error = outcome_of(work)
        self._finish(value, error)
        del value, error  # this frame is in the error's traceback (see ``_finish``)

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
        ref, error = outcome_of(lambda: self.calls.sessions.serving(self.record))
        if isinstance(error, OwnershipLost):
            self._lost(error)
        elif error is not None:
            self._finish(None, error)
        else:
            self._submit(ref)
        del error  # this frame is in the error's traceback (see ``_finish``)

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
        if error is None:
            self._finish(value, None)
        elif isinstance(error, (NotDelivered, SessionCrashed)):
            self.calls.helpers.run(lambda: self._after_end(error))
        elif isinstance(error, OwnershipLost):
            self.calls.helpers.run(lambda: self._lost(error))
        else:
            self._finish(value, error)

    def _lost(self, error: OwnershipLost) -> None:
        """On a helper thread, as ``Incarnations.call``: the turn's save (or the session's
        return) found another node owning it; stop the stale copy here, then fail."""
        try:
            self.calls.sessions.lose(self.record)
        finally:
            self._finish(None, error)

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
        """Release the session's gate and settle the future; then let the future go.

        A frame of this call (``_try_when_serving``, ``_run``: the caller of
        ``outcome_of``) is in the traceback of the error, which the future holds: kept
        here, the future made a reference cycle of each failed call (a reactivation that
        could not load the checkpoint, a ``stop_session`` that failed)."""
        self.record.last_active = self.calls.policy.clock()
        self.record.op_lock.release()
        future, self.future = self.future, _FINISHED
        settle(future, value, self.calls.failure(error))
