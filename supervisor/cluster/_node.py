"""``ClusterNode``: one host's membership of a cluster: its leases, heartbeat and fence.

The data flow, all rules decided in PostgreSQL (``_leases``)::

    host ── claim(sid) ──────────▶ sessions: owner = me, epoch += 1 ─▶ leases[sid] = epoch
    host ── save(snapshot) ──────▶ save_checkpoint(..., fence = me, epoch) ─▶ OwnershipLost?
    heartbeat thread, every ttl/3 ─▶ nodes: heartbeat = now()   (on the database clock)
    sweeper thread, every sweep ──▶ claim orphans (FOR UPDATE SKIP LOCKED) ─▶ adopt(sid)
        (every ttl/4, or sooner: at the moment another node's lease lapses)
    shutdown ── drain() ─────────▶ sessions: owner = NULL; nodes: heartbeat = NULL

Self-fencing: the node counts, on its own monotonic clock, from the moment it
*sent* its last successful heartbeat; past ``fence_after`` (TTL minus the
margin) it refuses turns and claims (``NodeFenced``), which is before any
other node can see its heartbeat as older than the TTL. A heartbeat that
succeeds after a fence first checks every lease against the database and
hands the sessions claimed elsewhere meanwhile to ``lose``, then lifts the
fence; its sweeper then takes nothing over for one TTL (after an outage of the
database every lease lapsed at once, and the other nodes are about to renew
theirs). Saves need no fence check of their own: the database refuses a save
whose epoch is stale, whatever the node believes. A call answered from a session's copy
here (``history``, ``checkpoint``) asks ``check_serving(session_id)``, which also
refuses a session whose lease the node lost (``OwnershipLost``) while the host is still
stopping its copy: that copy lacks the new owner's turns.

A copy that outlived its lease: when the database saw this node as dead without the
node fencing itself (its clock and the database's disagree), another node may have
run the session meanwhile while the copy here lives on. If this node then claims the
session again (a sweep, or that copy's own restart or reactivation), the claim's
epoch is not the copy's: the copy lacks the other owners' turns and holds steering
they used already. It never runs on the new epoch: it is stopped (``lose``), the
claim released, and the session taken over anew from its latest checkpoint.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors import AgentTemplate, Snapshot
from supervisor.checkpoint_store import CheckpointInfo
from supervisor.cluster import _holder as holder
from supervisor.cluster._config import NodeConfig
from supervisor.cluster._events import ClusterEvents
from supervisor.cluster._leases import LeaseTable, Owner
from supervisor.cluster._transports import transport_for
from supervisor.errors import (
    NodeFenced,
    NodeIdInUse,
    OwnershipLost,
    SessionOwnedElsewhere,
    StoreBusy,
    StoreFull,
    StoreUnreachable,
)
from supervisor.postgres_store import Fence, PostgresCheckpointStore

if TYPE_CHECKING:
    import psycopg

__all__ = ["ClusterNode"]

logger = logging.getLogger("supervisor.cluster")

_BEST_EFFORT = (StoreUnreachable, StoreBusy, StoreFull, ValueError)
"""What a best-effort write of the node's (a lease check, a state, a release) logs and
goes on from: the database out of reach, busy or full, or the store closed (ValueError)."""
_AFTER_LAPSE = 0.01
"""Seconds a sweep waits past a lease's lapse, so the database sees it lapsed."""


@dataclass(frozen=True, slots=True)
class _Lease:
    epoch: int
    claimed_at: float  # the node's clock when the claim was sent


class ClusterNode:
    """A host's node in a cluster sharing one ``PostgresCheckpointStore``. Thread-safe.

    Built by ``AgentHost(node=NodeConfig(...))`` (reach it as ``host.node``); it
    registers at once. ``start`` begins the heartbeat and sweeper threads;
    ``drain`` releases every session and stops them. Without ``start`` (tests)
    call ``renew`` and ``sweep`` yourself. ``events`` is its event fan-out
    (``ClusterEvents``, unless ``config.events`` is ``None``), closed by ``drain``.

    A process restarted under a node id whose previous run was killed (its lease
    still live) takes the id over at once when it can prove that run is gone (same
    machine boot and PID namespace, the PID no longer that process: ``_holder``);
    else it raises ``NodeIdInUse`` until that lease lapses.

    Raises:
        NodeIdInUse: another live process is registered under ``config.node_id``.
        StoreUnreachable: the database cannot be reached.
    """

    def __init__(self, store: PostgresCheckpointStore, config: NodeConfig) -> None:
        self.store = store
        self.config = config
        self._table = LeaseTable(store)
        self._clock = config.clock
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {}
        # Sessions the database gave this node again (at the epoch noted) while a copy of
        # them still ran here on an older lease: that copy lacks what the owners between
        # ran, so it is stopped (``lose``) and the claim released before the session runs
        # here again, from its latest checkpoint (``_stale_claim``, ``release``).
        self._stale: dict[str, int] = {}
        # Sessions whose lease this node held and lost (another node claimed them: found by
        # a renewal after a fence, a refused save, a claim), with the epoch lost: the copy
        # here is out of date, and no call may be answered from it (``check_serving``).
        # Kept until the node claims the session again, stops it for good, or the host
        # forgot its copy (``forget``): the host's ``lose`` releases a moved session before
        # it marks it stopped, and a call between the two must still be refused.
        self._revoked: dict[str, int] = {}
        self._stopping = threading.Event()
        self._no_adoption = threading.Event()  # the host is shutting down: take nothing over
        self._wake = threading.Event()  # the housekeeping thread has sessions to lose
        self._to_lose: list[str] = []
        self._threads: list[threading.Thread] = []
        self._heartbeat_conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._adopt: Callable[[str], object] | None = None
        self._lose: Callable[[str], None] | None = None
        self._gone: str | None = None  # why the node will never serve again
        self._sweep_from = -math.inf  # no sweep before this (the clock's) time: ``sweep``
        # Before registering: a transport that cannot be had (no redis library) fails here.
        transport = None if config.events is None else transport_for(store, config.events)
        sent = self._clock()
        registered = self._table.register(
            config.node_id, config.address, config.ttl, holder.new_holder(), holder.gone
        )
        if not isinstance(registered, int):
            if transport is not None:
                transport.close()
            raise NodeIdInUse(config.node_id, *registered)
        self.incarnation = registered
        store.member = (config.node_id, registered)  # (the gateway's key store reads it)
        self._deadline = sent + config.fence_after
        self.events: ClusterEvents | None = None
        if transport is not None:
            self.events = ClusterEvents(store, config.node_id, registered, self.epoch, transport)

    def __repr__(self) -> str:
        return f"<ClusterNode {self.node_id!r} incarnation {self.incarnation}>"

    @property
    def node_id(self) -> str:
        """The node's id."""
        return self.config.node_id

    # -- the fence -------------------------------------------------------------------------

    @property
    def fenced(self) -> str | None:
        """Why the node accepts no turns now, or ``None`` when it does."""
        if self._gone is not None:
            return self._gone
        late = self._clock() - self._deadline
        if late > 0:
            return f"its lease was last renewed {late + self.config.fence_after:.2f} s ago"
        return None

    def check_serving(self, session_id: str | None = None) -> None:
        """Raise ``NodeFenced`` when the node must not run turns (see the module docstring);
        with ``session_id``, also ``OwnershipLost`` when the node lost that session's lease
        to another node and its copy here is out of date (it is being stopped). Reads only
        the node's own state: no database round trip.

        A call answered from the session's copy here asks it before and again after the
        copy answers: a node that passes it at a moment owned the session then (no other
        node can have claimed it yet), so an answer read before that moment was current.
        """
        gone = self._gone
        if gone is not None:  # no renewal will ever lift it
            raise NodeFenced(self.node_id, gone, final=True)
        reason = self.fenced
        if reason is not None:
            raise NodeFenced(self.node_id, reason)
        if session_id is not None:
            self._check_not_revoked(session_id)

    def _check_not_revoked(self, session_id: str) -> None:
        """Raise ``OwnershipLost`` if the node lost the session's lease (``_revoked``) or
        claimed it back while its old copy still runs here (``_stale``)."""
        with self._lock:
            revoked = self._revoked.get(session_id)
            if revoked is None:
                revoked = self._stale.get(session_id)
        if revoked is not None:
            raise OwnershipLost(
                session_id,
                self.node_id,
                revoked,
                "another node claimed it since, so the copy here is out of date; it is being "
                "stopped",
            )

    def renew(self) -> bool:
        """One heartbeat: True if the lease was renewed. After a fence, the leases are
        checked against the database before the fence is lifted (see the module docstring);
        if they cannot be read (the database unreachable, or the read cancelled), False and
        the fence stays until a later heartbeat reads them. Never raises: called by the
        heartbeat thread, which must outlive any failure; callable directly when the node
        was not started."""
        if self._gone is not None:
            return False
        sent = self._clock()
        renewed = self._renew_once(retry=True)
        if renewed is None:
            return False
        if not renewed:
            self._gone = (
                "its lease lapsed and another process registered under its node id, or its "
                "row in the nodes table was drained or removed"
            )
            logger.error("node %r: %s; it stops serving", self.node_id, self._gone)
            for session_id in self.leases():
                self._lost(session_id)
            return False
        if self._clock() > self._deadline:  # it was fenced: some sessions may have moved
            try:
                self._check_leases(sent)
            except _BEST_EFFORT as exc:
                logger.warning("node %r: cannot check its leases: %s", self.node_id, exc)
                return False
            # Back from a fence: sweep nothing for a TTL (see ``sweep``).
            self._sweep_from = self._clock() + self.config.ttl
        with self._lock:
            self._deadline = max(self._deadline, sent + self.config.fence_after)
        return True

    def _renew_once(self, *, retry: bool) -> bool | None:
        """The heartbeat's UPDATE on its own connection: whether the row is still this
        incarnation's, or ``None`` if the database could not be reached. A connection the
        server ended while it sat idle between heartbeats (``idle_session_timeout``, a
        pooler, ``pg_terminate_backend``) is replaced and the UPDATE sent once more
        (``retry``): one lost connection must not cost a heartbeat, which with a large
        margin would fence the node."""
        conn = self._heartbeat_conn
        fresh = conn is None or conn.closed or conn.broken
        try:
            if conn is None or fresh:
                conn = self._heartbeat_conn = self.store.connect()
            return self._table.renew(conn, self.node_id, self.incarnation)
        except Exception as exc:  # the database is unreachable: the fence will follow
            self._close_heartbeat_connection()
            if retry and not fresh:  # it was an old connection: maybe only that one is gone
                logger.info(
                    "node %r: heartbeat connection lost (%s); reconnecting", self.node_id, exc
                )
                return self._renew_once(retry=False)
            logger.warning("node %r: heartbeat failed: %s", self.node_id, exc)
            return None

    def _check_leases(self, before: float) -> None:
        """Drop the leases (claimed before ``before``) the database no longer gives us."""
        owned = self._table.owned(self.node_id, self.incarnation)
        with self._lock:
            lost = [
                sid
                for sid, lease in self._leases.items()
                if lease.claimed_at < before and owned.get(sid) != lease.epoch
            ]
        for session_id in lost:
            logger.warning(
                "node %r: session %r was claimed by another node while this one was fenced",
                self.node_id,
                session_id,
            )
            self._lost(session_id)

    def _lost(self, session_id: str) -> None:
        """Drop the lease now; the housekeeping thread stops the session (which may wait for
        a turn in progress: never on the heartbeat's thread)."""
        with self._lock:
            lease = self._leases.pop(session_id, None)
            if lease is not None:
                self._revoked[session_id] = lease.epoch
            if self._lose is not None:
                self._to_lose.append(session_id)
        self._wake.set()

    # -- leases ----------------------------------------------------------------------------

    def leases(self) -> dict[str, int]:
        """The sessions this node holds a lease on, with their epochs (a copy)."""
        with self._lock:
            return {sid: lease.epoch for sid, lease in self._leases.items()}

    def epoch(self, session_id: str) -> int | None:
        """The epoch of this node's lease on the session, or ``None``."""
        with self._lock:
            lease = self._leases.get(session_id)
        return None if lease is None else lease.epoch

    def claim(self, session_id: str) -> int:
        """Own the session (claimed in the database, or confirmed if already ours); its epoch.

        Raises:
            NodeFenced: the node is fenced (it claims nothing then).
            SessionOwnedElsewhere: a live other node owns it.
            OwnershipLost: this node held an older lease on it: the session ran elsewhere
                since, and the copy of it here is stopped (see the module docstring);
                call again once it is, to take the session over from its checkpoint.
        """
        self.check_serving()
        sent = self._clock()
        with self._lock:
            stale = self._stale.get(session_id)
            held = self._leases.get(session_id)
        if stale is not None:  # its copy here is being stopped: not restarted on this claim
            raise self._stale_claim(session_id, stale)
        try:
            epoch = self._table.claim(session_id, self.node_id, self.incarnation)
        except SessionOwnedElsewhere:
            with self._lock:
                lost = self._leases.pop(session_id, None)
                if lost is not None:  # a copy of it ran here on that lease: out of date now
                    self._revoked[session_id] = lost.epoch
            raise
        with self._lock:
            if held is not None and held.epoch != epoch and self._lose is not None:
                # Our claims never bump an epoch we hold: the session left this node and
                # came back, and the copy that asks (a restart, a reactivation) is stale.
                # The housekeeping thread stops it and releases this claim (``_housekeep``).
                if self._leases.get(session_id) is held:
                    del self._leases[session_id]
                self._stale[session_id] = epoch
                self._revoked[session_id] = held.epoch
                self._to_lose.append(session_id)
                self._wake.set()
                raise self._stale_claim(session_id, epoch)
            self._leases[session_id] = _Lease(epoch, sent)
            self._revoked.pop(session_id, None)  # ours again: what runs here runs on it
        return epoch

    def _stale_claim(self, session_id: str, epoch: int) -> OwnershipLost:
        """The error of a claim by a copy of the session that ran here before it moved."""
        return OwnershipLost(
            session_id,
            self.node_id,
            epoch,
            "it ran on another node since its copy here last ran, so that copy is out of "
            "date; it is stopped, and the session is taken over anew from its latest "
            "checkpoint",
        )

    def event_mark(self, session_id: str) -> int:
        """The highest event seq of the session any owner sent to other nodes (the
        ``sessions.event_seq`` its ``events`` fan-out keeps); 0 if none."""
        return self._table.event_mark(session_id)

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        """Save through the store, fenced by this node's lease on the session; what the
        store says it saved.

        Raises:
            OwnershipLost: no lease here, or the database refused it (the lease is dropped).
        """
        sid = snapshot.session_id
        epoch = self.epoch(sid)
        if epoch is None:
            raise OwnershipLost(sid, self.node_id, 0, "this node holds no lease on it")
        try:
            return self.store.save(snapshot, fence=Fence(self.node_id, self.incarnation, epoch))
        except OwnershipLost:
            with self._lock:
                lease = self._leases.get(sid)
                if lease is not None and lease.epoch == epoch:
                    del self._leases[sid]
                    self._revoked[sid] = epoch
            raise

    def hibernated(self, session_id: str, hibernated: bool) -> None:
        """Record the session's state, so a sweeper resumes only active sessions eagerly.
        Best effort (the host has hibernated or woken the session already): a state that
        cannot be recorded is logged, and at worst a sweeper resumes a hibernated session
        of this node's after it died."""
        epoch = self.epoch(session_id)
        if epoch is not None:
            state = "hibernated" if hibernated else "active"
            try:
                self._table.set_state(session_id, self.node_id, self.incarnation, epoch, state)
            except _BEST_EFFORT as exc:
                logger.warning(
                    "node %r: could not record %r as %s: %s", self.node_id, session_id, state, exc
                )

    def release(self, session_id: str, *, stopped: bool) -> None:
        """Drop the lease and, if the database still gives it to us, release the session
        (``stopped``: marked so that no sweeper resumes it). Best effort, never raises (the
        host has stopped the session already): a release that cannot reach the database,
        or waits too long for the session's row, leaves it to be claimed after the TTL."""
        with self._lock:
            lease = self._leases.pop(session_id, None)
            stale = self._stale.pop(session_id, None)
            if stopped:  # its life here is over (a move keeps the mark: see ``_revoked``)
                self._revoked.pop(session_id, None)
        if lease is not None:
            self._release(session_id, lease.epoch, stopped=stopped)
        if stale is not None:  # the claim its stale copy could not run on
            self._release(session_id, stale, stopped=stopped)

    def forget(self, session_id: str) -> None:
        """The host forgot its copy of a session it lost: no call can reach that copy now
        (one finds the session missing and asks who owns it), so the mark that refused
        them (``_revoked``) goes; kept, every session ever moved away left one."""
        with self._lock:
            self._revoked.pop(session_id, None)

    def _release_stale(self, session_id: str) -> None:
        """Release the claim of a session whose stale copy here was stopped (if the host's
        stop of that copy did not already), its state kept: it is taken over anew."""
        with self._lock:
            stale = self._stale.pop(session_id, None)
        if stale is not None:
            self._release(session_id, stale, stopped=False)

    def _release(self, session_id: str, epoch: int, *, stopped: bool) -> None:
        """Release the session if the database still gives it to us at ``epoch``; logged,
        never raised, if the database cannot take it (see ``release``)."""
        try:
            self._table.release(
                session_id,
                self.node_id,
                self.incarnation,
                epoch,
                "stopped" if stopped else None,
            )
        except _BEST_EFFORT as exc:
            logger.warning("node %r: could not release %r: %s", self.node_id, session_id, exc)

    def owner(self, session_id: str) -> Owner | None:
        """The session's owner as the database has it now (one read by primary key), or
        ``None`` when no node ever claimed it: what a gateway routes a request by.

        Raises:
            StoreUnreachable: the database cannot be reached.
        """
        return self._table.owner(session_id)

    def owners(self, session_ids: list[str]) -> dict[str, Owner]:
        """The owners of ``session_ids`` as the database has them now, in one read; an id
        no node ever claimed is absent. What a gateway lists a tenant's sessions by.

        Raises:
            StoreUnreachable: the database cannot be reached.
        """
        return self._table.owners(session_ids)

    def locate(self, session_id: str) -> AgentTemplate | None:
        """For a session this host does not run: the template to take it over on here, or
        ``None`` (no template configured, or it was stopped, or no node ever claimed it
        and it has no checkpoint).

        Raises:
            SessionOwnedElsewhere: a live other node owns it.
        """
        owner = self._table.owner(session_id)
        if owner is not None and owner.node_id is not None:
            mine = (owner.node_id, owner.incarnation) == (self.node_id, self.incarnation)
            if owner.live and not mine:
                raise SessionOwnedElsewhere(session_id, owner.node_id, owner.address)
        if owner is not None and owner.state == "stopped":
            return None
        template = self.config.template_for(session_id)
        if template is not None and owner is None and not self.store.list(session_id):
            # Never claimed, nothing saved: nothing to take over. Claiming it (to find no
            # checkpoint) would take the id from a create of it in flight on another node,
            # which then answered 409 for a session that existed nowhere.
            return None
        return template

    # -- background work -------------------------------------------------------------------

    def start(self, adopt: Callable[[str], object], lose: Callable[[str], None]) -> None:
        """Start the heartbeat thread and the housekeeping thread, which stops the sessions
        found claimed elsewhere (``lose(session_id)``) and, when the config has a template,
        sweeps for orphans and resumes them (``adopt(session_id)``). Both callbacks run on
        the housekeeping thread."""
        self._adopt = adopt
        self._lose = lose
        self._threads = [
            threading.Thread(target=self._beat, name=f"sv-heartbeat-{self.node_id}", daemon=True),
            threading.Thread(
                target=self._housekeep, name=f"sv-sweeper-{self.node_id}", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    def _beat(self) -> None:
        while not self._stopping.wait(self.config.heartbeat_interval):
            try:
                self.renew()
            except Exception:  # a heartbeat thread that died would fence the node for good
                logger.exception("node %r: heartbeat failed", self.node_id)

    def _housekeep(self) -> None:
        while True:
            self._wake.wait(self._until_next_sweep())
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._lock:
                doomed, self._to_lose = self._to_lose, []
            for session_id in doomed:
                if not self._still_to_lose(session_id):
                    continue
                try:
                    assert self._lose is not None
                    self._lose(session_id)
                except Exception:
                    logger.exception(
                        "node %r: stopping lost session %r failed", self.node_id, session_id
                    )
                finally:  # a stale claim with no copy left to stop it is released here
                    self._release_stale(session_id)
            if self.config.template is not None:
                try:
                    self.sweep()
                except Exception:
                    logger.exception("node %r: sweep for orphaned sessions failed", self.node_id)

    def _still_to_lose(self, session_id: str) -> bool:
        """Whether the copy here that a stale claim or a lost lease doomed may still run:
        its mark (``_stale`` or ``_revoked``) is there until the host stopped and forgot it.
        Without the mark the host lost it already (a copy given up after its restarts' stale
        claims, say), and the session may have been taken over anew here since: stopping
        it then would stop that new, rightful incarnation."""
        with self._lock:
            return session_id in self._stale or session_id in self._revoked

    def _until_next_sweep(self) -> float:
        """Seconds until the next sweep: ``sweep_every``, or less when another node's lease
        lapses sooner, so its sessions are taken over the moment they can be, not up to a
        sweep interval later (a dead node's lease no longer moves; a live node's renews
        before it lapses, so it never brings a sweep forward)."""
        every = self.config.sweep_every
        if self.config.template is None or not self.adopting or self._stopping.is_set():
            return every
        try:
            lapse = self._table.next_lapse(self.node_id)
        except (StoreUnreachable, StoreBusy, StoreFull) as exc:
            logger.debug("node %r: reading the leases failed: %s", self.node_id, exc)
            return every
        return every if lapse is None else min(every, lapse + _AFTER_LAPSE)

    @property
    def adopting(self) -> bool:
        """Whether the sweeper still takes sessions over (until ``stop_adopting``)."""
        return not self._no_adoption.is_set()

    def stop_adopting(self) -> None:
        """Take no more sessions over: the host is shutting down (it calls this before its
        final checkpoints) and could not run them. Sessions other nodes release meanwhile
        are left to the nodes that stay. Idempotent."""
        self._no_adoption.set()

    def sweep(self) -> list[str]:
        """Claim the active sessions of dead nodes, a batch at a time, and adopt them;
        returns their ids. Does nothing while the node is fenced, for one TTL after a
        fence was lifted, or once it stopped adopting. The TTL after a fence: when the
        database was out of reach for longer than the TTL, every node's lease lapsed at
        once, and the first node back must not take over the sessions of the others,
        which renew within a heartbeat interval (they would be stopped there and all moved
        to it); a node still gone after that TTL is dead. A claimed session the host does
        not take over is released: as stopped when it has no checkpoint (by the host),
        else kept active for another node (this one has no template for it:
        ``NodeConfig.template`` returned ``None``)."""
        adopted: list[str] = []
        batch = self.config.sweep_batch
        handed_back = False  # a session went back to the orphans: the next batch could hold it
        while self.fenced is None and self.adopting and not self._stopping.is_set():
            sent = self._clock()
            if sent < self._sweep_from:
                break
            claimed = self._table.claim_orphans(self.node_id, self.incarnation, batch)
            stale = self._record_claims(claimed, sent)
            for session_id, _ in claimed:
                if not self.adopting:
                    break  # claimed as the host began shutting down: its drain releases them
                if session_id in stale:
                    self._drop_stale_copy(session_id)
                if self._adopt is not None:
                    try:
                        if self._adopt(session_id) is None:
                            if self.epoch(session_id) is not None:  # no template here
                                self.release(session_id, stopped=False)
                                handed_back = True
                            continue  # (no checkpoint: the host released it as stopped)
                    except Exception:
                        if not self.adopting:  # the host shut down under it: drain releases it
                            break
                        logger.exception(
                            "node %r: could not resume orphaned session %r; it stays owned "
                            "here and is resumed on its next request",
                            self.node_id,
                            session_id,
                        )
                        continue
                adopted.append(session_id)
            if len(claimed) < batch or handed_back:
                break  # the rest wait for the next sweep, after other nodes' sweeps
        return adopted

    def _record_claims(self, claimed: list[tuple[str, int]], sent: float) -> set[str]:
        """Note a sweep's claims as leases; the ids of those this node still ran a copy of
        on an older lease (its own heartbeat looked dead to the database meanwhile), which
        are noted stale instead (see ``_stale``), when a host runs the sessions."""
        stale: set[str] = set()
        with self._lock:
            for session_id, epoch in claimed:
                held = self._leases.get(session_id)
                if self._lose is not None and (held is not None or session_id in self._stale):
                    self._leases.pop(session_id, None)
                    self._stale[session_id] = epoch
                    stale.add(session_id)
                else:
                    self._leases[session_id] = _Lease(epoch, sent)
                    self._revoked.pop(session_id, None)
        return stale

    def _drop_stale_copy(self, session_id: str) -> None:
        """Stop the stale copy of a session a sweep claimed back (on this, the housekeeping
        thread, as ``lose`` always runs) and release the claim, so that the adoption that
        follows resumes the session from its latest checkpoint, with what the owners
        between saved, instead of running on the copy."""
        assert self._lose is not None
        try:
            self._lose(session_id)
        finally:
            self._release_stale(session_id)

    def drain(self) -> None:
        """Release every session (their state kept, so sweepers resume the active ones at
        once), mark the node gone, and stop the threads. Idempotent; never raises (the
        host's shutdown calls it last): a drain the database cannot take (unreachable,
        busy, full) is logged, and the sessions are claimable once the TTL lapses. The
        event fan-out sends what it has queued first (its marks need the leases)."""
        if self.events is not None:
            self.events.close()
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        try:
            if self._gone is None:
                self._gone = "it was drained"
                try:
                    released = self._table.drain(self.node_id, self.incarnation)
                    logger.info("node %r drained: released %d sessions", self.node_id, released)
                except _BEST_EFFORT as exc:  # e.g. the rows locked past transaction_timeout
                    logger.warning(
                        "node %r: drain failed (its TTL will free them): %s", self.node_id, exc
                    )
        finally:  # whatever happened: no lease kept, no connection left open
            with self._lock:
                self._leases.clear()
                self._stale.clear()
                self._revoked.clear()
            self._close_heartbeat_connection()

    def _close_heartbeat_connection(self) -> None:
        conn, self._heartbeat_conn = self._heartbeat_conn, None
        if conn is not None:
            conn.close()


ClusterNode.__module__ = "supervisor.cluster"
