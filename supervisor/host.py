"""``AgentHost``: the one facade a host application uses.

A facade over the parts (docs/ARCHITECTURE.md draws them): ``SessionTable``
(records), ``Incarnations`` (supervision, registry, calls), ``Checkpoints``
(the one checkpoint writer), a ``SessionRuntime`` chosen once here (threads,
or worker processes), ``Sweeper`` (hibernation) and ``HostShutdown``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, Unpack

from actors import (
    AgentTemplate,
    EventBatch,
    Message,
    ProviderRegistry,
    Snapshot,
    Subscriber,
    strip_secrets,
)
from supervisor._actor import kill
from supervisor._checkpoints import Checkpoints
from supervisor._credentials import CredentialsSource, TenantCredentials
from supervisor._encryption_keys import EncryptionKeys
from supervisor._futures import HostFutures
from supervisor._hibernation import Sweeper
from supervisor._host_backing import DEFAULT_DATA_DIR, open_backing
from supervisor._host_policy import (
    HostPolicy,
    call_wait,
    check_label,
    check_parked_threads,
    check_since,
    check_stop_checkpoint,
    check_subscriber,
    check_worker_options,
    resume_arguments,
    start_arguments,
    workers_wait,
)
from supervisor._host_record import SessionInfo
from supervisor._host_shutdown import HostShutdown
from supervisor._incarnations import Incarnations
from supervisor._nonblocking import NonBlockingCalls
from supervisor._ownership import later_writer, node_of
from supervisor._runtime import WorkerInfo
from supervisor._runtimes import WorkerOptions
from supervisor._session_attrs import SessionMetadata, plain_text, send_request
from supervisor._session_table import (
    SessionTable,
    require_session_id,
    require_tenant,
    require_tenant_arg,
)
from supervisor._session_threads import DEFAULT_PARKED_THREADS
from supervisor.checkpoint_store import CheckpointStore, check_session_id_for
from supervisor.errors import (
    HostShutDown,
    SessionAlreadyExists,
    SessionFailed,
    SessionNotFound,
    SessionOwnedElsewhere,
)

if TYPE_CHECKING:
    from supervisor.cluster import EventFollower, NodeConfig

__all__ = ["DEFAULT_DATA_DIR", "AgentHost"]

logger = logging.getLogger("supervisor.host")


class AgentHost:
    """Runs many agent sessions, survives any one crashing, resumes them from checkpoints.

    Thread-safe: any number of threads may call it at once. Calls to one
    session are serialized (by its actor, and by a per-session lock for the
    operations that change what runs it); calls to different sessions run in
    parallel. Use it as a context manager, or call ``shutdown``.

    Every call that names a session takes an optional keyword ``tenant_id``:
    given, it must be the session's tenant, else the call raises
    ``SessionNotFound`` exactly as for a missing session and does nothing (a
    gateway passes the caller's tenant). A session's tenant never changes.

    A host still running at interpreter exit is shut down as by ``shutdown`` once
    the main thread has finished (as ``concurrent.futures`` executors are); each
    step is bounded by the host's timeouts, though a session stuck in a tool in
    thread mode holds the process until the tool returns.

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
        call_timeout: Default seconds a ``send`` may take (a positive number, at most a
            day: it also bounds each session's stop; a ``send`` may pass a longer
            ``timeout``).
        restart_wait: Seconds a call waits for a crashed session to come back (``>= 0``,
            at most a day).
        max_steps: Most model calls in one turn of each session (``>= 1``).
        workers: Run sessions in this many worker processes (``None``: in
            threads of this process; at most 1024, each a process hosting many
            sessions). Templates must then be picklable by cloudpickle
            (``TemplateNotPicklable`` names the part that is not) and loadable in
            the workers (``TemplateNotLoadable`` says why one is not).
        worker_options: The ``worker_*`` keywords of ``WorkerOptions`` (memory
            limit, initializer, call timeout, start method, restart intensity, I/O).
        redact: Applied to every checkpoint before it is saved. The default,
            ``actors.strip_secrets``, replaces secrets in plugin state, provider
            state and metadata (secret-looking keys, ``Bearer``/``sk-`` values)
            by stripped markers that ``session_start`` rebuilds on resume;
            ``None`` saves them as they are.
        encryption: Encrypt the default store at rest with these keys (see
            ``SQLiteCheckpointStore``); with ``store=`` give them to that store instead.
        credentials: ``fn(tenant_id) -> Credentials | str | None``, asked at every
            start, restart, reactivation and resume of a tenant's session; its
            answer reaches the model with each request, never a checkpoint. If it
            raises, that start fails with ``CredentialsUnavailable``.
        node: Run as this node of a cluster of hosts sharing ``store`` (a
            ``PostgresCheckpointStore``; see ``supervisor.cluster``): sessions are
            claimed before they run here, every checkpoint is fenced by the claim's
            epoch, a call for a session a live other node owns raises
            ``SessionOwnedElsewhere``, orphans of dead nodes are taken over
            (with ``node.template``), and ``shutdown`` drains. ``host.node`` is the
            ``ClusterNode``.
        parked_threads: In thread mode, how many threads of ended sessions (stopped,
            hibernated, crashed) wait, each for up to 5 s, to run the next sessions
            started: such a start does not wait for a new thread to run (a quarter of
            a resume's own time, measured). ``0``: a session's thread ends with it.
            Worker processes give each session a thread of its own.

    Raises:
        TypeError, ValueError: an invalid setting, named, before anything starts (no
            store, thread or worker is left behind); a failure later in the constructor
            releases what it had started.
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
        redact: Callable[[Snapshot], Snapshot] | None = strip_secrets,
        encryption: EncryptionKeys | None = None,
        credentials: CredentialsSource | None = None,
        node: NodeConfig | None = None,
        parked_threads: int = DEFAULT_PARKED_THREADS,
        **worker_options: Unpack[WorkerOptions],
    ) -> None:
        policy = HostPolicy(  # every check before anything starts: a bad value leaks nothing
            checkpoint_every,
            hibernate_after_ms,
            max_restarts,
            max_seconds,
            call_timeout,
            restart_wait,
            max_steps,
            clock,
        )
        check_worker_options(workers, worker_options, WorkerOptions.__annotations__)
        check_parked_threads(parked_threads)
        keys = TenantCredentials(credentials)
        options = worker_options
        backing = open_backing(
            store,
            data_dir,
            encryption,
            node,
            workers,
            clock=clock,
            worker_options=options,
            parked_threads=parked_threads,
        )
        # What was started, undone in reverse if a later step fails (then the shutdown's).
        undo: list[Callable[[], object]] = []
        if backing.close_store is not None:
            undo.append(backing.close_store)
        undo += [backing.ownership.drain, backing.runtime.close]
        try:
            self._ownership = backing.ownership
            self._runtime = backing.runtime
            self.node = node_of(self._ownership)
            self.store: CheckpointStore = backing.store
            self._checkpoints = Checkpoints(
                self.store, redact, self._ownership.save, later_writer(self._ownership, self.store)
            )
            self.providers = providers if providers is not None else ProviderRegistry()
            self.checkpoint_every = checkpoint_every
            self.max_restarts = max_restarts
            self.max_seconds = max_seconds
            self.hibernate_after_ms = hibernate_after_ms
            self.call_timeout = policy.call_timeout
            self.restart_wait = policy.restart_wait
            self.max_steps = max_steps
            self._clock = clock
            self._table = SessionTable()
            fanout = None if self.node is None else self.node.events
            if fanout is not None:  # every event of the sessions it owns, to the other nodes
                self._table.tap(
                    lambda record, event: fanout.publish(record.session_id, record.tenant_id, event)
                )
            self._sessions = Incarnations(
                self._table,
                self._runtime,
                self._checkpoints,
                self.providers,
                policy,
                self._ownership,
                keys,
                fingerprint_secret=backing.fingerprint_secret,
            )
            undo.append(self._sessions.supervisors.stop)
            if node_of(self._ownership) is not None:  # only a cluster node takes one over
                self._table.on_missing = self._sessions.adopt
            self.registry = self._sessions.registry
            self._root = self._sessions.supervisors
            calls = NonBlockingCalls(
                self._sessions, self._runtime, self._checkpoints, policy, self._table
            )
            undo.append(calls.close)
            self._futures = HostFutures(self, self._table, self._checkpoints, calls)
            self._sweeper: Sweeper | None = None
            if auto_hibernate and hibernate_after_ms is not None:
                interval = max(0.05, hibernate_after_ms / 4000)
                self._sweeper = Sweeper(self.hibernate_idle, interval)
                undo.append(self._sweeper.stop)
            self._shutdown = HostShutdown(
                self._table,
                self._sessions,
                self._runtime,
                sweeper=self._sweeper,
                stop_adopting=self._ownership.stop_adopting,
                drain=self._ownership.drain,
                close_store=backing.close_store,
                close_calls=calls.close,
                timeout=policy.call_timeout,
                owner=self,
            )
            undo = [self._shutdown.run]  # from here on, it releases everything
            self._ownership.start(self._sessions.adopt, self._sessions.lose_id)
        except BaseException:
            _release(undo)
            raise

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
            TypeError, ValueError: an invalid id, template or attribute (the message
                names it), before anything is started.
        """
        checked = start_arguments(template, session_id, tenant_id, api_key, attrs)
        fresh = checked is None  # 122 random bits: no earlier life to look for in the store
        session_id = uuid.uuid4().hex if checked is None else checked
        check_session_id_for(self.store, session_id)
        self._table.check_open()
        if not fresh:  # here first: the store has checkpoints of a session that runs here
            self._table.check_absent(session_id)
        if not fresh and self.store.list(session_id):
            raise SessionAlreadyExists(
                session_id,
                "it has checkpoints from an earlier life: resume() it, or delete them "
                "(store.delete) to start anew",
            )
        return self._sessions.start_new(session_id, template, tenant_id, api_key, dict(attrs))

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
        The tenant is the one saved in the snapshot, always: a ``tenant_id``
        given must be that one (it never moves a session to another tenant).
        The API key is never saved, so pass it again if the session had one.

        Raises:
            SessionNotFound: ``tenant_id`` is given and the session is not of
                that tenant, or has no checkpoint at all (as for any other
                session that does not exist for that tenant).
            SessionAlreadyExists: the session is live or hibernated on this host.
            CheckpointNotFound: no (such) checkpoint.
            SnapshotDecodeError: the given checkpoint cannot be read, or (latest)
                none of the session's can; a damaged latest one is skipped for the
                newest good one, with a logged warning.
            RegistryProfileMissing: its model names a profile that is not
                registered; register it and call again.
            PluginError: a ``session_start`` hook raised.
            TypeError, ValueError: an invalid argument or attribute (the message names
                it), before anything is loaded.
        """
        session_id = resume_arguments(
            session_id, template, checkpoint_id, tenant_id, api_key, attrs
        )
        self._table.check_open()
        self._table.check_absent(session_id, tenant_id)  # before its checkpoint is loaded
        return self._sessions.resume(
            session_id, template, checkpoint_id, tenant_id, api_key, dict(attrs)
        )

    def resume_all(
        self, template: AgentTemplate | Callable[[str], AgentTemplate | None]
    ) -> list[str]:
        """Resume every session of the store that is not live here (after a host restart).

        ``template`` is one template for all, or a function of the session id that
        returns its template, or ``None`` to leave that session as it is. A session
        that fails to resume (its function raising included) is logged and skipped,
        and the others are still resumed; the ids resumed are returned.

        Raises:
            HostShutDown: the host is shut down (before or while this runs).
        """
        self._table.check_open()
        resumed = []
        for session_id in self.store.sessions():
            if self._table.get(session_id) is not None:
                continue
            try:
                chosen = template(session_id) if callable(template) else template
                if chosen is None:
                    continue
                resumed.append(self.resume(session_id, chosen))
            except SessionOwnedElsewhere:
                continue  # a live node of the cluster runs it
            except HostShutDown:
                raise  # none of the others would resume either
            except Exception:
                logger.exception("could not resume session %r", session_id)
        return resumed

    # -- talking to sessions -----------------------------------------------------

    def send(
        self,
        session_id: str,
        text: str,
        timeout: float | None = None,
        *,
        tenant_id: str | None = None,
        tag: str | None = None,
    ) -> Message:
        """Run one turn and return the assistant's answer.

        Reactivates a hibernated session first, and waits (up to
        ``restart_wait``) for one that is being restarted after a crash. With
        the default checkpoint policy the turn is saved before this returns.
        ``tag``, a label of your choosing, is carried by the turn's
        ``turn_started`` event, so an events follower knows which send it serves.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            SessionFailed: it was given up after repeated crashes.
            SessionCrashed: it crashed during the turn (not acknowledged: retry).
            TimeoutError: no answer within ``timeout`` (the turn may go on).
            TypeError, ValueError: ``text`` or ``tag`` is not a ``str`` or holds text no
                checkpoint can store, or ``timeout`` is not a positive, finite number of
                seconds or ``None`` (the host's ``call_timeout``); nothing was sent. A
                ``timeout`` past a year is taken as a year.
            Exception: what the model raised, or what the store raised saving
                the turn's checkpoint; the session lives on and the turn is
                rolled back (send it again), though not what plugin hooks did.
        """
        request = send_request(text, tag)
        wait = call_wait(timeout, self.call_timeout)
        record = self._table.live(session_id, tenant_id)
        with record.exclusive(wait):
            try:
                answer: Message = self._sessions.call(record, request, wait)
            finally:
                record.last_active = self._clock()
        return answer

    def steer(self, session_id: str, text: str, *, tenant_id: str | None = None) -> None:
        """Queue ``text`` to be injected before the session's next model call, even mid-turn.

        Raises:
            SessionNotFound: no such session (for ``tenant_id``).
            SessionFailed: it was given up after repeated crashes, as ``send`` raises: it
                makes no model call the text would reach, and ``resume`` starts it
                with only the steering its checkpoint saved.
            SteeringQueueFull: too many steering messages are waiting.
            TypeError, ValueError: ``text`` is not a ``str``, or holds a lone surrogate.
        """
        steering = plain_text("the steering text", text)
        record = self._table.live(session_id, tenant_id)
        if record.status == "failed":  # (else the text waited for nothing, then was dropped)
            raise SessionFailed(record.session_id, record.failure or "restart intensity exceeded")
        record.steering.put(steering)

    def history(self, session_id: str, *, tenant_id: str | None = None) -> list[Message]:
        """The conversation so far: the running session's, or its last checkpoint's when it
        is hibernated, being restarted, or was just killed.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TimeoutError: the session did not answer within ``call_timeout``.
            NodeFenced: (a cluster node) the node fenced itself: another node may have run
                turns its copy lacks; ask again, or ask another node.
            OwnershipLost: (a cluster node) another node took the session over and the
                copy here is being stopped; ask the new owner.
        """
        return self._sessions.history(self._table.live(session_id, tenant_id))

    def latest_checkpoint(
        self, session_id: str, *, tenant_id: str | None = None
    ) -> Snapshot | None:
        """The session's newest checkpoint that loads, the one it would come back from
        (a damaged newer one is skipped with a logged warning, as ``resume``, ``history``
        and ``checkpoint`` skip it); ``None`` if it has none yet. Reads the store only.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            SnapshotDecodeError: every checkpoint of the session is damaged.
        """
        record = self._table.live(session_id, tenant_id)
        return self._checkpoints.latest(record.session_id)

    def events(
        self, session_id: str, since: int | None = None, *, tenant_id: str | None = None
    ) -> EventBatch:
        """The session's events after cursor ``since``; one stream across restarts.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TypeError: ``since`` is neither an ``int`` nor ``None``.
            NodeFenced: (a cluster node) the node fenced itself: another node may have run
                turns whose events the copy here lacks; ask again, or ask another node
                (``follow`` follows the session on any node).
            OwnershipLost: (a cluster node) another node took the session over and the
                copy here is being stopped; ask the new owner.
        """
        cursor = check_since(since)
        record = self._table.live(session_id, tenant_id)
        self._ownership.check_serving(record.session_id)
        batch = record.events.since(cursor)
        # Asked again, as ``history`` does: passed now, the session was this node's, so
        # what its buffer held was the whole stream.
        self._ownership.check_serving(record.session_id)
        return batch

    def subscribe(
        self, session_id: str, subscriber: Subscriber, *, tenant_id: str | None = None
    ) -> Callable[[], None]:
        """Call ``subscriber`` with every future event of the session, across restarts.

        It runs on the thread that publishes: the session's for turn events (in
        process mode, the thread reading the worker's pipe: usually the caller
        of ``send``; in thread mode a session followed by such a subscriber saves its
        turns on its own thread, so they end there: only a turn whose save was
        already queued when it subscribed may end on the thread that commits it),
        the dying actor's for ``crashed`` (after the registry evicted the session and
        before the supervisor restarts it), the supervisor's for ``resumed`` and
        ``given_up``. It may call the host for
        another session, and ``history`` or ``checkpoint`` for its own, in either
        mode; except, in process mode, ``stop_session`` or ``hibernate`` of another
        session of the same worker, which waits out ``call_timeout`` (hand such a call
        to another thread). Returns a function that unsubscribes.

        On a cluster node, a subscriber gets the events of the copy here: when another
        node takes the session over, the last is ``moved`` (and the session is stopped
        here) once this node learns of it (its first renewal after a fence, or a save
        refused); follow the session at its owner from then on, or with ``follow``.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TypeError: ``subscriber`` is not callable.
            NodeFenced: (a cluster node) the node fenced itself: the session's next events
                may come from another node's copy; subscribe again, or on another node.
            OwnershipLost: (a cluster node) another node took the session over and the
                copy here is being stopped; subscribe at the new owner.
        """
        checked = check_subscriber(subscriber)
        record = self._table.live(session_id, tenant_id)
        self._ownership.check_serving(record.session_id)
        return record.events.subscribe(checked)

    def follow(
        self, session_id: str, *, since: int | None = None, tenant_id: str | None = None
    ) -> EventFollower:
        """Follow a session's events live on this node, whichever node owns it, across
        failovers (a cluster node with event fan-out, ``NodeConfig.events``). Gaps (events
        lost on the way, or with a dead owner) are reported as missed; the owner's
        ``events`` stays the authority. See ``supervisor.cluster.EventFollower``; close it.

        Raises:
            RuntimeError: this host is not a cluster node with event fan-out.
            TimeoutError: the node could not listen on its transport in time.
            TypeError: ``since`` is neither an ``int`` nor ``None``.
        """
        since = check_since(since)
        fanout = None if self.node is None else self.node.events
        if fanout is None:
            raise RuntimeError(
                "follow() needs a cluster node with event fan-out (AgentHost(node="
                "NodeConfig(..., events='postgres'))); use events() or subscribe() on one host"
            )
        return fanout.follow(session_id, since=since, tenant_id=tenant_id)

    def checkpoint(
        self, session_id: str, label: str | None = None, *, tenant_id: str | None = None
    ) -> Snapshot:
        """Save a checkpoint now and return it (the latest one, relabelled, if the session is
        hibernated or being restarted).

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TimeoutError: the session did not answer within ``call_timeout``.
            TypeError, ValueError: ``label`` is neither a ``str`` nor ``None``, or holds a
                lone surrogate.
            NodeFenced: (a cluster node) the node fenced itself: nothing is saved.
            OwnershipLost: (a cluster node) another node owns the session now; nothing is
                saved here.
        """
        checked = check_label(label)
        return self._sessions.checkpoint(self._table.live(session_id, tenant_id), checked)

    def kill(
        self, session_id: str, reason: str = "killed", *, tenant_id: str | None = None
    ) -> bool:
        """Terminate the session's serving incarnation abnormally, as OTP's
        ``exit(Pid, kill)``: a crash. True if one served and is now killed.

        The registry evicts it and the supervisor resumes it from its last
        checkpoint (restart intensity applies). Calls made after this returns go
        to the resumed session. Takes effect when the session finishes its
        current message: Python cannot interrupt a thread.

        The kill names a session, but what it ends is its incarnation: with none
        serving, it does nothing and returns False, as ``exit(Pid, kill)`` of a pid
        that is gone. That is a session being restarted (it crashed, or was killed
        just now: it comes back from its last checkpoint anyway, as this kill would
        have made it), hibernated (its next call reactivates it), or given up
        (``resume`` it). Nothing is kept for its next incarnation.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            SessionOwnedElsewhere: (a cluster node) a live other node runs it; kill it there.
            HostShutDown: the host is shut down.
            TypeError: ``session_id`` is not a ``str``.
        """
        record = self._table.live(session_id, tenant_id)
        ref = self._sessions.serving_now(record)
        if ref is None:
            return False
        kill(ref, reason)
        return True

    @property
    def futures(self) -> HostFutures:
        """The calls in non-blocking form, each returning a ``concurrent.futures.Future``
        (see ``HostFutures``; ``supervisor.AsyncAgentHost`` awaits them). Thread-safe."""
        return self._futures

    # -- listing, workers, hibernation, stopping ----------------------------------

    def list_sessions(self, tenant_id: str | None = None) -> list[SessionInfo]:
        """Every session this host knows (live, restarting, hibernated, failed)."""
        return [r.info() for r in self._table.records(tenant_id)]

    def session_info(self, session_id: str, *, tenant_id: str | None = None) -> SessionInfo:
        """The ``SessionInfo`` of one session ``list_sessions`` would list, looked up
        directly (a gateway checks ownership with it on every request). Thread-safe.

        Raises:
            SessionNotFound: this host does not know it, or (``tenant_id`` given)
                another tenant owns it: the same error, so existence does not leak.
            TypeError: ``session_id`` is not a ``str``.
        """
        require_session_id(session_id)
        require_tenant_arg(tenant_id)
        record = self._table.get(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        require_tenant(session_id, record.tenant_id, tenant_id)
        return record.info()

    def workers(self) -> list[WorkerInfo]:
        """The live worker processes, oldest first, each with the sessions placed on it
        (``[]`` in thread mode and after ``shutdown``). Thread-safe and consistent in
        itself (a session is on one worker at most), though workers may die the moment
        it returns; a killed one is listed until its death is noticed (at once)."""
        return self._runtime.workers()

    def wait_for_workers(self, timeout: float | None = None) -> bool:
        """Wait until all ``workers`` worker processes serve (a readiness check, or after a
        worker died): True once they do (at once in thread mode), False after
        ``timeout`` seconds, or at once when no replacement will come
        (``workers_given_up``, or shut down). Thread-safe.

        Raises:
            TypeError, ValueError: ``timeout`` is neither ``None`` (no limit) nor a finite
                number of seconds ``>= 0``.
        """
        return self._runtime.wait_ready(workers_wait(timeout))

    @property
    def worker_deaths(self) -> int:
        """How many worker processes died since the host started, shutdown excepted (a kill,
        a crash, a call timeout, a failed start). A count that keeps rising means tools
        or models take their workers down. Always 0 in thread mode. Thread-safe.
        """
        return self._runtime.deaths

    @property
    def workers_given_up(self) -> bool:
        """Whether workers died more than ``worker_max_restarts`` times within
        ``worker_max_seconds`` and the host stopped replacing them (logged as an error).
        It stays true: live workers keep serving; a session that needs a worker when
        none is left fails to restart. Always false in thread mode. Thread-safe."""
        return self._runtime.gave_up

    def hibernate(self, session_id: str, *, tenant_id: str | None = None) -> bool:
        """Checkpoint the session and stop its actor now; False if it was busy or not active.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
        """
        return self._sessions.hibernate(self._table.live(session_id, tenant_id))

    def hibernate_idle(self) -> list[str]:
        """Hibernate every active session idle for longer than its limit; returns their ids."""
        return self._sessions.hibernate_idle()

    def stop_session(
        self, session_id: str, *, tenant_id: str | None = None, checkpoint: bool = True
    ) -> None:
        """Stop a session normally: final checkpoint, evicted, not restarted, forgotten.

        With ``checkpoint=False`` no final checkpoint is taken (what it last saved, if
        anything, stands): to undo a start whose first checkpoint failed (a final one
        would fail the same way, and ``kill`` would restart it), or to stop a session
        whose checkpoints are deleted next.

        Raises:
            SessionNotFound: no such session on this host (for ``tenant_id``).
            TypeError: ``checkpoint`` is not a ``bool``.
        """
        check_stop_checkpoint(checkpoint)
        record = self._table.live(session_id, tenant_id)
        with record.exclusive(self.call_timeout):
            self._table.check_current(record)  # not stopped while this call waited
            self._sessions.stop(record, checkpoint=checkpoint)

    def shutdown(self) -> None:
        """Checkpoint every live session, stop them all at once, close the store.

        Idempotent. Sessions keep their checkpoints, so a new host on the same
        store can ``resume_all``. Sessions stuck in ``session_end`` are abandoned
        after one ``call_timeout``, together; a step that fails is logged, the
        next ones still run (the store is closed, its data directory released),
        and the first failure is raised at the end. A host never shut down is shut down this way
        at interpreter exit (see the class docstring).
        """
        self._shutdown.run()

    def _shutdown_at_exit(self) -> None:
        """``shutdown`` at interpreter exit, if the program never called it (see the class
        docstring); waits, up to ``call_timeout``, for a shutdown another thread runs."""
        self._shutdown.at_exit()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()


def _release(undo: list[Callable[[], object]]) -> None:
    """Undo what a failed ``AgentHost()`` started, last first; a step that fails is logged and
    the others still run (the constructor's error is the one that propagates)."""
    for step in reversed(undo):
        try:
            step()
        except Exception:
            logger.exception("releasing what a failed AgentHost() had started")


AgentHost.__module__ = "supervisor"
