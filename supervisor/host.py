"""``AgentHost``: the one facade a host application uses.

It ties the parts together: every session is an actor, a dynamic
``permanent`` child of one root ``Supervisor`` with its own restart
intensity; a ``SessionStore`` registers it and evicts it the moment it dies;
``Checkpoints`` writes its snapshots to a ``CheckpointStore``. A supervisor
restart of a crashed session *is* a resume from its last checkpoint on the same
template, so a crash costs at most the turn that was running (which its caller
saw fail).

What runs the sessions is a ``SessionRuntime`` chosen once, in the
constructor: ``ThreadRuntime`` (threads of this process) or ``WorkerRuntime``
(``workers=N`` processes). Nothing here asks which (see docs/ARCHITECTURE.md).

Durability: by default every completed turn is checkpointed before ``send``
returns, and before a crash of the session can restart it from an older
checkpoint, so every answer a caller has received survives any crash of the
session or of the whole process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self, Unpack

import pykka

from actors import (
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
from supervisor._actor import kill
from supervisor._checkpoints import Checkpoints
from supervisor._hibernation import Sweeper
from supervisor._host_record import SessionInfo, SessionRecord
from supervisor._lifecycle import ExitReason, is_abnormal, lifecycle_of
from supervisor._runtime import NotDelivered, Request, SessionLaunch, SessionRuntime, WorkerInfo
from supervisor._session_attrs import SessionMetadata, validate
from supervisor._session_table import SessionTable
from supervisor._thread_runtime import ThreadRuntime
from supervisor.checkpoint_store import CheckpointStore
from supervisor.child_spec import ChildSpec
from supervisor.errors import (
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
from supervisor.workers import WorkerRuntime

__all__ = ["AgentHost"]

logger = logging.getLogger("supervisor.host")

DEFAULT_DATA_DIR = "sessionvisor-data"
_Ended = (NotDelivered, SessionCrashed)  # a call that found its incarnation gone or going


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
            ``./sessionvisor-data``, printed to stderr when the host starts.
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
        worker_io: How both ends read a worker's pipe: ``"auto"`` (the
            platform's best: on Linux a waiting caller, or an idle session in
            the worker, reads it itself) or ``"portable"`` (one reader thread
            per end, as on platforms without ``epoll``; for testing that path).
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
        worker_io: str = "auto",
    ) -> None:
        _positive_or_none("checkpoint_every", checkpoint_every)
        _positive_or_none("hibernate_after_ms", hibernate_after_ms)
        RestartIntensity(max_restarts, max_seconds, clock)  # validates, with the supervisor's rules
        self._runtime: SessionRuntime
        if workers is None:
            _refuse_worker_options(
                worker_memory_limit=worker_memory_limit,
                worker_initializer=worker_initializer,
                worker_initargs=worker_initargs or None,
                worker_call_timeout=worker_call_timeout,
                worker_start_method=worker_start_method,
                worker_io=None if worker_io == "auto" else worker_io,
            )
            self._runtime = ThreadRuntime()
        else:
            self._runtime = WorkerRuntime(
                workers,
                memory_limit=worker_memory_limit,
                initializer=worker_initializer,
                initargs=worker_initargs,
                call_timeout=worker_call_timeout,
                start_method=worker_start_method,
                max_restarts=worker_max_restarts,
                max_seconds=worker_max_seconds,
                clock=clock,
                io=worker_io,
            )
        self._owns_store = store is None
        if store is None:
            directory = Path(data_dir if data_dir is not None else DEFAULT_DATA_DIR).resolve()
            directory.mkdir(parents=True, exist_ok=True)
            print(f"sessionvisor: checkpoints in {directory / 'checkpoints.db'}", file=sys.stderr)
            store = SQLiteCheckpointStore(directory / "checkpoints.db")
        self.store: CheckpointStore = store
        self._checkpoints = Checkpoints(store)
        self.providers = providers if providers is not None else ProviderRegistry()
        self.checkpoint_every = checkpoint_every
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self.hibernate_after_ms = hibernate_after_ms
        self.call_timeout = call_timeout
        self.restart_wait = restart_wait
        self.max_steps = max_steps
        self._clock = clock
        self._table = SessionTable()
        self._shut_down = threading.Event()  # set when the one shutdown that runs has finished
        self.registry = SessionStore(on_evict=self._on_evict)
        self._root = SupervisorHandle.start(
            max_restarts=None,
            clock=clock,
            name="sessionvisor-host",
            on_give_up=self._on_give_up,
            timeout=call_timeout,
        )
        self._sweeper: Sweeper | None = None
        if auto_hibernate and hibernate_after_ms is not None:
            interval = max(0.05, hibernate_after_ms / 4000)
            self._sweeper = Sweeper(self.hibernate_idle, interval)
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
        self._table.check_open()
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
        self._table.check_open()
        snapshot = self.store.load(session_id, checkpoint_id)
        self._resolve_model(template)
        if checkpoint_id is not None:
            # Continuing from an older checkpoint abandons the turns saved after
            # it: make it the newest, so a crash restart comes back here too.
            snapshot = self._checkpoints.relabel(None, snapshot, f"resumed from {checkpoint_id}")
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
            if self._table.get(session_id) is not None:
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
        record = self._table.live(session_id)
        wait = self.call_timeout if timeout is None else timeout
        with self._operation(record, wait):
            try:
                answer: Message = self._call(record, Send(text), wait)
            finally:
                record.last_active = self._clock()
        return answer

    def _call(self, record: SessionRecord, request: Request, timeout: float) -> Any:
        """Carry ``request`` to the session's serving incarnation; if it never got there
        (the incarnation was ending), once more to the next one."""
        for attempt in (1, 2):
            ref = self._live_ref(record)
            try:
                return self._runtime.call(record.session_id, ref, request, timeout)
            except NotDelivered as exc:
                self._await_end(ref)
                if attempt == 2:
                    detail = f"it ended twice before taking the call ({exc})"
                    raise SessionCrashed(record.session_id, detail) from exc
            except SessionCrashed:
                self._await_end(ref)  # as a crash is seen: evicted once this raises
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _await_end(self, ref: pykka.ActorRef[Any]) -> None:
        """Wait (up to ``restart_wait``) until an ending incarnation's Down notices are out."""
        lifecycle = lifecycle_of(ref)
        if lifecycle is not None:
            lifecycle.finished.wait(self.restart_wait)

    def steer(self, session_id: str, text: str) -> None:
        """Queue ``text`` to be injected before the session's next model call, even mid-turn.

        Raises:
            SessionNotFound: no such session.
            SteeringQueueFull: too many steering messages are waiting.
        """
        self._table.live(session_id).steering.put(text)

    def history(self, session_id: str) -> list[Message]:
        """The conversation so far: the running session's, or its last checkpoint's when it
        is hibernated, being restarted, or was just killed.

        Raises:
            SessionNotFound: no such session on this host.
            TimeoutError: the session did not answer within ``call_timeout``.
        """
        record = self._table.live(session_id)
        history: list[Message] | None = self._ask_running(record, GetHistory())
        return self.store.load(session_id).messages() if history is None else history

    def events(self, session_id: str, since: int | None = None) -> EventBatch:
        """The session's events after cursor ``since``; one stream across restarts."""
        return self._table.live(session_id).events.since(since)

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
        return self._table.live(session_id).events.subscribe(subscriber)

    def checkpoint(self, session_id: str, label: str | None = None) -> Snapshot:
        """Save a checkpoint now and return it (the latest one, relabelled, if the session is
        hibernated or being restarted).

        Raises:
            SessionNotFound: no such session on this host.
            TimeoutError: the session did not answer within ``call_timeout``.
        """
        record = self._table.live(session_id)
        snapshot: Snapshot | None = self._ask_running(record, TakeSnapshot(label))
        if snapshot is None:
            return self._checkpoints.relabel(record, self.store.load(session_id), label)
        return self._checkpoints.save(record, snapshot)

    def _ask_running(self, record: SessionRecord, request: Request) -> Any:
        """The running incarnation's answer to ``request``, or ``None`` when no incarnation
        serves (hibernated, restarting, ending): its last checkpoint has the answer then.
        Never reactivates or waits for a restart."""
        ref = record.ref
        if record.status != "active" or not _serving(ref):
            return None
        assert ref is not None
        try:
            return self._runtime.call(record.session_id, ref, request, self.call_timeout)
        except _Ended:
            self._await_end(ref)
            return None

    def kill(self, session_id: str, reason: str = "killed") -> None:
        """Terminate the session abnormally, as OTP's ``exit(Pid, kill)``: a crash.

        The registry evicts it and the supervisor resumes it from its last
        checkpoint (restart intensity applies). Calls made after this returns go
        to the resumed session. Takes effect when the session finishes its
        current message: Python cannot interrupt a thread.
        """
        ref = self._table.live(session_id).ref
        if ref is not None:
            kill(ref, reason)

    # -- listing, workers, hibernation, stopping ----------------------------------

    def list_sessions(self, tenant_id: str | None = None) -> list[SessionInfo]:
        """Every session this host knows (live, restarting, hibernated, failed)."""
        return [r.info() for r in self._table.records(tenant_id)]

    def workers(self) -> list[WorkerInfo]:
        """The live worker processes, oldest first, each with the sessions placed on it.

        ``[]`` in thread mode (``workers=None``) and after ``shutdown``. Thread-safe:
        a snapshot taken under the worker pool's lock, consistent in itself (a
        session is listed on one worker at most), though workers may die and be
        replaced the moment it returns. A worker that was killed stays listed
        until the host has noticed its death (its reader thread does at once, via
        the process sentinel); its replacement is listed once it is started.
        """
        return self._runtime.workers()

    def wait_for_workers(self, timeout: float | None = None) -> bool:
        """Wait until all ``workers`` worker processes serve; for readiness checks and for
        operators after a worker died (its replacement takes a moment to start).

        Returns True once they do (at once in thread mode), False after
        ``timeout`` seconds, or at once when no replacement will come: the host
        gave up replacing workers (``workers_given_up``) or was shut down.
        Thread-safe.
        """
        return self._runtime.wait_ready(timeout)

    @property
    def worker_deaths(self) -> int:
        """How many worker processes died since the host started, shutdown excepted.

        Every death counts: a kill, a crash, a call timeout, a worker that could
        not start. For monitoring: a count that keeps rising means tools or
        models are taking their workers down. Always 0 in thread mode.
        Thread-safe.
        """
        return self._runtime.deaths

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
        return self._runtime.gave_up

    def hibernate(self, session_id: str) -> bool:
        """Checkpoint the session and stop its actor now; False if it was busy or not active."""
        record = self._table.live(session_id)
        if not record.op_lock.acquire(blocking=False):
            return False
        try:
            snapshot: Snapshot | None = self._ask_running(record, TakeSnapshot("hibernate"))
            if snapshot is None:
                return False
            self._checkpoints.save(record, snapshot)
            self._table.set(record, "hibernated", None)
            self._root.terminate_child(session_id)
            record.events.publish("hibernated", checkpoint_id=snapshot.checkpoint_id)
            return True
        finally:
            record.op_lock.release()

    def hibernate_idle(self) -> list[str]:
        """Hibernate every active session idle for longer than its limit; returns their ids."""
        now = self._clock()
        done = []
        for record in self._table.records():
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
        record = self._table.live(session_id)
        with self._operation(record, self.call_timeout):
            self._final_checkpoint(record)
            self._table.set(record, "stopped", None)
            with contextlib.suppress(Exception):
                self._root.terminate_child(session_id)
            self._table.forget(record)

    def _final_checkpoint(self, record: SessionRecord) -> None:
        """Checkpoint a session that is being stopped, if it runs. One being restarted (or
        killed just now) is left as it is: its last checkpoint stands."""
        snapshot: Snapshot | None = self._ask_running(record, TakeSnapshot())
        if snapshot is None:
            logger.debug("session %r is not running; its last checkpoint stands", record.session_id)
        else:
            self._checkpoints.save(record, snapshot)

    def shutdown(self) -> None:
        """Checkpoint every live session, stop them in reverse start order, close the store.

        Idempotent. Sessions keep their checkpoints, so a new host on the same
        store can ``resume_all``. A host never shut down is shut down this way
        at interpreter exit (see the class docstring).
        """
        records = self._table.close()
        if records is not None:
            _at_exit.unregister(self._exit_token)
            self._stop_all(records)

    def _stop_all(self, records: list[SessionRecord]) -> None:
        try:
            if self._sweeper is not None:
                self._sweeper.stop()
            for record in records:
                try:
                    self._final_checkpoint(record)
                except Exception:
                    logger.exception("final checkpoint of %r failed", record.session_id)
                self._table.set(record, "stopped", None)
            abandoned = self._root.stop()
            if abandoned:
                logger.warning("sessions that did not stop in time: %s", abandoned)
            self._runtime.close()
            if self._owns_store:
                self.store.close()
        finally:
            self._shut_down.set()

    def _shutdown_at_exit(self) -> None:
        """``shutdown`` at interpreter exit, if the program never called it.

        Runs on the main thread once it has finished, before Python joins the
        non-daemon threads (the actors'). If another thread is already shutting
        the host down, waits for it, up to ``call_timeout``.
        """
        records = self._table.close()
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
        attrs = self._table.shared_attrs(attrs)
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
        self._table.add(record)
        return record

    def _launch(self, record: SessionRecord) -> str:
        """Start the record's first incarnation as a child of the root supervisor."""
        try:
            self._resolve_model(record.template)
            self._root.start_child(self._spec(record))
        except ChildStartError as err:
            self._table.forget(record)
            raise err.cause from err.cause.__cause__  # keep the original chain
        except BaseException:
            self._table.forget(record)
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
        pending, record.resume_from = record.resume_from, None
        snapshot = pending or self._checkpoints.latest(record.session_id)
        launch = SessionLaunch(
            session_id=record.session_id,
            template=record.template,
            model=self._resolve_model(record.template),
            snapshot=snapshot,
            max_steps=self.max_steps,
            checkpoint_every=self.checkpoint_every,
            metadata={"tenant_id": record.tenant_id},
            steering=record.steering,
            events=record.events,
            save=self._checkpoints.saver(record),
            timeout=self.call_timeout,
        )
        ref = self._runtime.start(launch)
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
        self._table.set(record, "active", ref)
        if record.incarnations > 1:
            record.events.publish(
                "resumed", checkpoint_id=None if snapshot is None else snapshot.checkpoint_id
            )
        return ref

    def _live_ref(self, record: SessionRecord) -> pykka.ActorRef[Any]:
        """The session's serving incarnation: reactivate it, or wait for its restart."""
        deadline = time.monotonic() + self.restart_wait  # real time, whatever the clock
        with self._table.changed:
            while True:
                ref = record.ref
                if record.status == "active" and _serving(ref):
                    assert ref is not None
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
                self._table.changed.wait(min(remaining, 0.5))
        try:
            self._root.start_child(self._spec(record))
        except ChildStartError as err:
            raise err.cause from err.cause.__cause__  # keep the original chain
        record.events.publish("reactivated")
        assert record.ref is not None
        return record.ref

    def _on_evict(self, entry: SessionEntry, reason: ExitReason) -> None:
        """Registry eviction (on the dying actor's thread, before the supervisor's Down)."""
        record = self._table.get(entry.session_id)
        if record is None or record.ref is not entry.actor_ref:
            return
        with self._table.changed:
            if record.status == "active":
                record.status = "restarting"
                record.ref = None
                self._table.changed.notify_all()
        if is_abnormal(reason):
            logger.warning("session %r crashed: %r; resuming it", entry.session_id, reason)
            record.events.publish("crashed", reason=repr(reason))

    def _on_give_up(self, session_id: str, reason: ExitReason) -> None:
        """The supervisor gave up on a session (past its restart intensity)."""
        record = self._table.get(session_id)
        if record is None:
            return
        self._table.set(record, "failed", None)
        record.events.publish("given_up", reason=repr(reason))
        logger.error("session %r given up after repeated crashes; last: %r", session_id, reason)

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


def _serving(ref: pykka.ActorRef[Any] | None) -> bool:
    """Whether ``ref``'s incarnation can take a call: alive, and not killed or stopping."""
    if ref is None or not ref.is_alive():
        return False
    lifecycle = lifecycle_of(ref)
    return lifecycle is None or not lifecycle.ending


def _positive_or_none(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _refuse_worker_options(**options: object) -> None:
    """Thread mode: an option that only applies to worker processes is a mistake; say so."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} only apply to worker processes; pass workers=N to run "
            "sessions in worker processes, or drop them"
        )


AgentHost.__module__ = "supervisor"
