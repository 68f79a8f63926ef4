"""``ClusterEvents``: a node's sessions' events, live, on every other node.

The owner keeps a session's event buffer (the authority, read with
``AgentHost.events``); this is the live copy for the other nodes, never the
authority. The data flow::

    owner: EventBuffer.publish ── SessionTable.tap ── ClusterEvents.publish: queued
    publisher thread, per batch, in one transaction (two statements):
        event_marks.event_seq = GREATEST(event_seq, newest seq)  (at the lease's epoch)
        pg_notify(channel, payload) for each event                (PostgreSQL transport)
    commit ── PUBLISH channel payload                          (Redis transport)
    any node: listener thread ── EventFollower._deliver ── subscribers, since(cursor)

Sequence numbers across failover: a seq leaves the owner only in the
transaction that makes it durable as the session's event mark, and a session
resumed anywhere numbers its events above that mark (``Ownership.event_mark``,
applied in ``Incarnations.resume``). So no number a follower saw is ever
given to another event; events the dead owner published but never sent are
lost with it, and their numbers are reused (nobody outside it saw them). A
stale owner cannot send after a claim: its mark update finds another epoch,
and its events are dropped.

Each event is one JSON payload ``{"s": session, "n": tenant, "q": seq, "t":
type, "a": at, "d": data}``. One that does not fit the transport
(``inline_limit``: PostgreSQL's 8000 bytes) is sent without ``"d"`` but with
``"x"``, its size: the follower hands it out with ``data == {"elided_bytes":
size}``, and a reader that needs it reads it from the owner's buffer
(``AgentHost.events(since=seq - 1)`` there; the gateway forwards that call).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors import Event, EventBatch, Subscriber
from supervisor.cluster._leases import LeaseTable
from supervisor.cluster._transports import Transport

if TYPE_CHECKING:
    import psycopg

    from supervisor.postgres_store import PostgresCheckpointStore

__all__ = ["ELIDED", "ClusterEvents", "EventFollower"]

logger = logging.getLogger("supervisor.cluster")

ELIDED = "elided_bytes"
"""The one key of a relayed event's data when the event was too large to relay whole."""

_QUEUE_LIMIT = 10_000  # events waiting to be sent; beyond it the oldest are dropped (gaps)
_LINGER = 0.005  # seconds the publisher lets a batch gather before it sends it
_READY_WAIT = 5.0  # seconds ``follow`` waits for the listener to listen


class EventFollower:
    """One session's events as they reach this node from its owner. Thread-safe.

    Made by ``ClusterEvents.follow`` (``AgentHost.follow``). Events come in on
    the node's listener thread, in seq order; one that repeats or goes behind a
    seq already received is dropped. A jump in seqs is a gap: the events in it
    were lost on the way (or by a dead owner) and are counted as missed.

    Args:
        session_id: The session followed.
        since: The seq the reader has seen up to (events up to it are not
            expected; a first event further on counts the rest as missed), or
            ``None`` to start with whatever comes first.
        size: Most events kept for ``since``; older ones are dropped and counted.
        on_close: Called once by ``close``.
    """

    def __init__(
        self,
        session_id: str,
        since: int | None,
        size: int,
        on_close: Callable[[EventFollower], None],
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        if since is not None and (isinstance(since, bool) or not isinstance(since, int)):
            raise TypeError(f"since must be an int or None, got {since!r}")
        self.session_id = session_id
        self._lock = threading.Lock()
        self._events: collections.deque[Event] = collections.deque(maxlen=size)
        self._start = since  # the seq before the first this follower may hand out
        self._last = since if since is not None else 0
        self._missed = 0
        self._subscribers: tuple[tuple[Subscriber, Callable[[int], None] | None], ...] = ()
        self._on_close = on_close
        self._closed = False

    @property
    def last_seq(self) -> int:
        """The seq of the newest event received (``since``, or 0, before the first)."""
        return self._last

    @property
    def missed(self) -> int:
        """How many seqs were skipped between the events received: events that never
        reached this node (lost on the way, dropped by a busy owner, or lost with a dead
        owner that had made them known)."""
        with self._lock:
            return self._missed

    def since(self, cursor: int | None = None) -> EventBatch:
        """The events received after ``cursor``, the cursor to pass next, and how many after
        it this follower cannot give (gaps, and events dropped from its own buffer): the
        shape of ``AgentHost.events``. ``None``: every event kept, ``missed`` 0."""
        with self._lock:
            retained = tuple(self._events)
            last, start = self._last, self._start
        if cursor is None:
            return EventBatch(retained, last, 0)
        events = tuple(e for e in retained if e.seq > cursor)
        if cursor >= last:
            return EventBatch(events, last, 0)
        floor = cursor if start is None else max(cursor, start)
        return EventBatch(events, last, max(0, last - floor - len(events)))

    def subscribe(
        self, subscriber: Subscriber, on_missed: Callable[[int], None] | None = None
    ) -> Callable[[], None]:
        """Call ``subscriber`` with each event received from now on (on the listener thread;
        it must not block) and ``on_missed(count)`` before an event that follows a gap of
        ``count`` seqs. Returns a function that unsubscribes."""
        entry = (subscriber, on_missed)
        with self._lock:
            self._subscribers = (*self._subscribers, entry)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not entry)

        return unsubscribe

    def close(self) -> None:
        """Stop following (the node stops delivering here). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._subscribers = ()
        self._on_close(self)

    def __enter__(self) -> EventFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _deliver(self, event: Event) -> None:
        """One event from the owner (the listener thread)."""
        with self._lock:
            if self._start is None:  # the first event: nothing was expected before it
                self._start = self._last = event.seq - 1
            if self._closed or event.seq <= self._last:
                logger.debug("follower of %r: seq %d again, dropped", self.session_id, event.seq)
                return
            gap = event.seq - self._last - 1
            self._missed += gap
            self._last = event.seq
            self._events.append(event)
            subscribers = self._subscribers
        for subscriber, on_missed in subscribers:
            try:
                if gap and on_missed is not None:
                    on_missed(gap)
                subscriber(event)
            except Exception:
                logger.exception("event follower subscriber %r failed", subscriber)


class ClusterEvents:
    """A node's event fan-out (see the module docstring). Thread-safe.

    Made by a ``ClusterNode`` whose ``NodeConfig.events`` names a transport; the
    host feeds it every event of its sessions (``publish``) and hands out
    followers (``follow``). ``close`` sends what is queued, then stops both
    threads.

    Args:
        store: The cluster's store.
        node_id, incarnation: The node that sends.
        epoch: The epoch of the node's lease on a session, or ``None`` (not its own):
            what fences each mark it moves.
        transport: How payloads travel (``_transports``).
    """

    def __init__(
        self,
        store: PostgresCheckpointStore,
        node_id: str,
        incarnation: int,
        epoch: Callable[[str], int | None],
        transport: Transport,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._incarnation = incarnation
        self._epoch = epoch
        self._table = LeaseTable(store)
        self._transport = transport
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[str, str, Event]] = collections.deque()
        self._queued = 0  # events ever queued
        self._handled = 0  # events ever sent or dropped
        self.dropped = 0  # events never sent (queue full, lease gone, database down)
        self._closing = False
        self._closed = threading.Event()  # set by ``close``: no more lingering
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._followers: dict[str, tuple[EventFollower, ...]] = {}
        self._followers_lock = threading.Lock()
        self._listening = threading.Event()
        self._stop_listening = threading.Event()
        self._listener: threading.Thread | None = None
        self._publisher = threading.Thread(
            target=self._publish_loop, name=f"sv-events-out-{node_id}", daemon=True
        )
        self._publisher.start()

    # -- the owner's side ------------------------------------------------------------------

    def publish(self, session_id: str, tenant_id: str, event: Event) -> None:
        """Queue one of this node's sessions' events for the other nodes; never blocks (the
        session's thread calls it). Past ``_QUEUE_LIMIT`` waiting, the oldest is dropped."""
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= _QUEUE_LIMIT:
                self._queue.popleft()
                self.dropped += 1
                self._handled += 1
            self._queue.append((session_id, tenant_id, event))
            self._queued += 1
            if len(self._queue) == 1:  # the publisher waits only for an empty queue
                self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every event queued so far was sent (or dropped); False on timeout."""
        with self._cond:
            target = self._queued
            return self._cond.wait_for(lambda: self._handled >= target, timeout)

    def _publish_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closing)
            # Let a batch gather: one transaction then carries the events of many turns.
            self._closed.wait(_LINGER)
            with self._cond:
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
            try:
                self._send(batch)
            except Exception as exc:
                logger.warning(
                    "event fan-out: %d events not sent to other nodes: %s", len(batch), exc
                )
                self._close_connection()
                with self._cond:
                    self.dropped += len(batch)
            with self._cond:
                self._handled += len(batch)
                self._cond.notify_all()

    def _send(self, batch: list[tuple[str, str, Event]]) -> None:
        import psycopg  # noqa: PLC0415 (the [postgres] extra: a cluster has it)

        newest: dict[str, int] = {}
        for session_id, _, event in batch:
            newest[session_id] = max(newest.get(session_id, 0), event.seq)
        marks = {
            sid: (seq, epoch)
            for sid, seq in newest.items()
            if (epoch := self._epoch(sid)) is not None
        }
        limit = self._transport.inline_limit
        payloads: list[str] = []
        for attempt in (1, 2):
            conn = self._connection()
            try:
                with conn.transaction():
                    ours = self._table.advance_marks(conn, self._node_id, self._incarnation, marks)
                    payloads = [
                        payload
                        for s, t, e in batch
                        if s in ours and (payload := _payload(s, t, e, limit)) is not None
                    ]
                    self._transport.in_transaction(conn, payloads)
                break
            except psycopg.OperationalError:  # a broken connection: once more on a new one
                self._close_connection()
                if attempt == 2:
                    raise
        self._transport.after_commit(payloads)  # if it raises, the caller counts the batch
        unsent = len(batch) - len(payloads)
        if unsent:
            with self._cond:
                self.dropped += unsent

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = self._store.connect()
        return conn

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- every node's side -----------------------------------------------------------------

    def follow(
        self,
        session_id: str,
        *,
        since: int | None = None,
        tenant_id: str | None = None,
        size: int = 1000,
    ) -> EventFollower:
        """Follow ``session_id``'s events, wherever it runs and across failovers; see
        ``EventFollower``. Returns once this node listens, so every event sent from then
        on reaches it (or counts as missed). ``tenant_id``: only that tenant's session.

        Raises:
            ValueError, TypeError: a bad ``size`` or ``since``.
            TimeoutError: the node could not listen on its transport within 5 s.
            RuntimeError: the fan-out is closed.
        """
        key = session_id if tenant_id is None else f"{tenant_id}\x00{session_id}"
        follower = EventFollower(session_id, since, size, functools.partial(self._unfollow, key))
        with self._followers_lock:
            if self._stop_listening.is_set():
                raise RuntimeError("this node's event fan-out is closed")
            self._followers[key] = (*self._followers.get(key, ()), follower)
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self._transport.listen,
                    args=(self._deliver, self._listening, self._stop_listening),
                    name=f"sv-events-in-{self._node_id}",
                    daemon=True,
                )
                self._listener.start()
        if not self._listening.wait(_READY_WAIT):
            follower.close()
            problem = self._transport.problem or "no answer"
            raise TimeoutError(
                f"node {self._node_id!r} could not listen for events within {_READY_WAIT} s "
                f"({problem}); check that its transport (NodeConfig.events) is reachable"
            )
        return follower

    def _unfollow(self, key: str, follower: EventFollower) -> None:
        with self._followers_lock:
            rest = tuple(f for f in self._followers.get(key, ()) if f is not follower)
            if rest:
                self._followers[key] = rest
            else:
                self._followers.pop(key, None)

    def _deliver(self, payload: str) -> None:
        try:
            fields = json.loads(payload)
            session_id, tenant_id = fields["s"], fields["n"]
            data = fields["d"] if "x" not in fields else {ELIDED: fields["x"]}
            event = Event(int(fields["q"]), str(fields["t"]), data, float(fields["a"]))
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("event fan-out: a payload that is not an event, ignored: %s", exc)
            return
        with self._followers_lock:
            followers = (
                *self._followers.get(session_id, ()),
                *self._followers.get(f"{tenant_id}\x00{session_id}", ()),
            )
        for follower in followers:
            follower._deliver(event)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop the publisher
        and the listener and release their connections. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._closed.set()
        self._publisher.join(timeout)
        self._stop_listening.set()
        with self._followers_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.join(timeout)
        self._close_connection()
        self._transport.close()


def _payload(session_id: str, tenant_id: str, event: Event, limit: int | None) -> str | None:
    """The event's payload: whole if it is shorter than ``limit`` bytes, else a marker
    with its size; ``None`` when not even the marker fits (a session id, tenant id or
    event type of thousands of bytes). That event is then not sent (a gap for its
    followers), rather than fail the transaction and so every other event of its batch."""
    fields = {"s": session_id, "n": tenant_id, "q": event.seq, "t": event.type, "a": event.at}
    whole = json.dumps({**fields, "d": event.data}, separators=(",", ":"), default=str)
    if limit is None:
        return whole
    size = len(whole.encode())
    if size < limit:
        return whole
    marker = json.dumps({**fields, "x": size}, separators=(",", ":"))
    if len(marker.encode()) < limit:
        return marker
    logger.warning(
        "event fan-out: an event of session %.60r... (tenant %.60r) is not sent to other "
        "nodes: even without its data it takes %d bytes, over the transport's %d",
        session_id,
        tenant_id,
        len(marker.encode()),
        limit,
    )
    return None


for _cls in (ClusterEvents, EventFollower):
    _cls.__module__ = "supervisor.cluster"
