"""``Checkpoints``: the one place an ``AgentHost`` writes checkpoints.

Every save goes through ``Checkpoints.save``, whichever thread triggers it: a
session's own thread after a turn (thread runtime), the thread that reads a
worker's reply (worker runtime), or the host's own calls (``checkpoint``,
hibernation, ``stop_session``, ``resume`` from an older checkpoint, shutdown).
Runtimes receive it bound to one session (``saver``) in each ``SessionLaunch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from actors import Snapshot
from supervisor._host_record import SessionRecord
from supervisor.checkpoint_store import CheckpointStore
from supervisor.errors import CheckpointNotFound

__all__ = ["Checkpoints"]


class Checkpoints:
    """Writes and reads one host's checkpoints. Thread-safe (as its store is)."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store

    def save(self, record: SessionRecord | None, snapshot: Snapshot) -> Snapshot:
        """Save ``snapshot`` (of ``record``'s session) durably; return what was saved.

        Raises:
            Exception: what the store raised (the caller's operation fails).
        """
        self.store.save(snapshot)
        return snapshot

    def saver(self, record: SessionRecord) -> Callable[[Snapshot], Snapshot]:
        """``save`` bound to one session, for its runtime."""
        return functools.partial(self.save, record)

    def latest(self, session_id: str) -> Snapshot | None:
        """The session's newest checkpoint, or ``None`` if it has none."""
        try:
            return self.store.load(session_id)
        except CheckpointNotFound:
            return None

    def relabel(
        self, record: SessionRecord | None, source: Snapshot, label: str | None
    ) -> Snapshot:
        """Save ``source``'s state again as the session's newest checkpoint, labelled ``label``
        (``checkpoint`` of a session not running; ``resume`` from an older checkpoint)."""
        snapshot = Snapshot.new(session_id=source.session_id, state=source.state, label=label)
        return self.save(record, snapshot)
