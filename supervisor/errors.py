"""Every error the supervision layer raises, in one place.

Each class says how it differs from its siblings, so callers can tell a session
that is gone because it was stopped from one that crashed, and a checkpoint that
does not exist from one that exists but cannot be read.
"""

from __future__ import annotations

__all__ = [
    "CheckpointNotFound",
    "SessionAlreadyExists",
    "SessionNotFound",
    "SnapshotTooLarge",
    "SupervisorError",
]


class SupervisorError(Exception):
    """Base class of every error raised by the ``supervisor`` package."""


class SessionAlreadyExists(SupervisorError):
    """A session id is already registered; pick another id or delete the old entry first."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists; use another id or delete it first"
        )


class SessionNotFound(SupervisorError, LookupError):
    """No live session is registered under the id (never created, deleted, or its actor died)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no live session {session_id!r} is registered")


class CheckpointNotFound(SupervisorError, LookupError):
    """The store holds no checkpoint for the session (or not the one asked for).

    Differs from ``actors.SnapshotDecodeError``: that one means a checkpoint
    exists but its bytes cannot be read.
    """

    def __init__(self, session_id: str, checkpoint_id: str | None = None) -> None:
        self.session_id = session_id
        self.checkpoint_id = checkpoint_id
        what = "any checkpoint" if checkpoint_id is None else f"checkpoint {checkpoint_id!r}"
        super().__init__(f"no {what} stored for session {session_id!r}")


class SnapshotTooLarge(SupervisorError, ValueError):
    """A save was refused because the serialized snapshot exceeds ``max_snapshot_bytes``.

    Nothing was stored; trim the conversation or raise the limit.
    """

    def __init__(self, session_id: str, size: int, limit: int) -> None:
        self.session_id = session_id
        self.size = size
        self.limit = limit
        super().__init__(
            f"snapshot of session {session_id!r} is {size} bytes, over the "
            f"max_snapshot_bytes limit of {limit}; nothing was stored"
        )


for _cls in (
    SupervisorError,
    SessionAlreadyExists,
    SessionNotFound,
    CheckpointNotFound,
    SnapshotTooLarge,
):
    _cls.__module__ = "supervisor"
