"""The ``CheckpointStore`` protocol every checkpoint backend implements.

A store keeps, per session, a history of snapshots keyed by ``checkpoint_id``.
"Newest" means the greatest ``checkpoint_id``: ids sort by creation time (see
``actors.Snapshot``), so the order does not depend on when or from which
process a snapshot was saved. A store that records ownership epochs
(``PostgresCheckpointStore``) orders by ``(epoch, checkpoint_id)``: a later
owner's checkpoint is newer than any of an earlier owner's, whatever their
clocks; within one epoch (the only one a store without owners has) that is
the same order. Backends must pass the shared contract suite in
``tests/supervisor/store_contract.py``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from actors import Snapshot, SnapshotDecodeError

__all__ = [
    "DEFAULT_KEEP_LAST",
    "CheckpointInfo",
    "CheckpointStore",
    "ClosingContext",
    "SaveDone",
    "SnapshotTooNew",
    "check_keep_last",
    "check_max_snapshot_bytes",
    "check_session_id_for",
    "encodable",
]

DEFAULT_KEEP_LAST = 100
"""Checkpoints kept per session unless a store is told otherwise (``None`` keeps all)."""


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """Metadata of one stored checkpoint, as ``list`` returns it. Immutable, thread-safe.

    Attributes:
        session_id: The session the checkpoint belongs to.
        checkpoint_id: The snapshot's id.
        saved_at: The snapshot's ``saved_at`` (timezone-aware UTC).
        label: The snapshot's label.
        size: Bytes of ``snapshot.serialize()``, whatever the backend stores on disk.
    """

    session_id: str
    checkpoint_id: str
    saved_at: datetime
    label: str | None
    size: int


SaveDone = Callable[[CheckpointInfo | None, BaseException | None], object]
"""Told how a save that was not waited for ended (a store's ``save_later``): ``(info,
None)`` once it is durable, or ``(None, error)`` with what ``save`` would have raised."""


class SnapshotTooNew(SnapshotDecodeError):
    """A stored checkpoint is in a snapshot schema newer than this code reads: a newer
    sessionvisor wrote it. Not damage: the checkpoint is intact, and only an upgrade reads
    it, so a resume does not fall back past it to an older checkpoint (that would drop
    the newer turns, and the resumed session's next save would supersede them).
    ``reason`` names the versions and the checkpoint."""


@runtime_checkable
class CheckpointStore(Protocol):
    """Where snapshots are saved and loaded. Implementations must be thread-safe.

    Every method runs on the caller's thread and raises into the caller;
    none of them calls back into user code. An id no save can store (text with a
    lone surrogate, which ``Snapshot.serialize`` refuses) is found nowhere: ``load``
    raises ``CheckpointNotFound``, ``list`` returns ``[]``, ``delete`` and ``prune`` 0.
    ``CheckpointInfo.saved_at`` is in UTC whatever the snapshot's zone.

    A store that can never save some session ids (PostgreSQL text holds no NUL) may
    define ``check_session_id(session_id)``, raising ``ValueError`` for such an id:
    the host calls it before a session of that id starts (``check_session_id_for``),
    instead of letting every save of the running session fail.
    """

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        """Store ``snapshot``; durable (per the backend's promise) when it returns.

        A snapshot with the ``checkpoint_id`` of a stored one replaces it (for
        example its redacted version). Then the session's history is trimmed
        to the store's ``keep_last`` newest checkpoints, if it has one.

        Raises:
            actors.SnapshotEncodeError: the snapshot holds a non-plain value.
            SnapshotTooLarge: it is over ``max_snapshot_bytes``; nothing was stored.
            StoreFull: (stores on a disk) no room is left; nothing was stored.
        """
        ...

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The checkpoint ``checkpoint_id`` of the session, or its newest one when ``None``.

        Returns a snapshot equal to the one that was saved.

        Raises:
            CheckpointNotFound: no such checkpoint (or none at all for the session).
            SnapshotTooNew: (a ``SnapshotDecodeError``) a newer sessionvisor wrote it, in
                a snapshot schema this code does not read.
            actors.SnapshotDecodeError: it exists but its stored bytes cannot be
                read; the message names the session and the checkpoint.
        """
        ...

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first, metadata only; ``[]`` if none."""
        ...

    def sessions(self) -> builtins.list[str]:
        """Ids of the sessions with at least one checkpoint, sorted."""
        ...

    def delete(self, session_id: str, checkpoint_id: str | None = None) -> int:
        """Remove one checkpoint, or all of the session's when ``checkpoint_id`` is None.

        Returns:
            How many checkpoints were removed (0 if there was nothing to remove).
        """
        ...

    def prune(self, session_id: str, keep_last: int) -> int:
        """Keep only the ``keep_last`` newest checkpoints of the session.

        Returns:
            How many checkpoints were removed.

        Raises:
            ValueError: ``keep_last`` is negative.
        """
        ...

    def close(self) -> None:
        """Release the store's resources. Idempotent; other methods then raise ValueError."""
        ...


class ClosingContext:
    """Mixin for stores: ``with store:`` closes it on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def check_keep_last(keep_last: object, *, allow_none: bool) -> int | None:
    """Validate a ``keep_last`` argument: a store's (``allow_none``) is an int >= 1 or
    ``None`` (keep all), since a save pruned to nothing would store nothing while the
    caller is told it is durable; ``prune``'s is an int >= 0 (0 deletes them all).

    Raises:
        TypeError: not an int (or None).
        ValueError: below its minimum.
    """
    if keep_last is None and allow_none:
        return None
    if isinstance(keep_last, bool) or not isinstance(keep_last, int):
        raise TypeError(f"keep_last must be an int, got {type(keep_last).__name__}")
    if allow_none and keep_last < 1:
        raise ValueError(
            f"keep_last must be >= 1 (every save keeps at least itself), or None to keep "
            f"every checkpoint; got {keep_last}"
        )
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    return keep_last


def check_max_snapshot_bytes(limit: object) -> int | None:
    """Validate a store's ``max_snapshot_bytes``: an int >= 1, or ``None`` (no limit).

    Raises:
        TypeError: not an int (a bool, or a number given as text) or None.
        ValueError: below 1.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(
            f"max_snapshot_bytes must be an int number of bytes, or None for no limit; got "
            f"{type(limit).__name__} {limit!r}"
        )
    if limit < 1:
        raise ValueError(f"max_snapshot_bytes must be >= 1, got {limit}")
    return limit


def encodable(text: object) -> bool:
    """Whether ``text`` is a ``str`` that encodes to UTF-8, as a database stores text: not
    one with a lone surrogate (the ``surrogateescape`` form of an undecodable file name),
    which no save can store (``Snapshot.serialize`` refuses it), so a read of such an id
    finds nothing instead of failing in the driver."""
    if not isinstance(text, str):
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


for _cls in (CheckpointInfo, CheckpointStore, SnapshotTooNew):
    _cls.__module__ = "supervisor"


def check_session_id_for(store: object, session_id: str) -> None:
    """Refuse ``session_id`` if ``store`` says it can never save it (its optional
    ``check_session_id``, see ``CheckpointStore``): a session started under such an
    id would run, and fail its every save.

    Raises:
        ValueError: the store cannot save that id (the message says why).
    """
    check = getattr(store, "check_session_id", None)
    if check is not None:
        check(session_id)
