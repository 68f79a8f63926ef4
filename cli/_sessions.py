"""``sessionvisor sessions list|show``: sessions as their newest checkpoints describe them.

A session whose newest checkpoints cannot be read (damaged) is described by the
newest one that can, as a host resuming it would, with ``damaged`` counting
the ones skipped. One none of whose checkpoints can be read is an error naming
the newest for ``show``; ``list`` lists it with every checkpoint damaged and
what only a checkpoint tells (tenant, model, turns, tokens) ``None``, so that
it hides neither itself nor the other sessions.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from actors import Snapshot, SnapshotDecodeError, Usage
from cli import main
from cli._common import (
    data_dir_option,
    emit,
    fail,
    json_option,
    message_count,
    newest_readable,
    open_store,
    render_fields,
    table,
)
from supervisor import SQLiteCheckpointStore

__all__ = ["describe", "sessions"]


def describe(snapshot: Snapshot, checkpoints: int) -> dict[str, Any]:
    """The summary of a session read from its newest checkpoint ``snapshot``. A state not
    shaped as an agent session's (the store holds what its users saved) gives ``None``
    for what it lacks: a ``metadata`` that is no mapping, a ``usage`` that is no usage."""
    state = snapshot.state
    try:
        usage: Usage | None = snapshot.usage()
    except SnapshotDecodeError:  # the checkpoint reads; its state.usage is no usage
        usage = None
    metadata = state.get("metadata")
    return {
        "session_id": snapshot.session_id,
        "tenant_id": metadata.get("tenant_id") if isinstance(metadata, Mapping) else None,
        "model": state.get("model"),
        "turns": state.get("turns", 0),
        "messages": message_count(state),
        "usage": None if usage is None else usage.to_dict(),
        "total_tokens": None if usage is None else usage.total,
        "checkpoints": checkpoints,
        "newest_checkpoint": snapshot.checkpoint_id,
        "saved_at": snapshot.saved_at.isoformat(),
    }


def _load(store: SQLiteCheckpointStore, sid: str) -> dict[str, Any] | None:
    """The session described by its newest readable checkpoint (see the module docstring);
    ``None`` if it has none (any more).

    Raises:
        SnapshotDecodeError: none of its checkpoints can be read (the newest one's error).
    """
    snapshot, count, damaged = newest_readable(store, sid)
    if snapshot is not None:
        return {**describe(snapshot, count), "damaged": len(damaged)}
    if damaged:
        raise damaged[0]
    return None


def _unreadable(store: SQLiteCheckpointStore, sid: str) -> dict[str, Any] | None:
    """The session none of whose checkpoints can be read, as ``list`` shows it (see the
    module docstring); ``None`` if it has none (any more)."""
    infos = store.list(sid)
    if not infos:
        return None
    unknown = dict.fromkeys(("tenant_id", "model", "turns", "messages", "usage", "total_tokens"))
    return {
        "session_id": sid,
        **unknown,
        "checkpoints": len(infos),
        "newest_checkpoint": infos[0].checkpoint_id,
        "saved_at": infos[0].saved_at.isoformat(),
        "damaged": len(infos),
    }


def _listed(store: SQLiteCheckpointStore, sid: str) -> dict[str, Any] | None:
    """The session as ``list`` shows it, readable or not; ``None`` if it has no checkpoint."""
    try:
        return _load(store, sid)
    except SnapshotDecodeError:
        return _unreadable(store, sid)


@main.group()
def sessions() -> None:
    """Sessions stored in a data directory."""


@sessions.command("list")
@click.option("--tenant", default=None, help="Only this tenant's sessions.")
@data_dir_option
@json_option
def list_sessions(tenant: str | None, data_dir: Path, as_json: bool) -> None:
    """List the sessions with their tenant, model, turns, tokens and damaged checkpoints."""
    with open_store(data_dir) as store:
        found = [d for sid in store.sessions() if (d := _listed(store, sid)) is not None]
    if tenant is not None:
        found = [d for d in found if d["tenant_id"] == tenant]
    emit(
        as_json,
        found,
        lambda: table(
            ("SESSION", "TENANT", "MODEL", "TURNS", "TOKENS", "DAMAGED", "SAVED"),
            [
                (
                    d["session_id"],
                    d["tenant_id"],
                    d["model"],
                    d["turns"],
                    d["total_tokens"],
                    d["damaged"],
                    d["saved_at"],
                )
                for d in found
            ],
        ),
    )


@sessions.command("show")
@click.argument("session_id")
@data_dir_option
@json_option
def show_session(session_id: str, data_dir: Path, as_json: bool) -> None:
    """Show one session as its newest checkpoint describes it."""
    with open_store(data_dir) as store:
        found = _load(store, session_id)
    if found is None:
        fail(f"no session {session_id!r} in {str(data_dir)!r}")
    emit(as_json, found, lambda: render_fields(found))
