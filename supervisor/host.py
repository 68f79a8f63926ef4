"""``AgentHost``: the one facade a host application uses.

It ties the parts together: every session is an ``AgentSession`` actor, a
dynamic ``permanent`` child of one root ``Supervisor`` with its own restart
intensity; a ``SessionStore`` registers it and evicts it the moment it dies;
a ``CheckpointStore`` holds its snapshots. A supervisor restart of a crashed
session *is* a resume from its last checkpoint on the same template, so a
crash costs at most the turn that was running (which its caller saw fail).

Durability: by default every completed turn is checkpointed on the
session's thread before ``send`` returns, so every answer a caller has
received survives any crash of the session or of the whole process.

Process mode (``workers=N``): each session runs in one of N worker processes
and is represented here by a proxy actor, so everything above holds unchanged;
a worker that dies (signal, segfault, ``os._exit``, memory limit) crashes only
its own sessions, which are resumed from their last checkpoints on a live
worker. A ``send`` in flight on a dying worker raises ``WorkerCrashed`` (a
``SessionCrashed``: not acknowledged, retry it).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self, Unpack

import pykka

from actors import (
    AgentSession,
    AgentTemplate,
    EventBatch,
    GetHistory,
    Message,
    Model,
    ProviderRegistry,
    Send,
    Snapshot,
    Subscriber,
    TakeSnapshot,
)
from supervisor import _at_exit
from supervisor._actor import kill, supervised_class
from supervisor._data_dir import DataDirLock
from supervisor._host_record import SessionInfo, SessionRecord
from supervisor._lifecycle import ExitReason, describe_reason, is_abnormal, lifecycle_of
from supervisor._session_attrs import SessionMetadata, validate
from supervisor.checkpoint_store import CheckpointStore
from supervisor.child_spec import ChildSpec
from supervisor.errors import (
    CheckpointNotFound,
    ChildStartError,
    SessionAlreadyExists,
    SessionCrashed,
    SessionFailed,
    SessionNotFound,
)
from supervisor.handle import SupervisorHandle
from supervisor.intensity import RestartIntensity
from supervisor.session_store import SessionEntry, SessionStore
from supervisor.sqlite_store import SQLiteCheckpointStore
from supervisor.workers import SessionLost, WorkerPool
from supervisor.workers._pool import WorkerInfo
from supervisor.workers._proxy import NotDelivered, SessionLink, start_in_worker

__all__ = ["AgentHost"]

logger = logging.getLogger("supervisor.host")

_SessionActor = supervised_class(AgentSession)
DEFAULT_DATA_DIR = "sessionvisor-data"
_SHARED_ATTR_SETS = 1024  # distinct attribute dicts shared between records, at most


class AgentHost:
    """Runs many agent sessions, survives any one crashing, resumes them from checkpoints.

    Thread-safe: any number of threads may call it at once. Calls to one
    session are serialized (by its actor, and by a per-session lock for the
    operations that change what runs it); calls to different sessions run in
    parallel. Use it as a context manager, or call ``shutdown``.

    A host still running at interpreter exit is shut down then, as by
    ``shutdown`` (final checkpoints, sessions stopped, workers stopped and
    joined, an owned store closed), so a program that forgets it still exits.
    That happens once the main thread has finished, before Python waits for
    the other non-daemon threads (as for ``concurrent.futures`` executors): a
    thread still using the host after that gets ``SessionNotFound`` or
    ``RuntimeError``, so shut it down yourself if such threads should finish
    first. Each step is bounded by the host's timeouts, as in ``shutdown``; a
    session abandoned in a stuck tool in thread mode still holds the process
    until the tool returns (Python cannot kill a thread).

    Args:
        store: Where checkpoints go; defaults to a ``SQLiteCheckpointStore`` in
            ``data_dir`` (the host then owns and closes it).
        providers: Resolves model strings of templates; defaults to a registry
            knowing ``echo``.
        data_dir: Directory of the default store; defaults to
            ``./sessionvisor-data``, logged (``supervisor.host``, INFO) when the
            host starts. The host owns the directory while it runs: another
            host on it raises ``DataDirLocked``.
        checkpoint_every: Checkpoint after every N-th completed turn, durably
            before ``send`` returns; ``None`` checkpoints only on demand (and at
            hibernation, ``stop_session`` and ``shutdown``).
        max_restarts: Restarts allowed per session within ``max_seconds``;
            beyond that the session is given up (``SessionFailed``) and the
            host and other sessions go on.
        max_seconds: Window of ``max_restarts``.
        hibernate_after_ms: Idle time after which a session is checkpointed and
            its actor stopped (no thread held); ``None`` never. A session's own
            ``hibernate_after_ms`` attribute overrides it.
        auto_hibernate: Run a background sweeper that hibernates idle sessions;
            with ``False`` call ``hibernate_idle`` yourself (tests, custom loops).
        clock: Monotonic seconds, for restart intensity and idleness; injectable.
        call_timeout: Default seconds a ``send`` may take.
        restart_wait: Seconds a call waits for a crashed session to come back.
        max_steps: Most model calls in one turn of each session.
        workers: Run sessions in this many worker processes (``None``: in
            threads of this process). Templates must then be picklable by
            cloudpickle (``TemplateNotPicklable`` names the part that is not).
        worker_memory_limit: RLIMIT_AS of each worker in bytes; a tool
            allocating past it kills its worker (its sessions are resumed).
        worker_initializer: Called with ``*worker_initargs`` in each worker
            process, replacements included, before it hosts any session: set up
            logging, environment, caches (like ``ProcessPoolExecutor``'s
            ``initializer``). Sent with cloudpickle, so a lambda or closure
            works. If it raises, the worker cannot start: ``WorkerStartError``.
        worker_initargs: Arguments of ``worker_initializer`` (a tuple).
        worker_call_timeout: Seconds a call may take in a worker before the
            worker is SIGKILLed and replaced (``None``: no limit).
        worker_start_method: ``forkserver`` (default where available) or ``spawn``.
        worker_max_restarts: Worker deaths allowed within ``worker_max_seconds``
            (on ``clock``); beyond that the pool logs it and stops replacing
            workers, and sessions that need one fail to restart.
        worker_max_seconds: Window of ``worker_max_restarts``.
    """

    def __init__(
        self,
        store: CheckpointStore | None = None,
        providers: ProviderRegistry | None = None,
        *,
        data_dir: str | Path | None = None,
        checkpoint_every: int | None = 1,
        max_restarts: int = 3,
        max_seconds: float = 5.0,
        hibernate_after_ms: int | None = None,
        auto_hibernate: bool = True,
        clock: Callable[[], float] = time.monotonic,
        call_timeout: float = 120.0,
        restart_wait: float = 10.0,
        max_steps: int = 8,
        workers: int | None = None,
        worker_memory_limit: int | None = None,
        worker_initializer: Callable[..., object] | None = None,
        worker_initargs: tuple[Any, ...] = (),
        worker_call_timeout: float | None = None,
        worker_start_method: str | None = None,
        worker_max_restarts: int = 50,
        worker_max_seconds: float = 10.0,
    ) -> None:
        if checkpoint_every is not None and (
            isinstance(checkpoint_every, bool)
            or not isinstance(checkpoint_every, int)
            or checkpoint_every < 1
        ):
            raise ValueError(
                f"checkpoint_every must be a positive integer or None, got {checkpoint_every!r}"
            )
        if hibernate_after_ms is not None and (
            isinstance(hibernate_after_ms, bool)
            or not isinstance(hibernate_after_ms, int)
            or hibernate_after_ms < 1
        ):
            raise ValueError(
                f"hibernate_after_ms must be a positive integer or None, got {hibernate_after_ms!r}"
            )
        RestartIntensity(max_restarts, max_seconds, clock)  # validates, with the supervisor's rules
        self._pool: WorkerPool | None = None
        if workers is None:
            _refuse_worker_options(
                worker_memory_limit=worker_memory_limit,
                worker_initializer=worker_initializer,
                worker_initargs=worker_initargs or None,
                worker_call_timeout=worker_call_timeout,
                worker_start_method=worker_start_method,
            )
        else:
            self._pool = WorkerPool(
                workers,
                memory_limit=worker_memory_limit,
                initializer=worker_initializer,
                initargs=worker_initargs,
                call_timeout=worker_call_timeout,
                start_method=worker_start_method,
                max_restarts=worker_max_restarts,
                max_seconds=worker_max_seconds,
                clock=clock,
            )
        self._owns_store = store is None
        self._dir_lock: DataDirLock | None = None
        if store is None:
            directory = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
            try:
                self._dir_lock = DataDirLock(directory)  # DataDirLocked: another host owns it
                store = SQLiteCheckpointStore(directory / "checkpoints.db")
            except BaseException:
                if self._dir_lock is not None:
                    self._dir_lock.release()
                if self._pool is not None:
                    self._pool.close()
                raise
            logger.info("checkpoints in %s", directory / "checkpoints.db")
        self.store: CheckpointStore = store
        self.providers = providers if providers is not None else ProviderRegistry()
        self.checkpoint_every = checkpoint_every
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self.hibernate_after_ms = hibernate_after_ms
        self.call_timeout = call_timeout
        self.restart_wait = restart_wait
        self.max_steps = max_steps
        self._clock = clock
        self._records: dict[str, SessionRecord] = {}
        self._by_tenant: dict[str, dict[str, None]] = {}
        self._attr_dicts: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # guards _records and _by_tenant
        self._changed = threading.Condition()  # guards status/ref of every record
        self._closed = False  # set (under _lock) by the one shutdown that runs
        self._shut_down = threading.Event()  # set when that shutdown has finished
        self.registry = SessionStore(on_evict=self._on_evict)
        self._root = SupervisorHandle.start(
            max_restarts=None,
            clock=clock,
            name="sessionvisor-host",
            on_give_up=self._on_give_up,
            timeout=call_timeout,
        )
        self._sweeper: _Sweeper | None = None
        if auto_hibernate and hibernate_after_ms is not None:
            self._sweeper = _Sweeper(self, interval=max(0.05, hibernate_after_ms / 4000))
            self._sweeper.start()
        self._exit_token = _at_exit.register(self)

    # -- starting and resuming -------------------------------------------------

    def start_session(
        self,
        template: AgentTemplate,
        session_id: str | None = None,
        tenant_id: str = "default",
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str:
        """Start a new session on ``template`` under the supervisor and register it.

        Runs the plugins' ``session_start``. ``attrs`` are the registry metadata
        (``model`` and ``plugins`` default to the template's).

        Raises:
            SessionAlreadyExists: the id is live or hibernated here, or has
                checkpoints from an earlier life (``resume`` it, or delete them).
            PluginError: a ``session_start`` hook raised; nothing was registered.
            RegistryProfileMissing, UnknownModel: the template's model string
                cannot be resolved.
            TypeError, ValueError: an invalid attribute (the message names it).
        """
        session_id = session_id if session_id is not None else uuid.uuid4().hex
        self._check_open()
        if self.store.list(session_id):
            raise SessionAlreadyExists(session_id)
        record = self._new_record(session_id, template, tenant_id, api_key, dict(attrs))
        return self._launch(record)

    def resume(
        self,
        session_id: str,
        template: AgentTemplate,
        checkpoint_id: str | None = None,
        *,
        tenant_id: str | None = None,
        api_key: str | None = None,
        **attrs: Unpack[SessionMetadata],
    ) -> str:
        """Bring a session back from its latest (or a given) checkpoint on ``template``.

        Load -> migrate -> resolve the model -> build on the template (tools,
        model, instructions and plugins come from the template, never from the
        snapshot) -> start under the supervisor -> every plugin's
        ``session_start`` with its restored state and stripped fields -> register.
        The tenant defaults to the one saved in the snapshot; the API key is
        never saved, so pass it again if the session had one.

        Raises:
            SessionAlreadyExists: the session is live or hibernated on this host.
            CheckpointNotFound: no (such) checkpoint.
            SnapshotDecodeError: the checkpoint cannot be read.
            RegistryProfileMissing: its model names a profile that is not
                registered; register it and call again.
            PluginError: a ``session_start`` hook raised.
        """
        self._check_open()
        snapshot = self.store.load(session_id, checkpoint_id)
        self._resolve_model(template)
        if checkpoint_id is not None:
            # Continuing from an older checkpoint abandons the turns saved after
            # it: make it the newest, so a crash restart comes back here too.
            snapshot = Snapshot.new(
                session_id=session_id, state=snapshot.state, label=f"resumed from {checkpoint_id}"
            )
            self.store.save(snapshot)
        saved_tenant = snapshot.state.get("metadata", {}).get("tenant_id")
        tenant = tenant_id or (saved_tenant if isinstance(saved_tenant, str) else "default")
        record = self._new_record(
            session_id, template, tenant, api_key, dict(attrs), resume_from=snapshot
        )
        return self._launch(record)

    def resume_all(self, template: AgentTemplate | Callable[[str], AgentTemplate]) -> list[str]:
        """Resume every session of the store that is not live here (after a host restart).

        ``template`` is one template for all, or a function of the session id.
        A session that fails to resume is logged and skipped; the ids resumed
        are returned.
        """
        resumed = []
        for session_id in self.store.sessions():
            with self._lock:
                if session_id in self._records:
                    continue
            chosen = template(session_id) if callable(template) else template
            try:
                resumed.append(self.resume(session_id, chosen))
            except Exception:
                logger.exception("could not resume session %r", session_id)
        return resumed

    # -- talking to sessions -----------------------------------------------------

    def send(self, session_id: str, text: str, timeout: float | None = None) -> Message:
        """Run one turn and return the assistant's answer.

        Reactivates a hibernated session first, and waits (up to
        ``restart_wait``) for one that is being restarted after a crash. With
        the default checkpoint policy the turn is saved before this returns.

        Raises:
            SessionNotFound: no such session on this host.
            SessionFailed: it was given up after repeated crashes.
            SessionCrashed: it crashed during the turn (not acknowledged: retry).
            TimeoutError: no answer within ``timeout`` (the turn may go on).
            Exception: what the model raised; the session lives on and the
                turn is rolled back.
        """
        if not isinstance(text, str):
            raise TypeError(f"send() takes the user's text as a str, got {type(text).__name__}")
        record = self._record(session_id)
        wait = self.call_timeout if timeout is None else timeout
        with self._operation(record, wait):
            try:
                return self._send_once(record, text, wait)
            except _NeverHandled:
                # The actor died before it took the message (a kill queued ahead
                # of it, say): nothing ran, so send it to the restarted session.
                return self._send_once(record, text, wait, retry=False)
            finally:
                record.last_active = self._clock()

    def _send_once(
        self, record: SessionRecord, text: str, wait: float, *, retry: bool = True
    ) -> Message:
        ref = self._live_ref(record)
        if self._pool is not None:
            link = self._pool.link_of(record.session_id, ref)
            if link is not None:
                return self._send_in_worker(record, ref, link, text, wait, retry=retry)
        try:
            answer: Message = _ask(ref, Send(text), wait)
        except pykka.ActorDeadError as exc:
            if exc.__cause__ is None and retry:
                raise _NeverHandled from exc
            if isinstance(exc.__cause__, SessionLost):  # process mode: WorkerCrashed & co
                raise exc.__cause__.error from exc
            raise SessionCrashed(record.session_id, f"it died during the turn ({exc})") from exc
        except pykka.Timeout as exc:
            raise TimeoutError(
                f"session {record.session_id!r} did not answer within {wait} s"
            ) from exc
        return answer

    def _send_in_worker(
        self,
        record: SessionRecord,
        ref: pykka.ActorRef[Any],
        link: SessionLink,
        text: str,
        wait: float,
        *,
        retry: bool,
    ) -> Message:
        """Process mode: the turn goes straight to the worker from this thread.

        Skipping the proxy actor saves a thread hop per call; the proxy stays the
        session's actor for everything else. Crash semantics are the proxy's:
        ``WorkerCrashed``/``SessionCrashed`` when the worker or session died
        during the turn; a turn the session never began is sent again, once, to
        the next incarnation (after the proxy of this one has gone).
        """
        try:
            return link.send(text, wait)
        except SessionCrashed:  # WorkerCrashed too: the pool or the worker's report kills the
            self._await_end(ref)  # proxy; as in thread mode, it is evicted when this raises
            raise
        except NotDelivered as exc:
            self._await_end(ref)
            if retry:
                raise _NeverHandled from exc
            raise SessionCrashed(record.session_id, f"it ended before the turn ({exc})") from exc

    def _await_end(self, ref: pykka.ActorRef[Any]) -> None:
        """Wait (up to ``restart_wait``) until a dying session actor's Down notices are out."""
        lifecycle = lifecycle_of(ref)
        if lifecycle is not None:
            lifecycle.finished.wait(self.restart_wait)

    def steer(self, session_id: str, text: str) -> None:
        """Queue ``text`` to be injected before the session's next model call, even mid-turn.

        Raises:
            SessionNotFound: no such session.
            SteeringQueueFull: too many steering messages are waiting.
        """
        self._record(session_id).steering.put(text)

    def history(self, session_id: str) -> list[Message]:
        """The conversation so far (from the checkpoint when the session is hibernated).

        Raises:
            SessionNotFound: no such session on this host.
            TimeoutError: the session did not answer within ``call_timeout``.
        """
        record = self._record(session_id)
        ref = record.ref
        if record.status == "hibernated" or ref is None:
            return self.store.load(session_id).messages()
        try:
            history: list[Message] = self._ask_live(record, ref, GetHistory())
        except pykka.ActorDeadError:
            return self.store.load(session_id).messages()
        return history

    def events(self, session_id: str, since: int | None = None) -> EventBatch:
        """The session's events after cursor ``since``; one stream across restarts."""
        return self._record(session_id).events.since(since)

    def subscribe(self, session_id: str, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` with every future event of the session, across restarts.

        It runs on the thread that publishes: the session's for turn events (in
        process mode, the thread reading the worker's pipe: usually the caller
        of ``send``), the dying actor's for ``crashed`` (after the registry
        evicted the session and before the supervisor restarts it), the
        supervisor's for ``resumed`` and ``given_up``. It may call the host for
        another session, and ``history`` or ``checkpoint`` for its own, in either
        mode. Returns a function that unsubscribes.
        """
        return self._record(session_id).events.subscribe(subscriber)

    def checkpoint(self, session_id: str, label: str | None = None) -> Snapshot:
        """Save a checkpoint now and return it (the latest one, relabelled, if hibernated).

        Raises:
            SessionNotFound: no such session on this host.
            TimeoutError: the session did not answer within ``call_timeout``.
        """
        record = self._record(session_id)
        ref = record.ref
        if ref is not None and record.status == "active":
            with contextlib.suppress(pykka.ActorDeadError):
                snapshot: Snapshot = self._ask_live(record, ref, TakeSnapshot(label))
                self.store.save(snapshot)
                return snapshot
        latest = self.store.load(session_id)
        snapshot = Snapshot.new(session_id=session_id, state=latest.state, label=label)
        self.store.save(snapshot)
        return snapshot

    def _ask_live(self, record: SessionRecord, ref: pykka.ActorRef[Any], message: object) -> Any:
        """Ask a live session for its history or a snapshot, within ``call_timeout``.

        In process mode the request goes to the worker from this thread, as
        ``send`` does: no proxy hop, and a subscriber callback (which runs on the
        thread reading the worker's pipe) may call this for a session on the
        same worker without waiting on itself. In thread mode a subscriber runs
        on its session's own thread; asked from there, the session answers
        directly instead of through its inbox, which it would never read.

        Raises:
            pykka.ActorDeadError: the session is gone (its checkpoint has the answer).
            TimeoutError: no answer within ``call_timeout``.
        """
        link = None if self._pool is None else self._pool.link_of(record.session_id, ref)
        if link is not None:
            try:
                if isinstance(message, TakeSnapshot):
                    return link.snapshot(message.label, self.call_timeout)
                return link.history(self.call_timeout)
            except NotDelivered as exc:
                raise pykka.ActorDeadError(str(exc)) from exc
        own = _own_session(ref)
        if own is not None:  # a subscriber, on the session's thread: asking would wait on itself
            return (
                own.snapshot(message.label) if isinstance(message, TakeSnapshot) else own.history()
            )
        try:
            return _ask(ref, message, self.call_timeout)
        except pykka.Timeout as exc:
            raise TimeoutError(
                f"session {record.session_id!r} did not answer within {self.call_timeout} s"
            ) from exc

    def kill(self, session_id: str, reason: str = "killed") -> None:
        """Terminate the session abnormally, as OTP's ``exit(Pid, kill)``: a crash.

        The registry evicts it and the supervisor resumes it from its last
        checkpoint (restart intensity applies). Takes effect when the session
        finishes its current message: Python cannot interrupt a thread.
        """
        record = self._record(session_id)
        if record.ref is not None:
            kill(record.ref, reason)

    # -- listing, hibernation, stopping ------------------------------------------

    def list_sessions(self, tenant_id: str | None = None) -> list[SessionInfo]:
        """Every session this host knows (live, restarting, hibernated, failed)."""
        with self._lock:
            if tenant_id is None:
                records = list(self._records.values())
            else:
                records = [self._records[s] for s in self._by_tenant.get(tenant_id, ())]
        return [r.info() for r in records]

    def workers(self) -> list[WorkerInfo]:
        """The live worker processes, oldest first, each with the sessions placed on it.

        ``[]`` in thread mode (``workers=None``) and after ``shutdown``. Thread-safe:
        a snapshot taken under the worker pool's lock, consistent in itself (a
        session is listed on one worker at most), though workers may die and be
        replaced the moment it returns. A worker that was killed stays listed
        until the host has noticed its death (its reader thread does at once, via
        the process sentinel); its replacement is listed once it is started.
        """
        return [] if self._pool is None else self._pool.info()

    def wait_for_workers(self, timeout: float | None = None) -> bool:
        """Wait until all ``workers`` worker processes serve; for readiness checks and for
        operators after a worker died (its replacement takes a moment to start).

        Returns True once they do (at once in thread mode), False after
        ``timeout`` seconds, or at once when no replacement will come: the host
        gave up replacing workers (``workers_given_up``) or was shut down.
        Thread-safe.
        """
        return self._pool is None or self._pool.wait_for_workers(timeout)

    @property
    def worker_deaths(self) -> int:
        """How many worker processes died since the host started, shutdown excepted.

        Every death counts: a kill, a crash, a call timeout, a worker that could
        not start. For monitoring: a count that keeps rising means tools or
        models are taking their workers down. Always 0 in thread mode.
        Thread-safe.
        """
        return 0 if self._pool is None else self._pool.deaths

    @property
    def workers_given_up(self) -> bool:
        """Whether worker processes died more than ``worker_max_restarts`` times within
        ``worker_max_seconds`` and the host stopped replacing them.

        Once true it stays true for the host's life (the pool logs it as an error
        when it happens): workers still alive keep serving, and a session that
        needs a worker when none is left fails to restart (``SessionFailed``
        once its own restart intensity is spent). Always false in thread mode.
        Thread-safe.
        """
        return self._pool is not None and self._pool.gave_up

    def hibernate(self, session_id: str) -> bool:
        """Checkpoint the session and stop its actor now; False if it was busy or not active."""
        record = self._record(session_id)
        if not record.op_lock.acquire(blocking=False):
            return False
        try:
            return self._hibernate(record)
        finally:
            record.op_lock.release()

    def hibernate_idle(self) -> list[str]:
        """Hibernate every active session idle for longer than its limit; returns their ids."""
        now = self._clock()
        with self._lock:
            records = list(self._records.values())
        done = []
        for record in records:
            limit = record.hibernate_after
            if (
                limit is not None
                and record.status == "active"
                and now - record.last_active >= limit
                and self.hibernate(record.session_id)
            ):
                done.append(record.session_id)
        return done

    def stop_session(self, session_id: str) -> None:
        """Stop a session normally: final checkpoint, evicted, not restarted, forgotten."""
        record = self._record(session_id)
        with self._operation(record, self.call_timeout):
            if record.status == "active" and record.ref is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    self.store.save(_ask(record.ref, TakeSnapshot(), self.call_timeout))
            self._set(record, "stopped", None)
            with contextlib.suppress(Exception):
                self._root.terminate_child(session_id)
            self._forget(record)

    def shutdown(self) -> None:
        """Checkpoint every live session, stop them in reverse start order, close the store.

        Idempotent. Sessions keep their checkpoints, so a new host on the same
        store can ``resume_all``. A host never shut down is shut down this way
        at interpreter exit (see the class docstring).
        """
        records = self._close()
        if records is not None:
            self._stop_all(records)

    def _close(self) -> list[SessionRecord] | None:
        """Mark the host closed; the records to stop, or ``None`` if another call did it."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
            records = list(self._records.values())
        _at_exit.unregister(self._exit_token)
        return records

    def _stop_all(self, records: list[SessionRecord]) -> None:
        try:
            if self._sweeper is not None:
                self._sweeper.stop()
            for record in records:
                ref = record.ref
                if record.status == "active" and ref is not None:
                    try:
                        self.store.save(_ask(ref, TakeSnapshot(), self.call_timeout))
                    except Exception:
                        logger.exception("final checkpoint of %r failed", record.session_id)
                self._set(record, "stopped", None)
            abandoned = self._root.stop()
            if abandoned:
                logger.warning("sessions that did not stop in time: %s", abandoned)
            if self._pool is not None:
                self._pool.close()
            if self._owns_store:
                self.store.close()
            if self._dir_lock is not None:
                self._dir_lock.release()
        finally:
            self._shut_down.set()

    def _shutdown_at_exit(self) -> None:
        """``shutdown`` at interpreter exit, if the program never called it.

        Runs on the main thread once it has finished, before Python joins the
        non-daemon threads (the actors'). If another thread is already shutting
        the host down, waits for it, up to ``call_timeout``.
        """
        records = self._close()
        if records is None:
            logger.debug("waiting for another thread's shutdown of %r at exit", self)
            self._shut_down.wait(self.call_timeout)
            return
        logger.info("shutting down an AgentHost left running at interpreter exit")
        self._stop_all(records)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # -- internals -------------------------------------------------------------

    def _new_record(  # noqa: PLR0917 (internal; mirrors start_session's parameters)
        self,
        session_id: str,
        template: AgentTemplate,
        tenant_id: str,
        api_key: str | None,
        attrs: dict[str, Any],
        resume_from: Snapshot | None = None,
    ) -> SessionRecord:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
        if not isinstance(template, AgentTemplate):
            raise TypeError(f"template must be an actors.AgentTemplate, got {template!r}")
        attrs.setdefault("model", template.model_string)
        attrs.setdefault("plugins", [p.name for p in template.plugins])
        validate({**attrs, "tenant_id": tenant_id, "api_key": api_key})
        attrs = self._shared_attrs(attrs)
        own_limit = attrs.get("hibernate_after_ms") or self.hibernate_after_ms
        record = SessionRecord(
            session_id,
            template,
            tenant_id=tenant_id,
            fingerprint=None if api_key is None else self.registry.fingerprint(api_key),
            attrs=attrs,
            created_at=int(time.time() * 1000),
            hibernate_after=None if own_limit is None else own_limit / 1000,
            resume_from=resume_from,
        )
        with self._lock:
            self._check_open()
            existing = self._records.get(session_id)
            if existing is not None and existing.status != "failed":
                raise SessionAlreadyExists(session_id)
            if existing is not None:
                self._unindex(existing)
            self._records[session_id] = record
            self._by_tenant.setdefault(tenant_id, {})[session_id] = None
        return record

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this AgentHost is shut down; create a new one")

    def _shared_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """One dict per distinct set of attributes: sessions started alike share it
        (records are kept for every hibernated session, so bytes count)."""
        key = repr(sorted(attrs.items()))
        with self._lock:
            if key in self._attr_dicts or len(self._attr_dicts) < _SHARED_ATTR_SETS:
                return self._attr_dicts.setdefault(key, attrs)
        return attrs

    def _launch(self, record: SessionRecord) -> str:
        """Start the record's first incarnation as a child of the root supervisor."""
        try:
            self._resolve_model(record.template)
            self._root.start_child(self._spec(record))
        except ChildStartError as err:
            self._forget(record)
            raise err.cause from err.cause.__cause__  # keep the original chain
        except BaseException:
            self._forget(record)
            raise
        return record.session_id

    def _spec(self, record: SessionRecord) -> ChildSpec:
        return ChildSpec(
            record.session_id,
            functools.partial(self._incarnate, record),
            restart="permanent",
            shutdown=self.call_timeout,
            max_restarts=self.max_restarts,
            max_seconds=self.max_seconds,
        )

    def _resolve_model(self, template: AgentTemplate) -> Model:
        if isinstance(template.model, str):
            return self.providers.lookup(template.model)
        return template.model

    def _incarnate(self, record: SessionRecord) -> pykka.ActorRef[Any]:
        """A child start function: run the session from its checkpoint, or fresh.

        Runs on the supervisor's thread, for the first start, reactivation and
        every crash restart alike.
        """
        snapshot = self._load_latest(record)
        if self._pool is not None:
            return self._register(record, snapshot, self._start_in_worker(record, snapshot))
        ref = _SessionActor.start(
            record.template,
            session_id=record.session_id,
            restored_state=None if snapshot is None else snapshot.state,
            stripped_fields=() if snapshot is None else snapshot.stripped_fields,
            model=self._resolve_model(record.template),
            max_steps=self.max_steps,
            metadata={"tenant_id": record.tenant_id},
            steering=record.steering,
            event_buffer=record.events,
            checkpointer=None if self.checkpoint_every is None else self.store.save,
            checkpoint_every=self.checkpoint_every or 1,
        )
        return self._register(record, snapshot, ref)

    def _start_in_worker(
        self, record: SessionRecord, snapshot: Snapshot | None
    ) -> pykka.ActorRef[Any]:
        assert self._pool is not None
        ref: pykka.ActorRef[Any] = start_in_worker(
            self._pool,
            record.template,
            self._resolve_model(record.template),
            session_id=record.session_id,
            snapshot=snapshot,
            options={
                "max_steps": self.max_steps,
                "checkpoint_every": self.checkpoint_every,
                "max_steering_queue": record.steering.limit,
                "metadata": {"tenant_id": record.tenant_id},
            },
            steering=record.steering,
            events=record.events,
            checkpointer=None if self.checkpoint_every is None else self.store.save,
            timeout=self.call_timeout,
        )
        return ref

    def _register(
        self, record: SessionRecord, snapshot: Snapshot | None, ref: pykka.ActorRef[Any]
    ) -> pykka.ActorRef[Any]:
        """Register a started incarnation and mark the record active (supervisor's thread)."""
        try:
            self.registry.create(
                record.session_id,
                ref,
                tenant_id=record.tenant_id,
                api_key_fingerprint=record.fingerprint,
                **record.attrs,
            )
        except BaseException:
            ref.stop(block=False)
            raise
        record.incarnations += 1
        record.last_active = self._clock()
        self._set(record, "active", ref)
        if record.incarnations > 1:
            record.events.publish(
                "resumed", checkpoint_id=None if snapshot is None else snapshot.checkpoint_id
            )
        return ref

    def _load_latest(self, record: SessionRecord) -> Snapshot | None:
        """The snapshot ``resume`` already loaded (first incarnation), else the latest."""
        pending, record.resume_from = record.resume_from, None
        if pending is not None:
            return pending
        try:
            return self.store.load(record.session_id)
        except CheckpointNotFound:
            return None

    def _live_ref(self, record: SessionRecord) -> pykka.ActorRef[Any]:
        """The session's running actor: reactivate it, or wait for its restart."""
        deadline = time.monotonic() + self.restart_wait  # real time, whatever the clock
        with self._changed:
            while True:
                ref = record.ref
                if record.status == "active" and ref is not None and ref.is_alive():
                    return ref
                if record.status == "hibernated":
                    break
                if record.status == "failed":
                    raise SessionFailed(record.session_id, "restart intensity exceeded")
                if record.status == "stopped":
                    raise SessionNotFound(record.session_id)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SessionCrashed(
                        record.session_id,
                        f"it is being restarted and did not come back within {self.restart_wait} s",
                    )
                self._changed.wait(min(remaining, 0.5))
        try:
            self._root.start_child(self._spec(record))
        except ChildStartError as err:
            raise err.cause from err.cause.__cause__  # keep the original chain
        record.events.publish("reactivated")
        assert record.ref is not None
        return record.ref

    def _hibernate(self, record: SessionRecord) -> bool:
        ref = record.ref
        if record.status != "active" or ref is None:
            return False
        try:
            snapshot: Snapshot = _ask(ref, TakeSnapshot("hibernate"), self.call_timeout)
        except pykka.ActorDeadError:
            return False
        self.store.save(snapshot)
        self._set(record, "hibernated", None)
        self._root.terminate_child(record.session_id)
        record.events.publish("hibernated", checkpoint_id=snapshot.checkpoint_id)
        return True

    def _set(self, record: SessionRecord, status: Any, ref: pykka.ActorRef[Any] | None) -> None:
        with self._changed:
            record.status = status
            record.ref = ref
            self._changed.notify_all()

    def _on_evict(self, entry: SessionEntry, reason: ExitReason) -> None:
        """Registry eviction (on the dying actor's thread, before the supervisor's Down)."""
        with self._lock:
            record = self._records.get(entry.session_id)
        if record is None or record.ref is not entry.actor_ref:
            return
        with self._changed:
            if record.status == "active":
                record.status = "restarting"
                record.ref = None
                self._changed.notify_all()
        if is_abnormal(reason):
            why = describe_reason(reason)
            logger.warning(
                "session %r crashed (%s); resuming it from its last checkpoint",
                entry.session_id,
                why,
            )
            record.events.publish("crashed", reason=why)

    def _on_give_up(self, session_id: str, reason: ExitReason) -> None:
        """The supervisor gave up on a session (past its restart intensity)."""
        with self._lock:
            record = self._records.get(session_id)
        if record is None:
            return
        self._set(record, "failed", None)
        why = describe_reason(reason)
        record.events.publish("given_up", reason=why)
        logger.error(
            "session %r given up after repeated crashes (last: %s); fix the cause and resume() it",
            session_id,
            why,
        )

    def _record(self, session_id: str) -> SessionRecord:
        with self._lock:
            record = self._records.get(session_id)
        if record is None or record.status == "stopped":
            raise SessionNotFound(session_id)
        return record

    @contextlib.contextmanager
    def _operation(self, record: SessionRecord, timeout: float) -> Iterator[None]:
        if not record.op_lock.acquire(timeout=timeout):
            raise TimeoutError(
                f"session {record.session_id!r} stayed busy with another call for {timeout} s"
            )
        try:
            yield
        finally:
            record.op_lock.release()

    def _forget(self, record: SessionRecord) -> None:
        with self._lock:
            if self._records.get(record.session_id) is record:
                del self._records[record.session_id]
                self._unindex(record)

    def _unindex(self, record: SessionRecord) -> None:
        tenant = self._by_tenant.get(record.tenant_id)
        if tenant is not None:
            tenant.pop(record.session_id, None)
            if not tenant:
                del self._by_tenant[record.tenant_id]


def _refuse_worker_options(**options: object) -> None:
    """Thread mode: an option that only applies to worker processes is a mistake; say so."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} only apply to worker processes; pass workers=N to run "
            "sessions in worker processes, or drop them"
        )


class _NeverHandled(Exception):
    """The session's actor died with a message still in its inbox (it never ran)."""


def _own_session(ref: pykka.ActorRef[Any]) -> AgentSession | None:
    """The session actor of ``ref`` when this thread is its own (thread mode), else ``None``."""
    lifecycle = lifecycle_of(ref)
    if lifecycle is None or lifecycle.thread != threading.get_ident():
        return None
    actor = lifecycle.actor()
    return actor if isinstance(actor, AgentSession) else None


def _ask(ref: pykka.ActorRef[Any], message: object, timeout: float) -> Any:
    """A blocking ask with a timeout (every call the host makes carries one)."""
    return ref.ask(message, block=True, timeout=timeout)


class _Sweeper(threading.Thread):
    """Background thread hibernating idle sessions every ``interval`` seconds."""

    def __init__(self, host: AgentHost, interval: float) -> None:
        super().__init__(name="sessionvisor-hibernate", daemon=True)
        self._host = host
        self._interval = interval
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._host.hibernate_idle()
            except Exception:
                logger.exception("hibernation sweep failed")

    def stop(self) -> None:
        self._stopped.set()
        self.join()


AgentHost.__module__ = "supervisor"
