"""``LeaseTable``: the cluster's ``nodes`` and ``sessions`` rows, read and written in SQL.

Every rule about who owns a session is decided here, by the database, on
the database's clock (``clock_timestamp()``), never on a node's:

* a node is *live* while its ``heartbeat`` is no older than its own ``ttl``;
  a drained node has no heartbeat;
* a node id is registered anew (a new incarnation) when its lease is not live,
  or when the process holding it is provably gone (``_holder``: this machine's
  own previous run of the node, killed without draining);
* a claim succeeds when the session has no owner, when its owner is not live
  (or is an older incarnation of its node id), or when the claimer owns it
  already; it makes the claimer the owner and bumps the epoch (except for a
  claimer that owned it already);
* a session's event mark (``event_marks``) only grows, and only its current
  owner at its current epoch moves it (``advance_marks``, which reads the
  session's row ``FOR SHARE``, as a save does): a node that lost the session
  cannot move it after the claim;
* a save's fence (``save_checkpoint``) takes the session's row ``FOR SHARE``,
  which a claim's update must wait for: no checkpoint of an older epoch can
  be committed after a claim.

Thread-safe: statements run on the store's pooled connections (``store.run``,
retried once on a broken connection), except ``renew``, which runs on the
caller's own connection (a heartbeat must not queue behind saves).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from supervisor._pg_schema import qualify
from supervisor.checkpoint_store import encodable
from supervisor.errors import SessionOwnedElsewhere
from supervisor.postgres_store import check_text, storable_text

if TYPE_CHECKING:
    import psycopg

    from supervisor.postgres_store import PostgresCheckpointStore

__all__ = ["LeaseTable", "Owner"]

_LIVE = "n.heartbeat IS NOT NULL AND n.heartbeat >= clock_timestamp() - n.ttl"

_REGISTER = (
    "INSERT INTO {s}.nodes AS n"
    " VALUES (%s, 1, %s, %s, clock_timestamp(), clock_timestamp(), %s)"
    " ON CONFLICT (node_id) DO UPDATE SET incarnation = n.incarnation + 1,"
    " address = EXCLUDED.address, ttl = EXCLUDED.ttl, heartbeat = clock_timestamp(),"
    " started_at = clock_timestamp(), holder = EXCLUDED.holder"
    f" WHERE NOT ({_LIVE})"
    " RETURNING incarnation"
)
_NODE = (
    "SELECT address, extract(epoch FROM ttl), incarnation, holder FROM {s}.nodes WHERE node_id = %s"
)
_TAKE_OVER = (
    "UPDATE {s}.nodes SET incarnation = incarnation + 1, address = %s, ttl = %s,"
    " heartbeat = clock_timestamp(), started_at = clock_timestamp(), holder = %s"
    " WHERE node_id = %s AND incarnation = %s AND holder = %s"
    " RETURNING incarnation"
)
"""A registration over a live lease whose holder process is gone: only that holder's
(its incarnation and token as read), so a registration between the read and this wins."""
_RENEW = (
    "UPDATE {s}.nodes SET heartbeat = clock_timestamp()"
    " WHERE node_id = %s AND incarnation = %s AND heartbeat IS NOT NULL"
)
_CLAIM = (
    "INSERT INTO {s}.sessions AS s VALUES (%s, %s, %s, 1, 'active', clock_timestamp())"
    " ON CONFLICT (session_id) DO UPDATE SET owner_node = EXCLUDED.owner_node,"
    " owner_incarnation = EXCLUDED.owner_incarnation,"
    " epoch = CASE WHEN s.owner_node = EXCLUDED.owner_node"
    " AND s.owner_incarnation = EXCLUDED.owner_incarnation THEN s.epoch ELSE s.epoch + 1 END,"
    " state = 'active', claimed_at = clock_timestamp()"
    " WHERE s.owner_node IS NULL"
    " OR (s.owner_node = EXCLUDED.owner_node AND s.owner_incarnation = EXCLUDED.owner_incarnation)"
    " OR NOT EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.node_id = s.owner_node"
    f" AND n.incarnation = s.owner_incarnation AND {_LIVE})"
    " RETURNING s.epoch"
)
_OWNER = (
    "SELECT s.owner_node, s.owner_incarnation, s.epoch, s.state, n.address,"
    f" COALESCE(n.incarnation = s.owner_incarnation AND {_LIVE}, false)"
    " FROM {s}.sessions s LEFT JOIN {s}.nodes n ON n.node_id = s.owner_node"
    " WHERE s.session_id = %s"
)
_OWNERS = (
    "SELECT s.session_id, s.owner_node, s.owner_incarnation, s.epoch, s.state, n.address,"
    f" COALESCE(n.incarnation = s.owner_incarnation AND {_LIVE}, false)"
    " FROM {s}.sessions s LEFT JOIN {s}.nodes n ON n.node_id = s.owner_node"
    " WHERE s.session_id = ANY(%s)"
)
_NEXT_LAPSE = (
    "SELECT EXTRACT(EPOCH FROM min(n.heartbeat + n.ttl) - clock_timestamp())"
    f" FROM {{s}}.nodes n WHERE n.node_id <> %s AND {_LIVE}"
)
_OWNED = (
    "SELECT session_id, epoch FROM {s}.sessions WHERE owner_node = %s AND owner_incarnation = %s"
)
_SET_STATE = (
    "UPDATE {s}.sessions SET state = %s"
    " WHERE session_id = %s AND owner_node = %s AND owner_incarnation = %s AND epoch = %s"
)
_RELEASE = (
    "UPDATE {s}.sessions SET owner_node = NULL, owner_incarnation = NULL,"
    " state = COALESCE(%s, state)"
    " WHERE session_id = %s AND owner_node = %s AND owner_incarnation = %s AND epoch = %s"
)
_DRAIN_SESSIONS = (
    "UPDATE {s}.sessions SET owner_node = NULL, owner_incarnation = NULL"
    " WHERE owner_node = %s AND owner_incarnation = %s"
)
_DRAIN_NODE = "UPDATE {s}.nodes SET heartbeat = NULL WHERE node_id = %s AND incarnation = %s"
_EVENT_MARK = "SELECT event_seq FROM {s}.event_marks WHERE session_id = %s"
_ADVANCE_MARKS = (
    "WITH owned AS (SELECT s.session_id, v.seq"
    " FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS v(sid, seq, epoch)"
    " JOIN {s}.sessions s ON s.session_id = v.sid AND s.epoch = v.epoch"
    " AND s.owner_node = %s AND s.owner_incarnation = %s"
    " FOR SHARE OF s)"
    " INSERT INTO {s}.event_marks AS m SELECT session_id, seq FROM owned"
    " ON CONFLICT (session_id) DO UPDATE SET event_seq = GREATEST(m.event_seq, EXCLUDED.event_seq)"
    " RETURNING m.session_id"
)
_ORPHANS = (
    "WITH orphans AS ("
    " SELECT s.session_id FROM {s}.sessions s"
    " LEFT JOIN {s}.nodes n ON n.node_id = s.owner_node"
    " WHERE s.state = 'active' AND (s.owner_node IS NULL OR n.node_id IS NULL"
    f" OR n.incarnation <> s.owner_incarnation OR NOT ({_LIVE}))"
    " ORDER BY s.claimed_at LIMIT %s"
    " FOR UPDATE OF s SKIP LOCKED)"
    " UPDATE {s}.sessions s SET owner_node = %s, owner_incarnation = %s,"
    " epoch = s.epoch + 1, claimed_at = clock_timestamp()"
    " FROM orphans o WHERE s.session_id = o.session_id"
    " RETURNING s.session_id, s.epoch"
)


@dataclass(frozen=True, slots=True)
class Owner:
    """A session's row in ``sessions``, with its owner as the database saw it when read.
    Immutable, thread-safe.

    Attributes:
        node_id: The owning node, or ``None`` (released, or never claimed).
        incarnation: Which registration of that node id owns it.
        epoch: The session's epoch.
        state: ``active``, ``hibernated`` or ``stopped``.
        address: The owner's address as it registered it (``""`` if unknown).
        live: Whether that incarnation's heartbeat is fresh (within its TTL).
    """

    node_id: str | None
    incarnation: int | None
    epoch: int
    state: str
    address: str
    live: bool


class LeaseTable:
    """The SQL of node registration, heartbeats and session claims (see the module
    docstring). Thread-safe.

    Args:
        store: The PostgreSQL store whose database (and schema) holds the tables.
    """

    def __init__(self, store: PostgresCheckpointStore) -> None:
        self.store = store
        q = functools.partial(qualify, schema=store.schema)
        self._register = q(_REGISTER)
        self._node = q(_NODE)
        self._take_over = q(_TAKE_OVER)
        self._renew = q(_RENEW)
        self._claim = q(_CLAIM)
        self._owner = q(_OWNER)
        self._owners = q(_OWNERS)
        self._owned = q(_OWNED)
        self._next_lapse = q(_NEXT_LAPSE)
        self._set_state = q(_SET_STATE)
        self._release = q(_RELEASE)
        self._drain_sessions = q(_DRAIN_SESSIONS)
        self._drain_node = q(_DRAIN_NODE)
        self._orphans = q(_ORPHANS)
        self._event_mark = q(_EVENT_MARK)
        self._advance_marks = q(_ADVANCE_MARKS)

    def register(
        self,
        node_id: str,
        address: str,
        ttl: float,
        holder: str | None = None,
        gone: Callable[[str | None], bool] = lambda _token: False,
    ) -> int | tuple[str, float]:
        """Register (or re-register) ``node_id`` as ``holder`` (this registration's token,
        ``cluster._holder.new_holder``); its new incarnation, or the live holder's
        ``(address, ttl)`` when another process holds the id. A live lease whose holder
        ``gone`` says has ended (this node's own previous run, killed) is taken over at
        once: that process can run no turn and, its incarnation replaced, make no save.
        Idempotent for one ``holder`` (``store.run`` may send it twice)."""
        lease = timedelta(seconds=ttl)

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int | tuple[str, float]:
            found = conn.execute(self._register, (node_id, address, lease, holder)).fetchone()
            if found is not None:
                return int(found[0])
            held = conn.execute(self._node, (node_id,)).fetchone()
            if held is None:
                return ("", ttl)
            held_address, held_ttl, incarnation, token = held
            if holder is not None and token == holder:
                # This registration's own row: its first try committed, then its connection
                # broke, and ``store.run`` sent it again (which must not find it in use).
                return int(incarnation)
            if token is not None and gone(str(token)):
                params = (address, lease, holder, node_id, incarnation, token)
                taken = conn.execute(self._take_over, params).fetchone()
                if taken is not None:
                    return int(taken[0])
            return (str(held_address), float(held_ttl))

        return self.store.run("registering a node", work)

    def renew(
        self, conn: psycopg.Connection[tuple[Any, ...]], node_id: str, incarnation: int
    ) -> bool:
        """One heartbeat on ``conn``: False if the row is no longer this incarnation's (the id
        was taken over, or the node drained)."""
        return conn.execute(self._renew, (node_id, incarnation)).rowcount == 1

    def claim(self, session_id: str, node_id: str, incarnation: int) -> int:
        """Make ``node_id`` the session's owner (see the module docstring); the epoch.

        Raises:
            SessionOwnedElsewhere: a live other node owns it.
            ValueError: PostgreSQL cannot store the session id (a NUL character or a lone
                surrogate in it, or thousands of bytes); nothing was claimed.
        """
        check_text("session_id", session_id)
        if not encodable(session_id):  # else the driver's UnicodeEncodeError, naming no id
            at = next(i for i, char in enumerate(session_id) if "\ud800" <= char <= "\udfff")
            raise ValueError(
                f"session_id {session_id[:80]!r} holds a lone surrogate ({session_id[at]!r}) at "
                f"index {at}, which UTF-8, and so PostgreSQL, cannot store; escape it first, "
                "e.g. text.encode('utf-8', 'backslashreplace').decode()"
            )

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int | Owner | None:
            row = conn.execute(self._claim, (session_id, node_id, incarnation)).fetchone()
            if row is not None:
                return int(row[0])
            return self._read_owner(conn, session_id)

        for _ in range(3):  # the owner may die, or release it, between the two statements
            outcome = self.store.run("claiming a session", work, session_id)
            if isinstance(outcome, int):
                return outcome
            if outcome is not None and outcome.live and outcome.node_id is not None:
                raise SessionOwnedElsewhere(session_id, outcome.node_id, outcome.address)
        raise SessionOwnedElsewhere(session_id, "(changing)", "")

    def owner(self, session_id: str) -> Owner | None:
        """The session's row, or ``None`` when no node ever claimed it."""
        if not storable_text(session_id):
            return None  # no claim could store it
        return self.store.run("looking up an owner", lambda c: self._read_owner(c, session_id))

    def _read_owner(
        self, conn: psycopg.Connection[tuple[Any, ...]], session_id: str
    ) -> Owner | None:
        row = conn.execute(self._owner, (session_id,)).fetchone()
        if row is None:
            return None
        node_id, incarnation, epoch, state, address, live = row
        return Owner(node_id, incarnation, int(epoch), str(state), address or "", bool(live))

    def owners(self, session_ids: list[str]) -> dict[str, Owner]:
        """The rows of ``session_ids`` (one statement); ids never claimed are absent."""
        session_ids = [sid for sid in session_ids if storable_text(sid)]
        rows = self.store.run(
            "looking up owners",
            lambda conn: conn.execute(self._owners, (session_ids,)).fetchall(),
        )
        return {
            str(sid): Owner(node_id, inc, int(epoch), str(state), address or "", bool(live))
            for sid, node_id, inc, epoch, state, address, live in rows
        }

    def owned(self, node_id: str, incarnation: int) -> dict[str, int]:
        """Every session this incarnation of ``node_id`` owns, with its epoch."""
        rows = self.store.run(
            "listing owned sessions",
            lambda conn: conn.execute(self._owned, (node_id, incarnation)).fetchall(),
        )
        return {str(sid): int(epoch) for sid, epoch in rows}

    def set_state(
        self, session_id: str, node_id: str, incarnation: int, epoch: int, state: str
    ) -> bool:
        """Record ``active``/``hibernated`` for a session still owned at ``epoch``."""
        params = (state, session_id, node_id, incarnation, epoch)
        return bool(
            self.store.run(
                "recording a session's state",
                lambda conn: conn.execute(self._set_state, params).rowcount,
            )
        )

    def release(
        self, session_id: str, node_id: str, incarnation: int, epoch: int, state: str | None
    ) -> bool:
        """Give up a session still owned at ``epoch`` (``state``: its new state, or kept)."""
        params = (state, session_id, node_id, incarnation, epoch)
        return bool(
            self.store.run(
                "releasing a session", lambda conn: conn.execute(self._release, params).rowcount
            )
        )

    def drain(self, node_id: str, incarnation: int) -> int:
        """Release every session of this incarnation and mark the node gone, in one
        transaction; how many sessions were released."""

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
            with conn.transaction():
                released = conn.execute(self._drain_sessions, (node_id, incarnation)).rowcount
                conn.execute(self._drain_node, (node_id, incarnation))
            return released

        return self.store.run("draining a node", work)

    def event_mark(self, session_id: str) -> int:
        """The highest event seq any owner of the session made known to other nodes (0 if
        none, or no such session)."""
        row = self.store.run(
            "reading an event mark",
            lambda conn: conn.execute(self._event_mark, (session_id,)).fetchone(),
        )
        return 0 if row is None else int(row[0])

    def advance_marks(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        node_id: str,
        incarnation: int,
        marks: dict[str, tuple[int, int]],
    ) -> set[str]:
        """Raise the event mark of each session of ``marks`` (``{session_id: (seq, epoch)}``)
        to its seq, in one statement on ``conn`` (in the caller's transaction); the sessions
        still owned by this incarnation at that epoch (the others' marks are left alone)."""
        sids = list(marks)
        params = (
            sids,
            [marks[sid][0] for sid in sids],
            [marks[sid][1] for sid in sids],
            node_id,
            incarnation,
        )
        return {str(row[0]) for row in conn.execute(self._advance_marks, params).fetchall()}

    def next_lapse(self, node_id: str) -> float | None:
        """Seconds (by the database's clock) until the first lease of a live node other than
        ``node_id`` lapses, unless it renews first; ``None`` if no other node is live."""
        row = self.store.run(
            "reading the nodes' leases",
            lambda conn: conn.execute(self._next_lapse, (node_id,)).fetchone(),
        )
        return None if row is None or row[0] is None else max(0.0, float(row[0]))

    def claim_orphans(self, node_id: str, incarnation: int, limit: int) -> list[tuple[str, int]]:
        """Claim up to ``limit`` active sessions whose owner is gone (rows locked by another
        sweeper, or by a save in flight, are skipped); ``(session_id, epoch)`` of each."""
        rows = self.store.run(
            "claiming orphaned sessions",
            lambda conn: conn.execute(self._orphans, (limit, node_id, incarnation)).fetchall(),
        )
        return [(str(sid), int(epoch)) for sid, epoch in rows]


for _cls in (LeaseTable, Owner):
    _cls.__module__ = "supervisor.cluster"
