"""``Checkpoints``: the one place an ``AgentHost`` writes checkpoints.

Every save goes through ``Checkpoints.save``, whichever thread triggers it: a
session's own thread after a turn (thread runtime), the thread that reads a
worker's reply (worker runtime), or the host's own calls (``checkpoint``,
hibernation, ``stop_session``, ``resume`` from an older checkpoint, shutdown).
Runtimes receive it bound to one session (``saver``) in each ``SessionLaunch``.

Every snapshot passes the host's redaction policy first (``strip_secrets`` by
default: secrets in plugin state, provider state and metadata become stripped
markers, which ``session_start`` sees in ``ctx.stripped`` on resume).

Each checkpoint carries, in its metadata under ``EVENT_SEQ``, the sequence
number of the session's last event when it was saved (``EventBuffer.mark``:
counting the ``turn_finished`` a session reserves to publish once its turn's
checkpoint is saved), so that a session resumed in a new event stream (another
process, or after ``stop_session``) numbers its events after those a client
may already have seen.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence

from actors import EventBuffer, Snapshot, SnapshotDecodeError, strip_secrets
from actors._ids import new_checkpoint_id
from actors._later import PendingSave
from supervisor._outcome import raise_tamed, tamed
from supervisor.checkpoint_store import CheckpointInfo, CheckpointStore, SaveDone, SnapshotTooNew
from supervisor.errors import CheckpointNotFound

__all__ = ["EVENT_SEQ", "Checkpoints", "SaveObserver", "SaveOrder", "event_seq"]

logger = logging.getLogger("supervisor.host")

EVENT_SEQ = "event_seq"
"""Metadata key of a checkpoint: the session's last event sequence number at the save."""


def event_seq(snapshot: Snapshot | None) -> int:
    """The event sequence number ``snapshot`` was saved at (0 if it has none)."""
    seq = None if snapshot is None else snapshot.metadata.get(EVENT_SEQ)
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else 0


SaveObserver = Callable[[CheckpointInfo, float], object]
"""Told of every successful save: what was saved, and the write's seconds (``observe``)."""

Redaction = Callable[[Snapshot], Snapshot]
"""A policy applied to every checkpoint before it is saved (``strip_secrets`` by default)."""


class Checkpoints:
    """Writes and reads one host's checkpoints. Thread-safe (as its store and ``redact`` are).

    Args:
        store: Where they go, and where they are read from.
        redact: Applied to every snapshot before it is saved, whichever path saves it
            (``None``: saved as taken).
        write: How a snapshot is written: ``store.save`` unless the host's ownership
            fences its saves (a cluster node's ``save``).
        write_later: How a snapshot is written without waiting for its commit (a store's
            ``save_later``), for ``save_later``; ``None``: it writes with ``write``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        redact: Redaction | None = strip_secrets,
        write: Callable[[Snapshot], CheckpointInfo] | None = None,
        write_later: Callable[[Snapshot, SaveDone], None] | None = None,
    ) -> None:
        self.store = store
        self.redact = redact
        self._write = store.save if write is None else write
        self._write_later = write_later
        self._observers: tuple[SaveObserver, ...] = ()

    def observe(self, observer: SaveObserver) -> None:
        """Call ``observer(info, seconds)`` after every save that succeeded: what the store
        saved and how long the write took (for metrics). It runs on the saving thread and
        must not block; one that raises is logged and skipped."""
        self._observers = (*self._observers, observer)

    def save(
        self,
        snapshot: Snapshot,
        events: EventBuffer | None = None,
        order: SaveOrder | None = None,
    ) -> Snapshot:
        """Save ``snapshot`` durably, marked with the last event of the session's stream
        ``events`` (if given: its ``mark``, which counts an event reserved to follow the
        save); return what was saved. With the session's ``order``, under its lock, and
        given a later id if it holds a newer state than what sorts after it (see
        ``SaveOrder``).

        Raises:
            OwnershipLost: (a cluster node) another node owns the session now.
            CallAborted: off the main thread, the store raised ``SystemExit`` or
                ``KeyboardInterrupt`` (its ``__cause__``).
            Exception: what the store raised (the caller's operation fails).
        """
        try:
            if order is None:
                return self._save(snapshot, events)
            with order.lock:
                placed = order.place(snapshot)
                saved = self._save(placed, events)
                order.saved(
                    saved.checkpoint_id,
                    copy=False,
                    mark=event_seq(saved),
                    taken=snapshot.checkpoint_id,
                )
                return saved
        except BaseException as exc:
            # A ``SystemExit`` or ``KeyboardInterrupt`` off the main thread (a session's, a
            # helper's, a worker pipe's reader) would crash the session, end the reader and
            # leave the call unanswered, or reach an asyncio loop: as a ``CallAborted`` it
            # fails the save as any store error does. On the main thread it stops the program.
            if threading.current_thread() is threading.main_thread():
                raise
            raise_tamed(exc, _during(snapshot.session_id))

    def _save(self, snapshot: Snapshot, events: EventBuffer | None) -> Snapshot:
        snapshot = self._stamped(snapshot, events)
        if not self._observers:
            self._write(snapshot)
            return snapshot
        started = time.perf_counter()
        info = self._write(snapshot)
        self._observe(info, time.perf_counter() - started)
        return snapshot

    def _stamped(self, snapshot: Snapshot, events: EventBuffer | None) -> Snapshot:
        """``snapshot`` as it is written: redacted, and marked with ``events``'s mark."""
        if self.redact is not None:
            snapshot = self.redact(snapshot)
        if events is not None:
            snapshot = snapshot.with_metadata({**snapshot.metadata, EVENT_SEQ: events.mark})
        return snapshot

    def _observe(self, info: CheckpointInfo, seconds: float) -> None:
        for observer in self._observers:
            try:
                observer(info, seconds)
            except Exception:
                logger.exception("checkpoint save observer %r failed", observer)

    def save_later(
        self, snapshot: Snapshot, events: EventBuffer, order: SaveOrder
    ) -> PendingSave | Snapshot:
        """``save`` without waiting for the commit, where the store can (its
        ``save_later``) and every subscriber of ``events`` is quick (else this is ``save``,
        returning what it saved: a subscriber may block, call its session or raise
        ``SystemExit`` on the session's thread, as ``AgentHost.subscribe`` says): the returned
        ``PendingSave`` is finished with ``None`` once the snapshot is durable, or with the
        error ``save`` would raise, on the thread that committed it. For a session's
        thread (see ``actors._later``).

        ``order``'s lock is held while the snapshot is placed and queued, and again when
        the save is counted (``SaveOrder.saved``): a session's other saves come through its
        inbox, which its thread reads only once this one has ended.

        Raises:
            What ``save`` raises before the store writes (the snapshot refused up front).
        """
        write_later = self._write_later
        if write_later is None or events.slow_subscribers:  # subscribers as on its thread
            return self.save(snapshot, events, order)
        pending = PendingSave()
        sid, taken = snapshot.session_id, snapshot.checkpoint_id
        try:
            with order.lock:
                placed = self._stamped(order.place(snapshot), events)
                started = time.perf_counter()

                def done(info: CheckpointInfo | None, error: BaseException | None) -> None:
                    if error is not None or info is None:
                        pending.finish(tamed(error or _no_info(sid), _during(sid)))
                        return
                    with order.lock:
                        order.saved(
                            placed.checkpoint_id, copy=False, mark=event_seq(placed), taken=taken
                        )
                    self._observe(info, time.perf_counter() - started)
                    pending.finish(None)

                write_later(placed, done)
        except BaseException as exc:  # refused up front: as ``save`` raises it
            if threading.current_thread() is threading.main_thread():
                raise
            raise_tamed(exc, _during(sid))
        return pending

    def later_saver(
        self, events: EventBuffer, order: SaveOrder
    ) -> Callable[[Snapshot], PendingSave | Snapshot]:
        """``save_later`` bound to one session's event stream and ``order``: the checkpointer
        of a session in thread mode (see ``actors._later``)."""
        return functools.partial(self.save_later, events=events, order=order)

    def saver(
        self, events: EventBuffer, order: SaveOrder | None = None
    ) -> Callable[[Snapshot], Snapshot]:
        """``save`` bound to one session's event stream and ``order`` (see ``SaveOrder``; one
        of its own if none), for its runtime."""
        chosen = SaveOrder() if order is None else order
        return functools.partial(self.save, events=events, order=chosen)

    def latest(self, session_id: str, events: EventBuffer | None = None) -> Snapshot | None:
        """The session's newest checkpoint that loads, or ``None`` if it has none.

        A checkpoint the store cannot read (``SnapshotDecodeError``: damaged or
        edited) is skipped for the next older one, with a logged warning and,
        if ``events`` (the session's stream) is given, a ``checkpoint_damaged``
        event with its ``checkpoint_id`` and the ``error``. The damaged
        checkpoint stays in the store for inspection; the next save supersedes it.
        One a newer sessionvisor wrote (``SnapshotTooNew``) is no damage: it is
        never skipped, since resuming from an older one would drop its turns.

        Raises:
            SnapshotTooNew: the newest checkpoint that is not damaged is of a newer
                sessionvisor; upgrade to resume the session.
            SnapshotDecodeError: every checkpoint of the session is damaged (the
                newest one's error).
        """
        try:
            return self.store.load(session_id)
        except CheckpointNotFound:
            return None
        except SnapshotTooNew:
            raise
        except SnapshotDecodeError as exc:
            newest_error = exc
        for info in self.store.list(session_id):
            try:
                snapshot = self.store.load(session_id, info.checkpoint_id)
            except CheckpointNotFound:  # pruned or deleted meanwhile
                continue
            except SnapshotTooNew:
                raise
            except SnapshotDecodeError as exc:
                logger.warning(
                    "session %r: checkpoint %r is damaged, trying the one before it: %s",
                    session_id,
                    info.checkpoint_id,
                    exc,
                )
                if events is not None:
                    events.publish(
                        "checkpoint_damaged", checkpoint_id=info.checkpoint_id, error=str(exc)
                    )
                continue
            logger.warning(
                "session %r: resuming from checkpoint %r, the newest that is not damaged",
                session_id,
                snapshot.checkpoint_id,
            )
            return snapshot
        raise newest_error

    def relabel(
        self,
        source: Snapshot,
        label: str | None,
        events: EventBuffer | None = None,
        order: SaveOrder | None = None,
        steering: Sequence[str] | None = None,
    ) -> Snapshot:
        """Save ``source``'s state again as the session's newest checkpoint, labelled ``label``
        (``checkpoint`` of a session not running; ``resume`` from an older checkpoint). Its
        event mark is the newest the session had, so numbering never goes back. With the
        session's ``order``: under its lock, and counted as a copy (see ``SaveOrder``).
        With ``steering``: that is the steering the copy saves as waiting, not the source's."""
        if order is None:
            return self._relabel(source, label, events, steering)
        with order.lock:
            copy = self._relabel(source, label, events, steering)
            order.saved(copy.checkpoint_id, copy=True, mark=event_seq(copy))
            return copy

    def _relabel(
        self,
        source: Snapshot,
        label: str | None,
        events: EventBuffer | None,
        steering: Sequence[str] | None,
    ) -> Snapshot:
        latest = self.latest(source.session_id)
        newest = max(event_seq(source), event_seq(latest))
        if events is not None:
            # Never below the newest's: ``events`` may be the stream of a record stopped
            # while this call went on (a newer record's checkpoint is the latest now).
            newest = max(newest, events.mark)
        state = source.state
        if steering is not None:
            state = {key: value for key, value in state.items() if key != "steering"}
            if steering:
                state["steering"] = list(steering)
        snapshot = Snapshot.new(
            session_id=source.session_id,
            state=state,
            label=label,
            metadata={EVENT_SEQ: newest},
        )
        if latest is not None and snapshot.checkpoint_id <= latest.checkpoint_id:
            # The newest was made in the same millisecond by another process (a worker),
            # where ids need not sort by creation: this one must come after it.
            fresh = new_checkpoint_id(after=latest.checkpoint_id)
            snapshot = dataclasses.replace(snapshot, checkpoint_id=fresh)
        return self._save(snapshot, None)  # (marked above)

    def cover_stop(
        self,
        session_id: str,
        events: EventBuffer,
        order: SaveOrder,
        steering: Sequence[str] = (),
    ) -> None:
        """Save the session's newest checkpoint that loads again, marked with its stream
        ``events``' current mark and saving ``steering`` as waiting, if either is not what
        that checkpoint has.

        For a session stopped (``stop_session``, shutdown) while no incarnation serves it
        (hibernated, being restarted, given up), or killed as it was stopped. Its next life
        numbers its events on from its latest checkpoint's mark, so events published after
        that save (``crashed``, ``resumed``, ``given_up``) would see their seqs handed out
        again, and a follower holding such a cursor would skip the new events. Steering
        accepted meanwhile (the host's queue keeps it for the next incarnation) is in no
        checkpoint: the stop would drop it. Nothing is saved when the mark covers the
        events and no steering waits (the usual case, known from ``order`` without reading
        the store), or the session has no checkpoint. Under ``order``'s lock, as a copy (a
        turn of a killed incarnation saved meanwhile still comes out newest).

        Raises:
            OwnershipLost: (a cluster node) another node owns the session now.
            Exception: what the store raised.
        """
        waiting = list(steering)
        if order.mark >= events.mark and not waiting:  # the usual case, without a read
            return
        with order.lock:
            latest = self.latest(session_id)
            if latest is None:
                return
            if event_seq(latest) >= events.mark and latest.state.get("steering", []) == waiting:
                return
            self.relabel(latest, latest.label, events, order, waiting)


class SaveOrder:
    """One session's saves in this host, in an order that keeps its newest state newest.
    Thread-safe: every save of the session holds ``lock``.

    Checkpoints sort by id, and an id is made when its snapshot is taken. A copy of the
    session's latest checkpoint (``checkpoint()`` of a session no incarnation serves) is
    made when it is saved, so it would sort after a snapshot of a newer state taken before
    it and saved after it (a turn that ended meanwhile, waiting on ``lock``): the copy, the
    older state, would be what the session comes back from. Such a snapshot, newer than
    every real (not copied) state saved so far, is given an id after the copy instead.
    One that is older than a saved real state keeps its id: it is not the newest (a
    ``checkpoint()`` snapshot whose save a later turn's overtook). The checkpoint an
    incarnation starts from counts as a copy (``continues_from``): every state the
    incarnation takes is newer.

    "Older" compares the ids snapshots were *taken* with, never the ids they were placed
    at. A placed id is made by the host when it saves, and the session's next snapshot
    may sort before it (made in the same millisecond by a worker process's generator,
    whose random start there may be lower): compared with the placed id, that newer
    state looked older than the placed one, kept its id, and the session came back from
    the older turn.
    """

    __slots__ = ("__weakref__", "_floor", "_real", "_top", "lock", "mark")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._real = ""  # the highest id a real state saved was taken with ("" sorts first)
        self._top = ""  # the highest id saved, copies included
        self._floor = ""  # the checkpoint the latest incarnation started from
        self.mark = 0  # the event mark of the newest (highest id) saved (``cover_stop``)

    def place(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot``, with an id after the last copy (or the checkpoint its incarnation
        started from) if one of an older state sorts after it. The caller holds ``lock``."""
        taken = snapshot.checkpoint_id
        top = max(self._top, self._floor)
        if self._real < taken < top:
            return dataclasses.replace(snapshot, checkpoint_id=new_checkpoint_id(after=top))
        return snapshot

    def continues_from(self, snapshot: Snapshot) -> None:
        """An incarnation of the session starts from ``snapshot``: every snapshot it takes
        holds a newer state, so one whose id sorts before ``snapshot``'s is placed after
        it, as after a copy. That happens when the checkpoint was stamped by a process
        whose ids run ahead of the one taking the next (another node's clock, or a
        generator an ``after`` moved on): its turns sorted before the checkpoint they
        continued, and every later resume came back from it.

        Without ``lock``: a start must not wait for a save that holds it (a copy reading
        a slow store), and the incarnation takes its first snapshot after this returns.
        """
        self._floor = max(self._floor, snapshot.checkpoint_id)

    def saved(
        self, checkpoint_id: str, *, copy: bool, mark: int = 0, taken: str | None = None
    ) -> None:
        """Count a save that succeeded, of a checkpoint with event ``mark``, saved under
        ``checkpoint_id`` and taken with ``taken`` (that same id if not given: not placed).
        The caller holds ``lock``."""
        if checkpoint_id >= self._top:  # the newest of them: the one a next life starts from
            self.mark = mark
        if not copy:
            self._real = max(self._real, checkpoint_id if taken is None else taken)
        self._top = max(self._top, checkpoint_id)


def _during(session_id: str) -> str:
    return f"the checkpoint save of session {session_id!r}"


def _no_info(session_id: str) -> RuntimeError:  # pragma: no cover - a store's broken promise
    return RuntimeError(f"the store told no outcome of the save of session {session_id!r}")
