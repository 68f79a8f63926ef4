"""``Incarnations``: how an ``AgentHost``'s sessions come to run, are reached, and come back.

Every session is a dynamic ``permanent`` child of one of the host's root
supervisors (the one of its partition, see ``_partitions``), with its own
restart intensity. Its child start function (``_incarnate``)
loads the session's latest checkpoint (a first start is given its checkpoint,
or is of a new session, which has none), has the runtime start an incarnation
and registers it, for the first start, a reactivation and every crash
restart alike: a restart *is* a resume. The registry evicts an incarnation
the moment it dies (``_on_evict``), before the supervisor restarts it.

Calls reach the serving incarnation through the runtime (``call``): one
that never got there (``NotDelivered``: the incarnation was ending) is sent
once more, to the next incarnation; one during which the session died raises
``SessionCrashed`` once the death has been reported.

Ownership (``_ownership``): every incarnation starts only once the host has
claimed the session (a resume claims it before it loads the checkpoint); a
session found owned by another node (``OwnershipLost`` from a save or a
claim) is stopped here and never resumed here (``lose``); a call for a
session the host does not have may take it over (``adopt``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from typing import Any, NoReturn

import pykka

from actors import (
    AgentTemplate,
    GetHistory,
    Message,
    Model,
    ProviderRegistry,
    Snapshot,
    TakeSnapshot,
)
from supervisor._calls import TerminateChild
from supervisor._checkpoints import EVENT_SEQ, Checkpoints, event_seq
from supervisor._credentials import TenantCredentials
from supervisor._host_policy import HostPolicy
from supervisor._host_record import SessionRecord
from supervisor._lifecycle import (
    ExitReason,
    describe_reason,
    is_abnormal,
    lifecycle_of,
    reason_kind,
)
from supervisor._ownership import Ownership
from supervisor._partitions import SessionSupervisors
from supervisor._runtime import NotDelivered, Request, SessionLaunch, SessionRuntime
from supervisor._session_table import SessionTable, require_tenant
from supervisor.child_spec import ChildSpec
from supervisor.errors import (
    CheckpointNotFound,
    ChildAlreadyExists,
    ChildNotFound,
    ChildStartError,
    HostShutDown,
    NodeFenced,
    OwnershipLost,
    SessionAlreadyExists,
    SessionCrashed,
    SessionFailed,
    SessionNotFound,
    SessionOwnedElsewhere,
)
from supervisor.session_store import SessionEntry, SessionStore
from supervisor.tuning import hint_if_untuned

__all__ = ["Incarnations"]

logger = logging.getLogger("supervisor.host")

_Ended = (NotDelivered, SessionCrashed)  # a call that found its incarnation gone or going
_Moved = (OwnershipLost, SessionOwnedElsewhere, NodeFenced)  # another node may run it now
_RETRY_START = 0.05  # seconds between tries to reactivate a session still being hibernated


class Incarnations:
    """Starts, reaches and restarts the incarnations of one host's sessions. Thread-safe.

    Args:
        table: The host's records.
        runtime: What runs the sessions.
        checkpoints: The host's checkpoint writer.
        providers: Resolves templates' model strings.
        policy: Timeouts, restart intensity and cadences of every session.
        ownership: Which sessions the host may run and save (see ``_ownership``).
        credentials: The tenants' credentials, asked for at every incarnation.
    """

    def __init__(  # noqa: PLR0917 (the host's parts, each named)
        self,
        table: SessionTable,
        runtime: SessionRuntime,
        checkpoints: Checkpoints,
        providers: ProviderRegistry,
        policy: HostPolicy,
        ownership: Ownership,
        credentials: TenantCredentials | None = None,
        *,
        fingerprint_secret: bytes | None = None,
    ) -> None:
        self._credentials = credentials or TenantCredentials(None)
        self._table = table
        self.ownership = ownership
        self._runtime = runtime
        self._checkpoints = checkpoints
        self.providers = providers
        self.policy = policy
        self.registry = SessionStore(secret=fingerprint_secret, on_evict=self._on_evict)
        self.supervisors = SessionSupervisors(
            max_restarts=None,
            clock=policy.clock,
            name="sessionvisor-host",
            on_give_up=self._on_give_up,
            timeout=policy.call_timeout,
        )

    def call(self, record: SessionRecord, request: Request, timeout: float) -> Any:
        """Carry ``request`` to the session's serving incarnation; if it never got there
        (the incarnation was ending), once more to the next one. Refused while the host's
        node is fenced, or its copy of the session is out of date (``check_serving``); a
        session whose save found it owned elsewhere is stopped here."""
        self.ownership.check_serving(record.session_id)
        try:
            return self._call(record, request, timeout)
        except OwnershipLost:
            self.lose(record)
            raise

    def _call(self, record: SessionRecord, request: Request, timeout: float) -> Any:
        for attempt in (1, 2):
            ref = self.serving(record)
            try:
                return self._runtime.call(record.session_id, ref, request, timeout)
            except NotDelivered as exc:
                self.await_end(ref)
                if attempt == 2:
                    detail = f"it ended twice before taking the call ({exc})"
                    raise SessionCrashed(record.session_id, detail) from exc
            except SessionCrashed:
                self.await_end(ref)  # as a crash is seen: evicted once this raises
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def await_end(self, ref: pykka.ActorRef[Any]) -> None:
        """Wait (up to ``restart_wait``) until an ending incarnation's Down notices are out."""
        lifecycle = lifecycle_of(ref)
        if lifecycle is not None:
            lifecycle.finished.wait(self.policy.restart_wait)

    def ask_running(self, record: SessionRecord, request: Request) -> Any:
        """The running incarnation's answer to ``request``, or ``None`` when no incarnation
        serves (hibernated, restarting, ending): its last checkpoint has the answer then.
        Never reactivates or waits for a restart."""
        ref = record.ref
        if record.status != "active" or not _serving(ref):
            return None
        assert ref is not None
        try:
            return self._runtime.call(record.session_id, ref, request, self.policy.call_timeout)
        except _Ended:
            self.await_end(ref)
            return None

    def launch(self, record: SessionRecord) -> str:
        """Start the record's first incarnation as a child of its root supervisor.

        Raises:
            TimeoutError: the start took longer than ``call_timeout`` (a plugin's
                ``session_start`` still running, say); nothing is registered, and the
                incarnation is stopped as soon as its start is over.
        """
        try:
            self._resolve_for_start(record.session_id, record.template)
            self.supervisors.of(record.session_id).start_child(self._spec(record))
        except ChildStartError as err:
            self._forget_failed_start(record)
            _reraise(err)
        except pykka.ActorDeadError as exc:  # its supervisor stopped: the host shut down
            self._table.forget(record)
            raise HostShutDown from exc
        except pykka.Timeout as exc:
            self._forget_failed_start(record)
            self._abandon_start(record.session_id)
            raise TimeoutError(
                f"session {record.session_id!r} did not start within "
                f"{self.policy.call_timeout} s (call_timeout): its start (its plugins' "
                "session_start, or a start ahead of it) took longer; it is not registered, "
                "is stopped as soon as that start is over, and its id is free again then; "
                "make session_start faster or raise call_timeout"
            ) from exc
        except BaseException:
            self._forget_failed_start(record)
            raise
        hint_if_untuned()
        return record.session_id

    def _forget_failed_start(self, record: SessionRecord) -> None:
        """Forget a record whose first start failed, and give up the claim its start made
        (a cluster node): kept, it made the id this node's for as long as the node lived,
        so a start of it anywhere else raised ``SessionOwnedElsewhere``. Released as
        stopped: no sweeper retries a start that failed (the caller has its error)."""
        self._table.forget(record)
        self.ownership.release(record.session_id, stopped=True)

    def _abandon_start(self, session_id: str) -> None:
        """Have its root supervisor stop and remove the child ``session_id`` once the start
        its caller stopped waiting for is over, without waiting for it here.

        The supervisor goes on with a start its caller gave up on: without this, a start
        that ended after the caller's timeout left a running session the host had
        forgotten, and its id taken (``ChildAlreadyExists``) until shutdown. The request
        is queued behind that start, so it finds the child if the start succeeded (and
        nothing, harmlessly, if it failed).
        """
        self.supervisors.of(session_id).actor_ref.ask(TerminateChild(session_id), block=False)

    def _spec(self, record: SessionRecord) -> ChildSpec:
        return ChildSpec(
            record.session_id,
            functools.partial(self._incarnate, record),
            restart="permanent",
            shutdown=self.policy.call_timeout,  # what hibernate and stop pass to terminate_child
            max_restarts=self.policy.max_restarts,
            max_seconds=self.policy.max_seconds,
        )

    def _resolve_for_start(self, session_id: str, template: AgentTemplate) -> None:
        """Resolve ``template``'s model on the caller's thread before a start (a model
        string that names nothing fails here, at once).

        Raises:
            ChildStartError: the model factory raised ``SystemExit``, wrapped as the
                supervisor wraps it on its own thread: user code must not end the
                caller's program.
            Exception: what the lookup or the factory raised.
        """
        try:
            self.resolve_model(template)
        except SystemExit as exc:
            raise ChildStartError(session_id, exc) from exc

    def resolve_model(self, template: AgentTemplate) -> Model:
        if isinstance(template.model, str):
            return self.providers.lookup(template.model)
        return template.model

    def _incarnate(self, record: SessionRecord) -> pykka.ActorRef[Any]:
        """A child start function: run the session from its checkpoint, or fresh.

        Runs on the supervisor's thread, for the first start, reactivation and
        every crash restart alike. A session stopped while this ran (``stop_session``, a
        move to another node, a shutdown) stays stopped: the new incarnation is neither
        registered nor announced (no ``resumed``), and the supervisor ends it with the
        stop's request, queued behind this start. What user code raises here (a model factory,
        the template's pickling, a plugin's ``session_start``), ``SystemExit``
        included, fails this start only: the supervisor turns it into a
        ``ChildStartError`` that counts against the session's restart intensity.
        """
        epoch = self.ownership.claim(record.session_id)
        pending, record.resume_from = record.resume_from, None
        snapshot = pending
        if snapshot is None and record.incarnations > 0:  # a first start is new or resumed
            snapshot = self._checkpoints.latest(record.session_id, record.events)
        if snapshot is not None:  # its turns sort after it, whoever's clock stamped it
            record.save_order.continues_from(snapshot)
        record.restart_usage(snapshot)
        launch = SessionLaunch(
            session_id=record.session_id,
            template=record.template,
            model=self.resolve_model(record.template),
            snapshot=snapshot,
            max_steps=self.policy.max_steps,
            checkpoint_every=self.policy.checkpoint_every,
            metadata=_saved_metadata(record),
            steering=record.steering,
            events=record.events,
            save=self._checkpoints.saver(record.events, record.save_order),
            save_later=self._checkpoints.later_saver(record.events, record.save_order),
            timeout=self.policy.call_timeout,
            credentials=self._credentials.resolve(record.tenant_id),
            epoch=epoch,
        )
        ref = self._runtime.start(launch)
        if record.status == "stopped":
            # Stopped (stop_session, moved, shut down) while this start ran: it must not
            # come back. Not registered nor announced; the supervisor ends it with the
            # stop's terminate_child (or its own shutdown), queued behind this start.
            logger.info(
                "session %r was stopped while it restarted; its new incarnation is stopped",
                record.session_id,
                extra={"session_id": record.session_id},
            )
            return ref
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
        record.last_active = self.policy.clock()
        if record.incarnations > 1:  # before it serves: no turn of it precedes this event
            checkpoint_id = None if snapshot is None else snapshot.checkpoint_id
            try:
                record.events.publish("resumed", checkpoint_id=checkpoint_id)
            except BaseException:  # a subscriber's SystemExit: the incarnation serves anyway
                logger.exception(
                    "session %r: an event subscriber failed on 'resumed'", record.session_id
                )
        self._table.set(record, "active", ref)
        return ref

    def serving_now(self, record: SessionRecord) -> pykka.ActorRef[Any] | None:
        """The session's serving incarnation if one serves now, else ``None``; never waits."""
        ref = record.ref
        return ref if record.status == "active" and _serving(ref) else None

    def serving(self, record: SessionRecord) -> pykka.ActorRef[Any]:
        """The session's serving incarnation: reactivate it, or wait for its restart, for
        up to ``restart_wait`` in all (a reactivated incarnation killed as it came back is
        restarted, and waited for, within the same time)."""
        ref = record.ref  # the usual case, without the lock: a stale answer only means
        if record.status == "active" and _serving(ref):  # NotDelivered, and a retry
            assert ref is not None
            return ref
        deadline = time.monotonic() + self.policy.restart_wait  # real time, whatever the clock
        while True:
            ref = self._await_serving(record, deadline)
            if ref is None:  # hibernated
                ref = self._reactivate(record, deadline)
            if ref is not None:
                return ref

    def _await_serving(self, record: SessionRecord, deadline: float) -> pykka.ActorRef[Any] | None:
        """The serving incarnation once the session is back, or ``None`` once it is
        hibernated (to be reactivated by the caller).

        Raises:
            SessionFailed, SessionNotFound: it was given up, or stopped.
            SessionCrashed: it did not come back by ``deadline``.
        """
        with self._table.changed:
            while True:
                ref = record.ref
                if record.status == "active" and _serving(ref):
                    return ref
                if record.status == "hibernated":
                    return None
                if record.status == "failed":
                    raise SessionFailed(
                        record.session_id, record.failure or "restart intensity exceeded"
                    )
                if record.status == "stopped":
                    raise SessionNotFound(record.session_id)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SessionCrashed(
                        record.session_id,
                        "it is being restarted and did not come back within "
                        f"{self.policy.restart_wait} s",
                    )
                self._table.changed.wait(min(remaining, 0.5))

    def _reactivate(self, record: SessionRecord, deadline: float) -> pykka.ActorRef[Any] | None:
        """Start a hibernated session's incarnation; it, if it serves once started, else
        ``None`` (it ended at once, a hibernation still stops the last one, or it was
        stopped while it started, which is then not announced): the caller waits for
        what comes next.

        Raises:
            ChildAlreadyExists: the last incarnation was still not stopped by ``deadline``.
            TimeoutError: the start took longer than ``call_timeout``.
            HostShutDown: the host shut down meanwhile.
        """
        try:
            self.supervisors.of(record.session_id).start_child(self._spec(record))
        except ChildStartError as err:
            if isinstance(err.cause, _Moved):
                self.lose(record)
            _reraise(err)
        except ChildAlreadyExists:
            # Another call's reactivation, which this one queued behind, started it (its
            # start is over: the supervisor answers in turn), or a hibernation has yet to
            # stop the incarnation it checkpointed, which nothing announces: look again.
            if record.status == "hibernated" and time.monotonic() >= deadline:
                raise
            if record.status == "hibernated":
                with self._table.changed:
                    self._table.changed.wait(_RETRY_START)
            return None
        except pykka.ActorDeadError as exc:  # its supervisor stopped: the host shut down
            raise HostShutDown from exc
        except pykka.Timeout as exc:
            raise TimeoutError(
                f"session {record.session_id!r} is being reactivated and did not start within "
                f"{self.policy.call_timeout} s (call_timeout): its start (its plugins' "
                "session_start, or a start ahead of it) takes longer; it serves once that "
                "start is over, so retry, or make session_start faster or raise call_timeout"
            ) from exc
        if record.status == "stopped":  # stopped (shut down, moved) while it started
            return None  # not reactivated: the caller learns why from its status
        self.ownership.hibernated(record.session_id, False)
        record.events.publish("reactivated")
        return self.serving_now(record)

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
            why = describe_reason(reason)
            logger.warning(
                "session %r crashed (%s); resuming it from its last checkpoint",
                entry.session_id,
                why,
                extra={"session_id": entry.session_id, "reason": reason_kind(reason)},
            )
            record.events.publish("crashed", reason=why, kind=reason_kind(reason))

    def _on_give_up(self, session_id: str, reason: ExitReason) -> None:
        """The supervisor gave up on a session (past its restart intensity)."""
        record = self._table.get(session_id)
        if record is None or record.status == "stopped":
            return  # stopped while it restarted: the stop wins, nothing is given up
        if isinstance(reason, _Moved):  # not a failure here: another node may run it
            if self._mark_moved(record, reason):  # its child is gone: given up
                self._forget_moved(record, reason)
            return
        why = describe_reason(reason)
        record.failure = f"{why}; past its restart intensity"
        self._table.set(record, "failed", None)
        record.events.publish("given_up", reason=why, kind=reason_kind(reason))
        logger.error(
            "session %r given up after repeated crashes (last: %s); fix the cause and resume() it",
            session_id,
            why,
            extra={"session_id": session_id, "reason": reason_kind(reason)},
        )

    def start_new(  # noqa: PLR0917 (mirrors AgentHost.start_session's parameters)
        self,
        session_id: str,
        template: AgentTemplate,
        tenant_id: str,
        api_key: str | None,
        attrs: dict[str, Any],
        resume_from: Snapshot | None = None,
    ) -> str:
        """Record a new (or resumed) session and start its first incarnation; its id."""
        # Steering accepted before the checkpoint (then a stop, shutdown or crash of the
        # host) waits for this session's next model call again, in the record's new queue;
        # a crash restart or reactivation keeps that queue and restores nothing.
        waiting = [] if resume_from is None else resume_from.steering()
        self._table.await_stop(session_id, self.policy.call_timeout)
        record = self._table.create(
            session_id,
            template,
            tenant_id,
            api_key,
            attrs,
            fingerprint=self.registry.fingerprint,
            saved_fingerprint=_saved_fingerprint(resume_from),
            hibernate_after_ms=self.policy.hibernate_after_ms,
            resume_from=resume_from,
        )
        record.steering.requeue(waiting)
        return self.launch(record)

    def resume(  # noqa: PLR0917 (mirrors AgentHost.resume's parameters)
        self,
        session_id: str,
        template: AgentTemplate,
        checkpoint_id: str | None,
        tenant_id: str | None,
        api_key: str | None,
        attrs: dict[str, Any],
    ) -> str:
        """``AgentHost.resume``: from the latest good (or a given) checkpoint, under the
        tenant it was saved with, which a given ``tenant_id`` must match."""
        existing = self._table.get(session_id)
        if existing is not None and existing.status != "stopped":
            require_tenant(session_id, existing.tenant_id, tenant_id)
        # A stop under way releases the session's ownership as it ends: claim it after.
        self._table.await_stop(session_id, self.policy.call_timeout)
        self.ownership.claim(session_id)  # before the load: no older owner saves after it
        try:
            if tenant_id is not None and checkpoint_id is not None:
                self._saved_checkpoint(session_id, None, tenant_id)  # the tenant before the id
            snapshot = self._saved_checkpoint(session_id, checkpoint_id, tenant_id)
            self._resolve_for_start(session_id, template)
        except BaseException as exc:
            # Nothing runs: the claim goes back (kept, no other node could start the id),
            # the session's state as it was (an orphan stays one for the sweepers), but for
            # one without a checkpoint: stopped, nothing to take over (as ``adopt`` says).
            self.ownership.release(session_id, stopped=isinstance(exc, CheckpointNotFound))
            if isinstance(exc, ChildStartError):
                _reraise(exc)
            raise
        if checkpoint_id is not None:
            # Continuing from an older checkpoint abandons the turns saved after
            # it: make it the newest, so a crash restart comes back here too.
            snapshot = self._checkpoints.relabel(snapshot, f"resumed from {checkpoint_id}")
        # Events an earlier owner made known to other nodes after its last checkpoint keep
        # their numbers: the new stream goes on above the highest of them.
        mark = self.ownership.event_mark(session_id)
        if mark > event_seq(snapshot):
            metadata = {**snapshot.metadata, EVENT_SEQ: mark}
            snapshot = dataclasses.replace(snapshot, metadata=metadata)
        tenant = _saved_tenant(snapshot)
        return self.start_new(session_id, template, tenant, api_key, attrs, resume_from=snapshot)

    def _saved_checkpoint(
        self, session_id: str, checkpoint_id: str | None, tenant_id: str | None
    ) -> Snapshot:
        """The (latest good) checkpoint, if it was saved under ``tenant_id`` (when given);
        else ``SessionNotFound``, as for a session without any checkpoint."""
        if checkpoint_id is not None:
            snapshot: Snapshot | None = self._checkpoints.store.load(session_id, checkpoint_id)
        else:  # the newest that is not damaged (see Checkpoints.latest)
            snapshot = self._checkpoints.latest(session_id)
        if snapshot is None:
            if tenant_id is not None:
                raise SessionNotFound(session_id)
            raise CheckpointNotFound(session_id)
        require_tenant(session_id, _saved_tenant(snapshot), tenant_id)
        return snapshot

    def checkpoint(self, record: SessionRecord, label: str | None) -> Snapshot:
        """``AgentHost.checkpoint``: the running incarnation's snapshot saved, or the latest
        checkpoint saved again as the newest, labelled ``label``. Refused (nothing saved)
        while the host's node is fenced or lost the session (``check_serving``, asked
        before the snapshot is taken and again before it is saved)."""
        self.ownership.check_serving(record.session_id)
        snapshot: Snapshot | None = self.ask_running(record, TakeSnapshot(label))
        self.ownership.check_serving(record.session_id)
        try:
            if snapshot is None:  # the newest that loads, as its next incarnation would
                copy = self._copy_latest(record, label)
                if copy is not None:
                    return copy
                # restarting with none saved: its next incarnation's
                snapshot = self.call(record, TakeSnapshot(label), self.policy.call_timeout)
            return self._checkpoints.save(snapshot, record.events, record.save_order)
        except OwnershipLost:
            self.lose(record)
            raise

    def _copy_latest(self, record: SessionRecord, label: str | None) -> Snapshot | None:
        """Save the session's newest checkpoint that loads again as its newest, labelled
        ``label``, with the steering waiting now; ``None`` if it has none. The read and the
        save hold the session's ``SaveOrder`` lock: a turn's snapshot saved meanwhile is
        saved before the read, or after the copy with an id after it (it holds the newer
        state)."""
        # Outside the lock first: a damaged checkpoint's event reaches subscribers, who may
        # call the session (a save of its turn would wait on this thread).
        if self._checkpoints.latest(record.session_id, record.events) is None:
            return None
        order = record.save_order
        with order.lock:
            latest = self._checkpoints.latest(record.session_id)
            if latest is None:
                return None
            # With the steering waiting now, as a serving incarnation's snapshot has it.
            steering = record.steering.waiting()
            return self._checkpoints.relabel(latest, label, record.events, order, steering)

    def history(self, record: SessionRecord) -> list[Message]:
        """``AgentHost.history``: the running incarnation's, else the last checkpoint's; none
        (restarting before its first checkpoint) is the empty history it comes back with.
        Refused while the host's node is fenced or lost the session: another node may have
        run turns this copy lacks. Asked again once the copy answered: passed then, the
        session was still this node's, so what the copy said was current."""
        self.ownership.check_serving(record.session_id)
        history: list[Message] | None = self.ask_running(record, GetHistory())
        if history is None:
            history = self.saved_history(record.session_id)
        self.ownership.check_serving(record.session_id)
        return history

    def saved_history(self, session_id: str) -> list[Message]:
        """The conversation of the session's newest checkpoint that loads (the one it comes
        back from: a damaged newer one is skipped, as a resume skips it); none (restarting
        before its first checkpoint) is the empty history it comes back with."""
        latest = self._checkpoints.latest(session_id)
        return [] if latest is None else latest.messages()

    def hibernate(self, record: SessionRecord) -> bool:
        """Checkpoint the session and stop its incarnation; False if another operation
        holds the session or no incarnation was serving."""
        if not record.op_lock.acquire(blocking=False):
            return False
        # Every checkpoint saved from here on counts ``hibernated`` (published once the
        # hibernation's is saved) in its event mark: its own, and one of a checkpoint()
        # whose snapshot, taken after it, is saved first (the session's newest then). A
        # stop of the hibernated session leaves that as its last, and the next life
        # numbers its events after it (else after the mark, reusing that seq).
        record.events.reserve()
        try:
            snapshot: Snapshot | None = self.ask_running(record, TakeSnapshot("hibernate"))
            return False if snapshot is None else self._hibernate(record, snapshot)
        finally:
            record.events.unreserve()
            record.op_lock.release()

    def _hibernate(self, record: SessionRecord, snapshot: Snapshot) -> bool:
        """Save a hibernation's ``snapshot``, stop the incarnation and announce it; False if
        it was not hibernated after all (moved, given up). The caller holds the op_lock."""
        try:
            # Taken under the op_lock: no turn of it ran since, nor can before this save.
            self._checkpoints.save(snapshot, record.events, record.save_order)
        except OwnershipLost:
            self.lose(record)
            return False
        self._table.set(record, "hibernated", None)
        self.ownership.hibernated(record.session_id, True)
        try:
            self.supervisors.of(record.session_id).terminate_child(
                record.session_id, shutdown=self.policy.call_timeout
            )
        except ChildNotFound:
            # Given up after its snapshot (crashes past its restart intensity): failed
            # it stays, as the give-up announced, until it is resumed.
            self._table.set(record, "failed", None)
            self.ownership.hibernated(record.session_id, False)
            return False
        except pykka.ActorDeadError as exc:  # its supervisor stopped: the host shut down
            raise HostShutDown from exc
        if record.status in ("active", "restarting"):
            # Killed after its snapshot: the restart registered while this waited for
            # the supervisor (set it active), and the terminate then ended that
            # incarnation (set it restarting). Hibernated stands: nothing runs, and the
            # checkpoint just saved is the session's newest.
            self._table.set(record, "hibernated", None)
            self.ownership.hibernated(record.session_id, True)  # as the restart left it
        record.events.publish("hibernated", checkpoint_id=snapshot.checkpoint_id)
        return True

    def hibernate_idle(self) -> list[str]:
        """Hibernate every active session idle for longer than its limit; their ids."""
        now = self.policy.clock()
        return [
            record.session_id
            for record in self._table.records()
            if record.hibernate_after is not None
            and record.status == "active"
            and now - record.last_active >= record.hibernate_after
            and self.hibernate(record)
        ]

    def stop(self, record: SessionRecord, *, checkpoint: bool = True) -> None:
        """Stop the session for good: final checkpoint (unless not ``checkpoint``), not
        restarted, forgotten. The caller holds the record's ``op_lock``."""
        try:
            if checkpoint:
                self.final_checkpoint(record, await_restart=True)
        except OwnershipLost:
            self.lose(record)
            raise
        self._table.set(record, "stopped", None)
        with contextlib.suppress(Exception):
            self.supervisors.of(record.session_id).terminate_child(
                record.session_id, shutdown=self.policy.call_timeout
            )
        try:
            if checkpoint:
                self._cover_late_events(record)
            self.ownership.release(record.session_id, stopped=True)
        finally:  # last: a new session of its id waits for this (``await_stop``)
            self._table.forget(record)

    def _cover_late_events(self, record: SessionRecord) -> None:
        """Once a stopped session's incarnation is gone, have its last checkpoint cover what
        came after its final checkpoint (a kill racing the stop: ``crashed``, and steering
        its next life has to take), so its next life numbers on after those events. The
        stop is done whatever happens: a failure is logged, and that life may repeat those
        seqs."""
        try:
            self._cover_stop(record)
        except Exception:
            logger.exception(
                "session %r: saving the event mark of its stop failed; events after its final "
                "checkpoint may be numbered again when it is resumed",
                record.session_id,
            )

    def _cover_stop(self, record: SessionRecord) -> None:
        self._checkpoints.cover_stop(
            record.session_id, record.events, record.save_order, record.steering.waiting()
        )

    def lose(self, record: SessionRecord) -> None:
        """Stop a session another node owns now, here, for good: no final checkpoint (it
        would be refused), not restarted, forgotten; a ``moved`` event tells subscribers.
        Idempotent; runs on the caller's thread (never the session's own).

        The record is forgotten (and ``moved`` announced) last, once its incarnation has
        ended: a resume of the session right after the move waits for that
        (``await_stop``), where it used to find the id free while the supervisor still
        had the child (``ChildAlreadyExists``).
        """
        why = "another node owns it now"
        moved = self._mark_moved(record, why)
        try:
            with contextlib.suppress(Exception):
                self.supervisors.of(record.session_id).terminate_child(record.session_id)
            # Again once its incarnation is gone: a crash restart that began before the
            # stop claimed the session anew, and that claim would keep it here, run nowhere.
            self.ownership.release(record.session_id, stopped=False)
        finally:
            if moved:
                self._forget_moved(record, why)

    def lose_id(self, session_id: str) -> None:
        """``lose`` the session of that id, if the host has it (the node's callback)."""
        record = self._table.get(session_id)
        if record is not None and record.status != "stopped":
            self.lose(record)

    def _mark_moved(self, record: SessionRecord, why: object) -> bool:
        """Release a moved session's ownership here and mark it stopped; False if it was
        stopped already (nothing more to do then)."""
        self.ownership.release(record.session_id, stopped=False)
        if not self._table.set(record, "stopped", None):
            return False  # stopped already (by another move, say): that one goes on
        logger.warning(
            "session %r stopped here: %s",
            record.session_id,
            why,
            extra={"session_id": record.session_id, "reason": "moved"},
        )
        return True

    def _forget_moved(self, record: SessionRecord, why: object) -> None:
        """Forget a moved session marked stopped (``_mark_moved``), its child gone, and
        announce ``moved``: subscribers then find its id free here, and its event streams
        end only after it (``SessionTable.forget``): ``moved``, which tells a reader where
        to follow the session, is their last event."""
        self._table.forget(record, functools.partial(self._announce_moved, record, why))

    def _announce_moved(self, record: SessionRecord, why: object) -> None:
        """Drop what the ownership kept of a forgotten moved session, and publish ``moved``."""
        self.ownership.forget(record.session_id)
        record.events.publish("moved", reason=str(why))

    def adopt(self, session_id: str) -> SessionRecord | None:
        """For a call naming a session this host does not have: take it over when the
        ownership says so (a node's orphan, with its template) and return its record, or
        ``None`` when there is nothing to take over.

        Raises:
            SessionOwnedElsewhere: a live other node owns it.
        """
        template = self.ownership.locate(session_id)
        if template is None:
            return None
        try:
            self.resume(session_id, template, None, None, None, {})
        except SessionAlreadyExists:
            pass  # another caller took it over first
        except CheckpointNotFound:
            logger.warning(
                "session %r has no checkpoint to take over from (its node died before its "
                "first turn was saved); it is marked stopped",
                session_id,
            )
            self.ownership.release(session_id, stopped=True)
            return None
        return self._table.get(session_id)

    def final_checkpoint(self, record: SessionRecord, *, await_restart: bool = False) -> None:
        """Checkpoint a session that is being stopped, if an incarnation serves. One being
        restarted (or killed just now), hibernated or given up keeps its last checkpoint's
        state, saved again only to cover what came after it: events its stream published
        past that checkpoint's mark (its next life numbers on after them) and steering
        accepted meanwhile (``Checkpoints.cover_stop``). With ``await_restart``
        (``stop_session``; a shutdown does not restart sessions), one being restarted that
        has no checkpoint at all (killed before its first turn was saved) is waited for, up
        to ``restart_wait``, and checkpointed once back: else it could not be resumed."""
        snapshot: Snapshot | None = self.ask_running(record, TakeSnapshot())
        if snapshot is None and await_restart and record.status in ("active", "restarting"):
            snapshot = self._first_snapshot_once_back(record)
        if snapshot is None:
            logger.debug("session %r is not running; its last checkpoint stands", record.session_id)
            self._cover_stop(record)
        else:  # a stop holds the op_lock, a shutdown refuses calls: no turn of it runs first
            self._checkpoints.save(snapshot, record.events, record.save_order)

    def _first_snapshot_once_back(self, record: SessionRecord) -> Snapshot | None:
        """A snapshot of a session being restarted that has no checkpoint yet, taken once its
        restart is back; ``None`` if it has a checkpoint, or does not come back in time."""
        if self._checkpoints.latest(record.session_id) is not None:
            return None
        logger.info(
            "session %r is stopped while it restarts, before its first checkpoint: waiting "
            "for it to come back to checkpoint it",
            record.session_id,
            extra={"session_id": record.session_id},
        )
        deadline = time.monotonic() + self.policy.restart_wait
        try:
            self._await_serving(record, deadline)
        except (SessionFailed, SessionCrashed, SessionNotFound) as exc:
            logger.warning(
                "session %r was stopped while it restarted before its first checkpoint, and "
                "did not come back (%s): it has no checkpoint and cannot be resumed",
                record.session_id,
                exc,
                extra={"session_id": record.session_id},
            )
            return None
        snapshot: Snapshot | None = self.ask_running(record, TakeSnapshot())
        return snapshot


def _reraise(err: ChildStartError) -> NoReturn:
    """Raise the error a session's start failed with, as the caller would have seen it in
    its own thread, with its original chain; one that is not an ``Exception``
    (``SystemExit`` from a model factory or a template's pickling) stays wrapped in
    ``err``, which names the session: it must not end the caller's thread or program."""
    cause = err.cause
    context = cause.__context__
    try:
        if isinstance(cause, Exception):
            raise cause from cause.__cause__
        raise err
    finally:
        # Raised in the ``except`` that caught ``err``, ``cause`` got ``err`` as its hidden
        # ``__context__`` (``from`` suppresses it), and ``err`` holds ``cause``: a reference
        # cycle. It gets back the context it came with. And this frame is in the raised
        # error's traceback: kept as its locals, ``err`` and ``cause`` made a cycle too.
        cause.__context__ = context
        del err, cause, context


def _serving(ref: pykka.ActorRef[Any] | None) -> bool:
    """Whether ``ref``'s incarnation can take a call: alive, and not killed or stopping."""
    if ref is None or not ref.is_alive():
        return False
    lifecycle = lifecycle_of(ref)
    return lifecycle is None or not lifecycle.ending


KEY_FINGERPRINT = "key_fingerprint"
"""Checkpoint metadata key: the HMAC fingerprint of the session's API key (never the key)."""


def _saved_metadata(record: SessionRecord) -> dict[str, Any]:
    """What a session's checkpoints record of its registration: its tenant, and the
    fingerprint of its API key (never the key), so a resume needs neither again."""
    if record.fingerprint is None:
        return {"tenant_id": record.tenant_id}
    return {"tenant_id": record.tenant_id, KEY_FINGERPRINT: record.fingerprint}


def _saved_fingerprint(snapshot: Snapshot | None) -> str | None:
    """The API-key fingerprint a checkpoint was saved with, if any."""
    saved = None if snapshot is None else snapshot.state.get("metadata", {}).get(KEY_FINGERPRINT)
    return saved if isinstance(saved, str) else None


def _saved_tenant(snapshot: Snapshot) -> str:
    """The tenant a checkpoint was saved under (``default`` for one saved without)."""
    saved = snapshot.state.get("metadata", {}).get("tenant_id")
    return saved if isinstance(saved, str) else "default"
