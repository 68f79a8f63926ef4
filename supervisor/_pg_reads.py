"""Turning the PostgreSQL store's rows back into what its reads return.

A loaded row (``Statements.latest`` / ``Statements.one``) holds the checkpoint's
body, its message-log reference and seal, and the log chunks its prefix covers;
``decode`` checks the seal and the log's digest and joins them into the snapshot
saved, naming the checkpoint in the ``SnapshotDecodeError`` of any damage.
"""

from __future__ import annotations

from typing import Any

from actors import MigrationRegistry, Snapshot, SnapshotDecodeError
from supervisor._message_log import assemble, check_identity, in_checkpoint, join, verify
from supervisor._saved_at import from_micros
from supervisor.checkpoint_store import CheckpointInfo

__all__ = ["checkpoint_infos", "decode"]


def decode(row: tuple[Any, ...], session_id: str, migrations: MigrationRegistry | None) -> Snapshot:
    """The snapshot a loaded ``row`` of ``session_id`` holds.

    Raises:
        SnapshotDecodeError: the row, or the log chunks it covers, is damaged (naming
            the session and checkpoint), or holds another session's checkpoint.
    """
    cid, body, gen, length, count, digest, check, starts, datas = row
    try:
        verify(check, body, (gen, length, count, digest))
        messages = None
        if gen is not None:
            if not isinstance(length, int) or not isinstance(digest, bytes):
                raise SnapshotDecodeError("message log reference is damaged")
            chunks = list(zip(starts or (), datas or (), strict=True))
            messages = assemble(chunks, length, digest)
        snapshot = join(body, messages, count, migrations)
        check_identity(snapshot, session_id, cid)
    except SnapshotDecodeError as exc:
        raise in_checkpoint(exc, session_id, cid) from None
    return snapshot


def checkpoint_infos(session_id: str, rows: list[Any]) -> list[CheckpointInfo]:
    """The ``CheckpointInfo`` of each listed row (``Statements.listing``), in their order."""
    return [
        CheckpointInfo(session_id, cid, from_micros(us), label, size)
        for cid, us, label, size in rows
    ]
