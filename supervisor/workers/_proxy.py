"""The parent's side of one session in a worker: its ``SessionLink`` and its proxy actor.

``SessionLink`` carries the host's calls (``send``, ``history``, ``snapshot``)
to the worker from the calling thread: it writes the request on the worker's
pipe and waits for the reply, reading the pipe itself while no other thread
does (see ``WorkerClient.wait``). The checkpoint a ``send`` reply carries is
saved through the host's checkpoint writer on the thread that delivers the
reply, before the caller gets the answer and before any later frame of the
session (its death at its worker's included) is handled: a restart never loads a
checkpoint older than an answer handed out.

``WorkerSession`` is the session's actor here: to the registry, monitors and
the supervisor it is an ordinary ``SupervisedActor``, whose death is the
session's. It takes no calls; when it ends (stopped, killed, or crashed by the
pool because its worker died or reported the session dead) it ends the
session in the worker and gives its unused steering back to the host.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pykka

from actors import (
    CheckpointAborted,
    Credentials,
    Event,
    EventBuffer,
    Message,
    Snapshot,
    SteeringQueue,
    SteeringQueueFull,
)
from actors._loop import ends_session
from actors.snapshot import checked_messages
from supervisor._actor import SupervisedActor
from supervisor._outcome import OneOutcome
from supervisor._runtime import Done, NotDelivered, SessionLaunch
from supervisor._timer import CallTimer
from supervisor.errors import RemoteError, SessionCrashed, WorkerCrashed
from supervisor.workers._checkpoint_delta import HistoryMirror
from supervisor.workers._client import Reply, WorkerClient
from supervisor.workers._pool import WorkerPool
from supervisor.workers._protocol import SessionDown

__all__ = ["SessionLink", "WorkerSession", "start_in_worker"]

logger = logging.getLogger("supervisor.workers")

Checkpointer = Callable[[Snapshot], object]
_START_ATTEMPTS = 3
_START_WRITE_WAIT = 30.0
"""Seconds a steering text waits for its session's ``start`` frame to be written (a bound
on a wait that normally lasts microseconds; past it the text is sent anyway)."""
_STEER_WAIT = 10.0
"""Seconds ``steer`` waits for the worker to take a text. Past it the text is kept here as
sent (the worker takes it late, or its session's end gives it back): a worker is killed
for being slow only under ``worker_call_timeout``, never for a steer."""
_KILL_GRACE = 10.0
"""Seconds a call waits, after ``worker_call_timeout`` killed its worker, for the worker's
death to fail it (normally milliseconds: the pipe's reader notices the death at once, and
reaps the process within ``_client._JOIN_TIMEOUT``). Past it the call fails with
``WorkerCrashed`` anyway: no call waits for ever on a failure that never comes."""


class SessionLink:
    """The parent's line to one session in a worker: calls, and what comes back.

    Thread-safe (its state is fixed at creation, but for ``mirror``, which locks; the
    client is thread-safe).
    ``WorkerRuntime.call`` uses it on the caller's thread; calls to the session
    are serialized by the session's actor in the worker, and ``send``
    additionally by the host's per-session lock.
    """

    __slots__ = (
        "call_timeout",
        "checkpointer",
        "client",
        "events",
        "mirror",
        "session_id",
        "steer",
    )

    def __init__(
        self,
        client: WorkerClient,
        session_id: str,
        events: EventBuffer,
        checkpointer: Checkpointer | None,
        call_timeout: float | None,
        *,
        steer: _Steer | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.events = events
        self.checkpointer = checkpointer
        self.call_timeout = call_timeout
        self.steer = steer  # told when a turn's checkpoint is saved (``_Steer.saved``)
        self.mirror = HistoryMirror()  # the messages the worker's checkpoints brought so far

    def send(self, text: str, tag: str | None, timeout: float) -> Message:
        """Run one turn in the worker from the calling thread (``tag``: see ``actors.Send``);
        save its checkpoint here.

        The caller must hold the session's host lock (one send at a time).
        Returns when the answer is in and, if one was due, its checkpoint saved;
        the turn's events were published before (the worker sends them first).

        Raises:
            WorkerCrashed: the worker died (or was killed after ``call_timeout``).
            SessionCrashed: the session died in the worker during the turn.
            NotDelivered: the session ended before the turn began; nothing ran.
            TimeoutError: no answer within ``timeout``; the turn goes on in the
                worker and its checkpoint is saved when it ends.
            Exception: what the turn raised, as in thread mode.
        """
        answer: Message = self._call(
            "send", self._send_payload(text, tag), timeout, self.finish_send
        )
        return answer

    def history(self, timeout: float) -> list[Message]:
        """The session's conversation, asked from the calling thread (no proxy hop).

        Raises:
            NotDelivered: the session or its worker is gone (read its checkpoint).
            TimeoutError: no answer within ``timeout``.
        """
        return decode_history(self._ask("history", {"session": self.session_id}, timeout))

    def snapshot(self, label: str | None, timeout: float) -> Snapshot:
        """A snapshot of the session now, taken from the calling thread (see ``history``)."""
        payload = self._snapshot_payload(label)
        snapshot: Snapshot = self._ask("snapshot", payload, timeout, self.mirror.snapshot)
        return snapshot

    def _ask(
        self,
        op: str,
        payload: dict[str, Any],
        timeout: float,
        on_reply: Callable[[Any], Any] | None = None,
    ) -> Any:
        try:
            return self._call(op, payload, timeout, on_reply)
        except SessionCrashed as exc:  # WorkerCrashed too
            raise NotDelivered(str(exc)) from exc

    # -- without a waiting thread (``WorkerRuntime.submit``) ------------------------

    def submit_send(
        self, text: str, tag: str | None, timeout: float, done: Done, timer: CallTimer
    ) -> None:
        """``send`` without waiting: ``done`` gets the answer (its checkpoint saved) or the
        error ``send`` would raise, on the thread that reads the reply."""
        payload = self._send_payload(text, tag)
        self._submit("send", payload, timeout, done, timer, self.finish_send, asked=False)

    def _send_payload(self, text: str, tag: str | None) -> dict[str, Any]:
        payload: dict[str, Any] = {"session": self.session_id, "text": text}
        if tag is not None:
            payload["tag"] = tag
        return self._declare(payload)

    def _snapshot_payload(self, label: str | None) -> dict[str, Any]:
        return self._declare({"session": self.session_id, "label": label})

    def _declare(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` telling the worker which messages this host has, so that the checkpoint
        coming back brings only the others (``HistoryMirror``)."""
        have = self.mirror.have()
        if have is not None:
            payload["have"] = have
        return payload

    def submit_history(self, timeout: float, done: Done, timer: CallTimer) -> None:
        """``history`` without waiting (see ``submit_send``)."""
        payload = {"session": self.session_id}
        self._submit("history", payload, timeout, done, timer, decode_history, asked=True)

    def submit_snapshot(
        self, label: str | None, timeout: float, done: Done, timer: CallTimer
    ) -> None:
        """``snapshot`` without waiting (see ``submit_send``)."""
        payload = self._snapshot_payload(label)
        self._submit("snapshot", payload, timeout, done, timer, self.mirror.snapshot, asked=True)

    def _submit(  # noqa: PLR0917 (one call's whole description)
        self,
        op: str,
        payload: dict[str, Any],
        timeout: float,
        done: Done,
        timer: CallTimer,
        on_reply: Callable[[Any], Any],
        *,
        asked: bool,
    ) -> None:
        """Submit ``op``; the reply, or the deadline, settles ``done`` once. Past the
        worker's ``call_timeout`` (when it comes first) the worker is killed, as ``_call``
        does, and the call fails with ``WorkerCrashed`` when its death is handled."""
        outcome = OneOutcome(done)

        def settled(reply: Reply) -> None:
            # The error is read, not raised: raised here, it got this frame and its callers'
            # (``Reply._settle``'s, which hold it) in its traceback, a reference cycle.
            error = reply.exception()  # a save's ``SystemExit`` too: ``done`` tames it
            if error is None:
                outcome.finish(reply.result(0), None)
                return
            error = self._mapped(error)
            if asked and isinstance(error, SessionCrashed):  # WorkerCrashed too
                error = _chained(NotDelivered(str(error)), error)
            outcome.finish(None, error)

        limit = self.call_timeout
        if limit is not None and limit <= timeout:
            outcome.deadline = timer.call_later(
                limit, lambda: self._kill_late(op, outcome, limit, timer, asked=asked)
            )
        else:
            message = f"session {self.session_id!r} did not answer within {timeout} s"
            outcome.deadline = timer.call_later(
                timeout, lambda: outcome.finish(None, TimeoutError(message))
            )
        self.client.submit(op, payload, on_reply=on_reply, on_done=settled)

    def _kill_late(
        self, op: str, outcome: OneOutcome, limit: float, timer: CallTimer, *, asked: bool
    ) -> None:
        """``op`` was not answered within ``call_timeout`` (``limit``): kill the worker; its
        death fails the call. Should that failure not come within ``_KILL_GRACE`` (the
        worker was dead already and its last frames are never delivered), the call fails
        then, as it would have (``_late``)."""
        if outcome.settled:
            return
        logger.error(
            "worker pid %s did not answer %r within %s s; killing it",
            self.client.pid,
            op,
            limit,
            extra={"worker_pid": self.client.pid, "reason": "call_timeout"},
        )
        self.client.kill()  # the reply then fails with WorkerCrashed, on the reader thread
        error: BaseException = self._late(op, limit)
        if asked:
            error = _chained(NotDelivered(str(error)), error)
        with contextlib.suppress(RuntimeError):  # the timer is closed: the host shut down
            outcome.deadline = timer.call_later(
                _KILL_GRACE, functools.partial(outcome.finish, None, error)
            )

    def _late(self, op: str, limit: float | None) -> WorkerCrashed:
        """The error of a call whose worker was killed for not answering ``op`` within
        ``limit`` s, and whose death did not fail it within ``_KILL_GRACE`` after."""
        status = (
            f"killed: it did not answer {op!r} within {limit} s, and its death was not "
            f"reported within {_KILL_GRACE} s after"
        )
        return WorkerCrashed(self.client.pid, status, self.session_id)

    def _mapped(self, exc: BaseException) -> BaseException:
        """The error a call that failed with ``exc`` raises (see ``send``)."""
        if isinstance(exc, WorkerCrashed):
            return _chained(WorkerCrashed(exc.pid, exc.exit_status, self.session_id), exc)
        if isinstance(exc, SessionDown):
            if not exc.started:
                return _chained(NotDelivered(exc.remote_message), exc)
            detail = f"it died in worker pid {self.client.pid}: {exc.remote_message}"
            return _chained(SessionCrashed(self.session_id, detail), exc)
        return exc

    def _call(
        self,
        op: str,
        payload: dict[str, Any],
        timeout: float,
        on_reply: Callable[[Any], Any] | None = None,
    ) -> Any:
        """The reply's payload, read on this thread if no other reads the pipe
        (``WorkerClient.ask``); a worker that does not answer within ``call_timeout`` is
        killed (so the call fails with ``WorkerCrashed``), as in ``WorkerClient.call``.

        Raises:
            WorkerCrashed, SessionCrashed, NotDelivered, TimeoutError: as ``send`` says.
        """
        limit = self.call_timeout
        kills = limit is not None and limit <= timeout
        bound = limit if kills and limit is not None else timeout
        deadline = time.monotonic() + bound
        reply = self.client.ask(op, payload, on_reply, bound)
        try:
            if reply.done():  # the usual case: read on this thread, in ``ask``
                return reply.result()
            left = max(deadline - time.monotonic(), 0.0)
            if kills:
                return self._result_or_kill(op, reply, left)
            return self.client.wait(reply, left)
        except (WorkerCrashed, SessionDown) as exc:
            raise self._mapped(exc) from exc
        except TimeoutError:
            if reply.done():
                raise  # the error *is* the reply
            raise TimeoutError(
                f"session {self.session_id!r} did not answer within {timeout} s"
            ) from None
        finally:
            # This frame is in the call's error's traceback: kept as its local, ``reply``
            # (which holds the error) made a reference cycle of each failed call.
            del reply

    def _result_or_kill(self, op: str, reply: Reply, left: float) -> Any:
        try:
            try:
                return self.client.wait(reply, left)
            except TimeoutError:
                if reply.done():
                    raise
            logger.error(
                "worker pid %s did not answer %r within %s s; killing it",
                self.client.pid,
                op,
                self.call_timeout,
                extra={"worker_pid": self.client.pid, "reason": "call_timeout"},
            )
            self.client.kill()
            try:  # fails with WorkerCrashed (or the reply won the race)
                return reply.result(_KILL_GRACE)
            except TimeoutError:
                if reply.done():
                    raise
            raise self._late(op, self.call_timeout)
        finally:
            del reply  # (as in ``_call``: this frame is in the error's traceback)

    def finish_send(self, reply: dict[str, Any]) -> Message:
        """The answer of a ``send`` reply, after saving the checkpoint it carries (the
        messages this host lacks, and the rest: ``HistoryMirror``).

        The turn's ``turn_finished`` event came held back in the reply
        (``_client._hold_turn_finished``): it is published once the save is done, and
        the checkpoint's event mark covers it (``EventBuffer.reserve``), as in thread
        mode; a turn whose save fails has an ``error`` (with its ``turn``) instead.

        Runs on the thread that reads the reply. If the save raises, the turn is
        rolled back in the worker, as in thread mode: a ``rollback`` frame is
        written before the caller sees the exception, so the session runs it
        before any later call (the worker reads its pipe in order). Nobody
        waits for its reply: a session gone meanwhile restarts from its last
        checkpoint, which does not hold the turn either. What the save raised is
        raised again: an ``Exception`` (a ``CallAborted`` for a store's ``SystemExit``
        or ``KeyboardInterrupt`` off the main thread), or, on the main thread, those
        two as they are; any other ``BaseException`` (``GeneratorExit``,
        ``asyncio.CancelledError``) as a ``CheckpointAborted`` caused by it, as in thread
        mode (it fails the save, not the program).
        """
        answer = Message.from_dict(reply["message"])
        checkpoint = reply.get("checkpoint")
        finished = reply.get("turn_finished")  # held back until the save is done (``_client``)
        if checkpoint is None or self.checkpointer is None:
            if finished is not None:
                self._publish("turn_finished", finished)
            return answer
        events = self.events
        if finished is not None:
            events.reserve()  # the checkpoint's event mark covers the ``turn_finished``
        try:
            try:
                self.checkpointer(self.mirror.snapshot(checkpoint))
            except BaseException as exc:
                self._roll_back(exc, finished)
                if isinstance(exc, Exception) or ends_session(exc):
                    raise
                raise CheckpointAborted(exc) from exc
            if self.steer is not None:
                self.steer.saved()  # the turn's steering is used for good now
            if finished is not None:
                self._publish("turn_finished", finished)
        finally:
            if finished is not None:
                events.unreserve()
        return answer

    def _roll_back(self, error: BaseException, finished: dict[str, Any] | None) -> None:
        """The save of a turn's checkpoint raised ``error``: have the worker undo the turn
        and publish the turn's ``error`` event (see ``finish_send``).

        Whatever ``error`` is: a ``SystemExit`` or ``KeyboardInterrupt`` raised on the main
        thread (a blocking ``send`` saves there) still means the turn was not saved. Before,
        only an ``Exception`` rolled it back, and the worker kept the unsaved turn: the next
        call saw it, the next turn's checkpoint saved it after all, a restart lost it.
        """
        self.client.submit("rollback", {"session": self.session_id})
        turn = {} if finished is None else {"turn": finished.get("turn")}
        self._publish("error", {"error": repr(error), **turn})

    def _publish(self, type_: str, data: dict[str, Any]) -> None:
        """Publish an event of the turn being delivered. A subscriber's ``SystemExit`` (what
        ``EventBuffer`` raises: it ends the session) ends this session alone, as in thread
        mode; the call fails with ``SessionDown`` instead (``SessionCrashed`` to its caller).
        Raised on, the exit ended the thread delivering the reply: the pipe's reader thread,
        and with it the worker and all its sessions."""
        try:
            self.events.publish(type_, **data)
        except Exception:
            raise
        except BaseException as exc:
            raise self.client.end_session(self.session_id, exc) from exc


def _chained(error: BaseException, cause: BaseException) -> BaseException:
    """``error`` caused by ``cause`` (as ``raise error from cause`` would leave it)."""
    error.__cause__ = cause
    return error


def decode_history(history: list[dict[str, Any]]) -> list[Message]:
    """The messages of a ``history`` reply."""
    return [Message.from_dict(m) for m in history]


class _Steer:
    """Forwards the host's steering queue to the session's queue in the worker.

    Thread-safe. It also keeps, in this process, every text the worker has not
    yet used in an acknowledged turn (learnt from the session's ``steered``,
    ``turn_finished`` and ``error`` events), so that when the session ends, by a
    crash of its worker or a stop, ``release`` puts them back at the front of
    the host's queue for the next incarnation: nothing steered is lost with a
    worker, as nothing is lost with a session thread in thread mode.

    It watches the session's events only while it keeps a text (``_watch``), so a
    session nobody steers costs no subscriber call per event.

    A text forwarded while the session is being started waits until the ``start``
    frame is on the pipe (``start_written``): the worker refuses steering for a
    session it has not heard of, and a refused text would stay here, unused, for
    as long as the incarnation lives.
    """

    def __init__(self, client: WorkerClient, session_id: str, queue: SteeringQueue) -> None:
        self.client = client
        self.session_id = session_id
        self.queue = queue
        self._lock = threading.Lock()  # guards the lists, _unsubscribe and _released
        self._sent: list[str] = []  # in the worker's queue, oldest first
        self._taken: list[str] = []  # taken by the turn running there
        self._finished: list[str] = []  # taken by the turn that finished last (not yet saved)
        self._events: EventBuffer | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._released = False
        self._start_written = threading.Event()  # set once steering may go to the worker

    def start(self, events: EventBuffer) -> list[str]:
        """Forward from now on; return the texts that were waiting (they go with the start)."""
        self._events = events
        queued = self.queue.forward_to(self)
        with self._lock:
            self._sent[:0] = queued
            self._watch()
        return queued

    def start_written(self) -> None:
        """The session's ``start`` frame is on the worker's pipe: send steering from now on."""
        self._start_written.set()

    def _watch(self) -> None:
        """Subscribe to the session's events while a text is kept (caller holds ``_lock``):
        before it is sent, so its ``steered`` event is seen; until nothing is kept."""
        kept = self._sent or self._taken or self._finished
        events = self._events
        if kept and self._unsubscribe is None and not self._released and events is not None:
            self._unsubscribe = events.subscribe(self._observe)
        elif not kept and self._unsubscribe is not None:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            unsubscribe()

    def __call__(self, text: str) -> None:
        with self._lock:
            late = self._released
            if not late:
                self._sent.append(text)
                self._watch()
        if late:  # released while ``put`` was handing it here: queue it the usual way
            self.queue.put(text)
            return
        self._start_written.wait(_START_WRITE_WAIT)  # at once, but during a start
        with self._lock:
            if self._released:  # the start failed, or the session ended: ``release``
                # requeued the text
                return
        try:
            payload = {"session": self.session_id, "text": text}
            self.client.call("steer", payload, _STEER_WAIT, kill_late=False)
        except SteeringQueueFull:
            with self._lock:
                refused = self._forget_sent(text)
            if refused:
                raise
            # ``release`` ran meanwhile and requeued the text here: it was accepted after all.
        except (WorkerCrashed, RemoteError, TimeoutError):
            pass  # the session is ending: ``release`` hands the text to the next incarnation

    def saved(self) -> None:
        """The checkpoint of the turn that just ended is saved: the texts that turn took
        are used for good (the checkpoint holds them in its history), so a ``release``
        from now on must not queue them again, even before ``turn_finished`` is seen.

        Before, they were dropped only at ``turn_finished``: a session ending in between
        (a stop answered, or a subscriber of ``turn_finished`` that ran before this
        forwarder's) released them after the save, and the next incarnation got them a
        second time."""
        with self._lock:
            self._finished, self._taken = self._taken, []
            self._watch()

    def release(self) -> None:
        """Stop forwarding; queue again here what the worker never used in a finished turn."""
        self.queue.stop_forwarding(self)
        with self._lock:
            self._released = True
            unused, self._sent, self._taken = self._taken + self._sent, [], []
            if self._unsubscribe is not None:
                unsubscribe, self._unsubscribe = self._unsubscribe, None
                unsubscribe()
        self._start_written.set()  # a text waiting for the start is among ``unused``
        self.queue.requeue(unused)

    def _observe(self, event: Event) -> None:
        with self._lock:
            if event.type == "steered":
                text = event.data.get("text")
                if self._forget_sent(text):
                    self._taken.append(str(text))
            elif event.type == "turn_started":
                self._finished.clear()
            elif event.type == "turn_finished":
                self._finished, self._taken = self._taken, []
            elif event.type == "error":  # rolled back: requeued in the worker
                # The turn's own texts, or (its checkpoint could not be saved here,
                # so ``finish_send`` has it rolled back) those of the finished turn.
                self._sent[:0] = self._taken or self._finished
                self._taken, self._finished = [], []
            self._watch()

    def _forget_sent(self, text: object) -> bool:
        if text in self._sent:
            self._sent.remove(text)
            return True
        return False


def start_in_worker(pool: WorkerPool, launch: SessionLaunch) -> pykka.ActorRef[Any]:
    """Start the session on the least-loaded worker and its proxy here; return the proxy ref.

    Runs the plugins' ``session_start`` in the worker before returning. A worker
    that dies during the start (it may have been dying already) costs a retry
    on another one, up to ``_START_ATTEMPTS`` times, not a restart of the session.

    Raises:
        PluginError: a ``session_start`` hook raised (its cause names the original).
        TemplateNotPicklable: the template cannot be sent to a worker.
        TemplateNotLoadable: the worker could not load the template.
        WorkerCrashed: the workers kept dying during the start, or none is alive, or
            the start outlived ``worker_call_timeout`` (its worker was killed for it).
    """
    for attempt in range(_START_ATTEMPTS):
        try:
            return _start_once(pool, launch)
        except _StartKilled as stuck:
            raise stuck.crashed from None  # the start itself hung: another worker would too
        except WorkerCrashed:
            if attempt == _START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class _StartKilled(Exception):
    """A start outlived ``worker_call_timeout`` and its worker was killed for it: the start
    fails with ``crashed`` and is not tried again elsewhere."""

    def __init__(self, crashed: WorkerCrashed) -> None:
        super().__init__(str(crashed))
        self.crashed = crashed


def _call_start(
    pool: WorkerPool,
    client: WorkerClient,
    op: str,
    payload: Any,
    written: Callable[[], None] | None = None,
) -> None:
    """Write a request of the start (``load_template``, then ``start``) and wait for its
    reply; ``written``, if given, is called once the request is on the pipe.

    Without ``worker_call_timeout`` the wait has no bound, as a start in thread mode
    has none: the host stops waiting after its ``call_timeout`` and stops the session
    once the start is over. It must not kill the worker, whose other sessions are
    fine (before, it did, and the start then killed the next worker in turn). With
    one, a start that outlives it (a ``session_start`` hook, or an import of the
    template's modules, that takes longer) kills its worker, as any call does
    (``_StartKilled``), and only that one: another worker would take as long.

    Raises:
        _StartKilled: the request outlived ``worker_call_timeout``.
        Exception: what the request raised in the worker, or ``WorkerCrashed``.
    """
    reply = client.submit(op, payload)
    if written is not None:
        written()
    try:
        client.wait(reply, pool.call_timeout)
    except TimeoutError:
        if reply.done():
            raise  # the error *is* the reply
        logger.error(
            "worker pid %s did not answer %r within %s s; killing it",
            client.pid,
            op,
            pool.call_timeout,
            extra={"worker_pid": client.pid, "reason": "call_timeout"},
        )
        client.kill()
        try:
            reply.result(None)  # fails with WorkerCrashed (or the reply won the race)
        except WorkerCrashed as exc:
            raise _StartKilled(exc) from exc


def _await_serving(client: WorkerClient, timeout: float) -> None:
    """Return once ``client``'s worker serves. A replacement placed on at once may still be
    starting (importing the host's modules, running ``worker_initializer``): the start's
    requests are written, and timed by ``worker_call_timeout``, only then; before, a
    replacement slower to start than that timeout was killed for it, each of its own
    replacements too, and the session was given up.

    Raises:
        WorkerCrashed: the worker exited before it served (the start is tried elsewhere).
        TimeoutError: it did not serve within ``timeout`` seconds.
    """
    if client.ready:
        return
    if not client.wait_ready(timeout):
        raise WorkerCrashed(client.pid, client.exit_status or "it exited before serving")


def _start_once(pool: WorkerPool, launch: SessionLaunch) -> pykka.ActorRef[Any]:
    session_id, snapshot = launch.session_id, launch.snapshot
    client = pool.place(session_id, launch.events, launch.timeout)
    forward = _Steer(client, session_id, launch.steering)
    try:
        _await_serving(client, launch.timeout)
        load = functools.partial(_call_start, pool, client, "load_template")
        key = pool.load_template(client, launch.template, launch.model, session_id, load)
        queued = forward.start(launch.events)
        payload = {
            "session": session_id,
            "key": key,
            # The plain state, not the snapshot's bytes: the parent already read
            # (and migrated, with its store's registry) the checkpoint.
            "restore": None
            if snapshot is None
            else {
                "state": snapshot.state,
                "stripped": list(snapshot.stripped_fields),
                # The store vouched for the messages: the worker need not check them again.
                "checked": checked_messages(snapshot) is not None,
            },
            "options": {
                "max_steps": launch.max_steps,
                "checkpoint_every": launch.checkpoint_every,
                "max_steering_queue": launch.steering.limit,
                "metadata": launch.metadata,
                "steering": queued,
                "credentials": _plain_credentials(launch.credentials),
                "epoch": launch.epoch,
            },
        }
        _call_start(pool, client, "start", payload, forward.start_written)
    except BaseException:
        forward.release()  # a no-op if it never started forwarding
        pool.release(session_id, client)
        raise
    link = SessionLink(
        client, session_id, launch.events, launch.save, pool.call_timeout, steer=forward
    )
    try:
        ref: pykka.ActorRef[Any] = WorkerSession.start(pool, link, forward)
    except BaseException:
        forward.release()
        client.submit("stop", {"session": session_id})
        pool.release(session_id, client)
        raise
    pool.attach(session_id, client, ref, link)
    return ref


def _plain_credentials(credentials: Credentials | None) -> dict[str, Any] | None:
    """``credentials`` as the ``start`` frame carries them (the worker rebuilds them)."""
    if credentials is None:
        return None
    return {"api_key": credentials.api_key, "headers": dict(credentials.headers)}


class WorkerSession(SupervisedActor):
    """The proxy actor of one session in a worker: the session's actor for the registry,
    monitors and the supervisor. Talk to it through its ref, like any actor (thread-safe
    that way); it takes no calls (``SessionLink`` carries them), only stops and kills."""

    def __init__(self, pool: WorkerPool, link: SessionLink, steer: _Steer) -> None:
        super().__init__()
        self.pool = pool
        self.client = link.client
        self.session_id = link.session_id
        self._steer = steer

    def on_receive(self, message: Any) -> Any:
        raise TypeError(
            f"the proxy of session {self.session_id!r} takes no messages ({message!r}); "
            "call the AgentHost"
        )

    def on_stop(self) -> None:
        """Stopped on purpose (hibernate, stop_session, shutdown): stop the remote session."""
        self._release(abnormal=False)

    def on_failure(self, *_exc_info: object) -> None:
        """Crashed (killed, or lost with its worker): end the remote session as a crash
        too, so its plugins' ``session_end`` sees ``error`` as in thread mode."""
        self._release(abnormal=True)

    def _release(self, *, abnormal: bool) -> None:
        """End the remote session and wait for it: its last reply (and the checkpoint that
        reply carries) is handled before this proxy's death is reported."""
        self._steer.queue.stop_forwarding(self._steer)
        with contextlib.suppress(Exception):
            # Waited for through the client, which reads the pipe when nobody else does: the
            # thread delivering frames may be a subscriber's, waiting for this stop. Written
            # to a dead worker, the stop fails only after the session's last frames.
            payload = {"session": self.session_id, "abnormal": abnormal}
            stop = self.client.submit("stop", payload)
            self.client.wait(stop, self.pool.call_timeout or 30.0)
        self._steer.release()  # after the stop: the last turn's events are in by then
        self.pool.release(self.session_id, self.client)


WorkerSession.__module__ = "supervisor"
