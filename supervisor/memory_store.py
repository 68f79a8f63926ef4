"""``MemoryCheckpointStore``: checkpoints in a dict, for tests and single-process tools."""

from __future__ import annotations

import builtins
import threading
from dataclasses import dataclass
from datetime import UTC

from actors import (
    SNAPSHOT_MIGRATIONS,
    MigrationRegistry,
    Snapshot,
    SnapshotDecodeError,
    decode_plain,
)
from supervisor._message_log import check_version, in_checkpoint, seal, verify
from supervisor.checkpoint_store import (
    DEFAULT_KEEP_LAST,
    CheckpointInfo,
    ClosingContext,
    check_keep_last,
    check_max_snapshot_bytes,
)
from supervisor.errors import CheckpointNotFound, SnapshotTooLarge

__all__ = ["MemoryCheckpointStore"]

_NO_LOG = (None, None, None, None)
"""The log reference of a complete body: this store keeps no separate message log."""


@dataclass(frozen=True, slots=True)
class _Entry:
    info: CheckpointInfo
    data: bytes
    check: bytes


class MemoryCheckpointStore(ClosingContext):
    """A ``CheckpointStore`` that keeps serialized snapshots in memory.

    Snapshots are stored as their ``serialize()`` bytes, so a save refuses
    exactly what the durable stores refuse and a load returns an independent,
    equal copy. Like the SQLite store, each carries a checksum verified on
    ``load`` (bytes changed in memory raise ``SnapshotDecodeError``). Nothing
    survives the process.

    Each checkpoint is a whole copy, so a save's cost grows with the
    conversation (``host.send`` with a checkpoint every turn: 0.18 ms per turn
    at 1,500 turns, 0.49 ms at 6,000); the SQLite store appends only a turn's
    messages. For tests and short-lived sessions, not for conversations of
    thousands of turns.

    Thread-safe: one lock guards the dict; (de)serialization runs outside it.

    Args:
        max_snapshot_bytes: Refuse (with ``SnapshotTooLarge``) snapshots whose
            serialized size is larger; ``None`` for no limit.
        keep_last: After each save keep only this many newest checkpoints of
            the session; ``None`` keeps all.
        migrations: Upgrades checkpoints of older schema versions on ``load``;
            defaults to the shared ``SNAPSHOT_MIGRATIONS``.
    """

    def __init__(
        self,
        *,
        max_snapshot_bytes: int | None = None,
        keep_last: int | None = DEFAULT_KEEP_LAST,
        migrations: MigrationRegistry | None = None,
    ) -> None:
        check_max_snapshot_bytes(max_snapshot_bytes)
        self.max_snapshot_bytes = max_snapshot_bytes
        self.keep_last = check_keep_last(keep_last, allow_none=True)
        self._migrations = migrations
        self._lock = threading.Lock()
        self._sessions: dict[str, dict[str, _Entry]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryCheckpointStore(sessions={len(self._sessions)})"

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("MemoryCheckpointStore is closed")

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        """Store ``snapshot`` (see ``CheckpointStore.save``)."""
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"save() needs a Snapshot, got {type(snapshot).__name__}")
        data = snapshot.serialize()
        if self.max_snapshot_bytes is not None and len(data) > self.max_snapshot_bytes:
            raise SnapshotTooLarge(snapshot.session_id, len(data), self.max_snapshot_bytes)
        info = CheckpointInfo(
            snapshot.session_id,
            snapshot.checkpoint_id,
            snapshot.saved_at.astimezone(UTC),  # CheckpointInfo's times are UTC
            snapshot.label,
            len(data),
        )
        with self._lock:
            self._check_open()
            entries = self._sessions.setdefault(snapshot.session_id, {})
            entries[snapshot.checkpoint_id] = _Entry(info, data, seal(data, _NO_LOG))
            if self.keep_last is not None:
                self._prune_locked(snapshot.session_id, self.keep_last)
        return info

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The checkpoint, or the newest one (see ``CheckpointStore.load``)."""
        with self._lock:
            self._check_open()
            entries = self._sessions.get(session_id, {})
            key = max(entries, default=None) if checkpoint_id is None else checkpoint_id
            entry = entries.get(key) if key is not None else None
        if entry is None:
            raise CheckpointNotFound(session_id, checkpoint_id)
        try:
            verify(entry.check, entry.data, _NO_LOG)
            plain = decode_plain(entry.data)
            registry = SNAPSHOT_MIGRATIONS if self._migrations is None else self._migrations
            check_version(plain, registry)  # SnapshotTooNew: not damage
            return Snapshot.from_dict(plain, migrations=self._migrations)
        except SnapshotDecodeError as exc:
            raise in_checkpoint(exc, session_id, entry.info.checkpoint_id) from None

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first (see ``CheckpointStore.list``)."""
        with self._lock:
            self._check_open()
            entries = self._sessions.get(session_id, {})
            return [entries[key].info for key in sorted(entries, reverse=True)]

    def sessions(self) -> builtins.list[str]:
        """Sessions with at least one checkpoint, sorted."""
        with self._lock:
            self._check_open()
            return sorted(self._sessions)

    def delete(self, session_id: str, checkpoint_id: str | None = None) -> int:
        """Remove one or all of the session's checkpoints; returns how many."""
        with self._lock:
            self._check_open()
            entries = self._sessions.get(session_id)
            if not entries:
                return 0
            if checkpoint_id is None:
                removed = len(entries)
                entries.clear()
            else:
                removed = 1 if entries.pop(checkpoint_id, None) is not None else 0
            if not entries:
                del self._sessions[session_id]
            return removed

    def prune(self, session_id: str, keep_last: int) -> int:
        """Keep the ``keep_last`` newest checkpoints of the session; returns how many went."""
        keep = check_keep_last(keep_last, allow_none=False)
        assert keep is not None
        with self._lock:
            self._check_open()
            return self._prune_locked(session_id, keep)

    def _prune_locked(self, session_id: str, keep_last: int) -> int:
        entries = self._sessions.get(session_id)
        if not entries:
            return 0
        doomed = sorted(entries, reverse=True)[keep_last:]
        for key in doomed:
            del entries[key]
        if not entries:
            del self._sessions[session_id]
        return len(doomed)

    def close(self) -> None:
        """Drop every checkpoint. Idempotent."""
        with self._lock:
            self._closed = True
            self._sessions.clear()


for _cls in (MemoryCheckpointStore,):
    _cls.__module__ = "supervisor"
