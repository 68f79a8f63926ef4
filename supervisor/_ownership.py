"""The ownership seam: which sessions a host may run and save, chosen once per host.

``AgentHost`` calls ``ownership_for`` once. Without a node it gets
``SoleOwnership``: the host owns every session it runs, saves are the store's
plain ``save``, and nothing else happens. With ``node=NodeConfig(...)`` it
gets a ``supervisor.cluster.ClusterNode``: sessions are claimed in PostgreSQL
before they run, every save is fenced by the claim's epoch, and the node
heartbeats, fences itself, sweeps orphans and drains. The host's parts
(``Incarnations``, ``Checkpoints``, ``HostShutdown``) call the protocol below
and never ask which one they have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from actors import AgentTemplate, Snapshot
from supervisor.checkpoint_store import CheckpointInfo, CheckpointStore, SaveDone

if TYPE_CHECKING:
    from supervisor.cluster import ClusterNode, NodeConfig

__all__ = ["Ownership", "SoleOwnership", "later_writer", "node_of", "ownership_for"]


class Ownership(Protocol):
    """What a host asks about owning its sessions. Implementations are thread-safe."""

    @property
    def node_id(self) -> str | None:
        """The host's node id in its cluster (``None`` when it is alone)."""
        ...

    def claim(self, session_id: str) -> int:
        """Own ``session_id`` before an incarnation of it runs here; its epoch.

        Raises:
            SessionOwnedElsewhere: a live other node owns it.
            NodeFenced: this node may not take sessions now.
        """
        ...

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        """Save a checkpoint, only if this host still owns its session; what the store says
        it saved.

        Raises:
            OwnershipLost: it does not (nothing was saved).
        """
        ...

    def check_serving(self, session_id: str | None = None) -> None:
        """Raise ``NodeFenced`` when this host must not run turns now. With ``session_id``
        (a call on that session: ``send``, ``history``, ``checkpoint``, ``events``,
        ``subscribe``), also
        ``OwnershipLost`` when the host lost the session to another node and is stopping
        its copy, which lacks the new owner's turns. Cheap: no store round trip."""
        ...

    def event_mark(self, session_id: str) -> int:
        """The highest event seq of the session that its owners (this host or others) made
        known beyond their own process; a resumed stream numbers its events above it."""
        ...

    def hibernated(self, session_id: str, hibernated: bool) -> None:
        """Record that the session is (or no longer is) hibernated here."""
        ...

    def release(self, session_id: str, *, stopped: bool) -> None:
        """Stop owning the session (``stopped``: it was stopped for good, not moved away)."""
        ...

    def forget(self, session_id: str) -> None:
        """The host forgot its copy of a session another node took over (after ``release``):
        drop what was kept to refuse calls on that copy (see ``check_serving``)."""
        ...

    def locate(self, session_id: str) -> AgentTemplate | None:
        """For a session this host does not have: the template to take it over on, or
        ``None`` when it is not to be taken over here.

        Raises:
            SessionOwnedElsewhere: a live other node owns it.
        """
        ...

    def start(self, adopt: Callable[[str], object], lose: Callable[[str], None]) -> None:
        """Begin background work, calling ``adopt(session_id)`` for a session to take over
        and ``lose(session_id)`` for one found owned by another node."""
        ...

    def stop_adopting(self) -> None:
        """Take no more sessions over (at shutdown, before the final checkpoints)."""
        ...

    def drain(self) -> None:
        """Give every session up for other hosts and stop background work (at shutdown,
        after the final checkpoints)."""
        ...


class SoleOwnership:
    """A host alone: it owns whatever it runs. Thread-safe (stateless but for the store)."""

    node_id = None

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store

    def claim(self, session_id: str) -> int:
        return 0

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        return self._store.save(snapshot)

    def check_serving(self, session_id: str | None = None) -> None:
        pass

    def event_mark(self, session_id: str) -> int:
        return 0  # nothing leaves the host but through its checkpoints

    def hibernated(self, session_id: str, hibernated: bool) -> None:
        pass

    def release(self, session_id: str, *, stopped: bool) -> None:
        pass

    def forget(self, session_id: str) -> None:
        pass

    def locate(self, session_id: str) -> AgentTemplate | None:
        return None

    def start(self, adopt: Callable[[str], object], lose: Callable[[str], None]) -> None:
        pass

    def stop_adopting(self) -> None:
        pass

    def drain(self) -> None:
        pass


def ownership_for(store: CheckpointStore, node: NodeConfig | None) -> Ownership:
    """``SoleOwnership`` without a node, else a ``ClusterNode`` registered in ``store``.

    Raises:
        TypeError: ``node`` is given with a store that is not a ``PostgresCheckpointStore``.
        NodeIdInUse: another live process runs as that node id.
    """
    if node is None:
        return SoleOwnership(store)
    from supervisor.cluster import ClusterNode  # noqa: PLC0415 (psycopg only for a cluster)
    from supervisor.postgres_store import PostgresCheckpointStore  # noqa: PLC0415

    if not isinstance(store, PostgresCheckpointStore):
        raise TypeError(
            "node= needs store=PostgresCheckpointStore(...): ownership and fencing live in "
            f"PostgreSQL, and this store is of type {type(store).__name__}"
        )
    return ClusterNode(store, node)


def node_of(ownership: Ownership) -> ClusterNode | None:
    """The cluster node behind ``ownership``, or ``None`` for a host alone."""
    from supervisor.cluster import ClusterNode  # noqa: PLC0415

    return ownership if isinstance(ownership, ClusterNode) else None


def later_writer(
    ownership: Ownership, store: CheckpointStore
) -> Callable[[Snapshot, SaveDone], None] | None:
    """How a host writes a turn's checkpoint without waiting for its commit: the store's
    ``save_later``, for a host alone whose store has one (a cluster node's saves are
    fenced, and wait); ``None`` otherwise (its turns' saves wait)."""
    if not isinstance(ownership, SoleOwnership):
        return None
    later: Callable[[Snapshot, SaveDone], None] | None = getattr(store, "save_later", None)
    return later
