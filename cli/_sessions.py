"""``sessionvisor sessions list|show``: sessions as their newest checkpoints describe them.

A session whose newest checkpoints cannot be read (damaged) is described by the
newest one that can, as a host resuming it would, with ``damaged`` counting
the ones skipped; one none of whose checkpoints can be read is an error naming
the newest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from actors import Snapshot, SnapshotDecodeError
from cli import main
from cli._common import data_dir_option, emit, fail, json_option, open_store, render_fields, table
from supervisor import CheckpointNotFound, SQLiteCheckpointStore

__all__ = ["describe", "sessions"]


def describe(snapshot: Snapshot, checkpoints: int) -> dict[str, Any]:
    """The summary of a session read from its newest checkpoint ``snapshot``."""
    state = snapshot.state
    usage = snapshot.usage()
    return {
        "session_id": snapshot.session_id,
        "tenant_id": state.get("metadata", {}).get("tenant_id"),
        "model": state.get("model"),
        "turns": state.get("turns", 0),
        "messages": len(state.get("messages") or []),
        "usage": usage.to_dict(),
        "total_tokens": usage.total,
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
    infos = store.list(sid)
    damaged: list[SnapshotDecodeError] = []
    for info in infos:
        try:
            snapshot = store.load(sid, info.checkpoint_id)
        except CheckpointNotFound:  # removed meanwhile by the host's pruning
            continue
        except SnapshotDecodeError as exc:
            damaged.append(exc)
            continue
        return {**describe(snapshot, len(infos)), "damaged": len(damaged)}
    if damaged:
        raise damaged[0]
    return None


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
        found = [d for sid in store.sessions() if (d := _load(store, sid)) is not None]
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
