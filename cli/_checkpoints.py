"""``sessionvisor checkpoints list|show|export|prune``: one session's checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from actors import Snapshot, strip_secrets
from actors.redact import redact_secrets
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
from supervisor import CheckpointNotFound, SQLiteCheckpointStore

__all__ = ["checkpoints"]


@main.group()
def checkpoints() -> None:
    """Checkpoints of one session."""


@checkpoints.command("list")
@click.argument("session_id")
@data_dir_option
@json_option
def list_checkpoints(session_id: str, data_dir: Path, as_json: bool) -> None:
    """List a session's checkpoints, newest first."""
    with open_store(data_dir) as store:
        infos = store.list(session_id)
    if not infos:
        fail(f"no session {session_id!r} in {str(data_dir)!r}")
    rows = [
        {
            "checkpoint_id": i.checkpoint_id,
            "saved_at": i.saved_at.isoformat(),
            "label": i.label,
            "size": i.size,
        }
        for i in infos
    ]
    emit(
        as_json,
        rows,
        lambda: table(
            ("CHECKPOINT", "SAVED", "LABEL", "BYTES"),
            [(r["checkpoint_id"], r["saved_at"], r["label"], r["size"]) for r in rows],
        ),
    )


def _load_plain(
    data_dir: Path, session_id: str, checkpoint_id: str | None, *, strip: bool = True
) -> dict[str, Any]:
    """The checkpoint as plain data; with ``strip`` its secrets replaced as the host does.

    Without ``checkpoint_id``, the newest that can be read: the one a host resumes
    the session from (a warning on stderr names the newer ones that cannot be
    read); a damaged checkpoint named by its id is an error.
    """
    with open_store(data_dir) as store:
        if checkpoint_id is None:
            snapshot = _newest(data_dir, store, session_id)
        else:
            try:
                snapshot = store.load(session_id, checkpoint_id)
            except CheckpointNotFound:
                fail(f"no checkpoint {checkpoint_id!r} of {session_id!r} in {str(data_dir)!r}")
    return (strip_secrets(snapshot) if strip else snapshot).to_dict()


def _newest(data_dir: Path, store: SQLiteCheckpointStore, session_id: str) -> Snapshot:
    """The session's newest readable checkpoint, warning of newer damaged ones; exit 1
    if it has none, and raise the newest one's error if none can be read."""
    snapshot, _, damaged = newest_readable(store, session_id)
    if snapshot is None:
        if damaged:
            raise damaged[0]
        fail(f"no session {session_id!r} in {str(data_dir)!r}")
    for error in damaged:
        click.echo(
            f"warning: {error}; skipped it for checkpoint {snapshot.checkpoint_id!r}, the "
            "newest that can be read (the one a host resumes the session from)",
            err=True,
        )
    return snapshot


@checkpoints.command("show")
@click.argument("session_id")
@click.argument("checkpoint_id", required=False)
@data_dir_option
@json_option
def show_checkpoint(
    session_id: str, checkpoint_id: str | None, data_dir: Path, as_json: bool
) -> None:
    """Show one checkpoint (default the newest); secrets are stripped as the host strips them."""
    plain = _load_plain(data_dir, session_id, checkpoint_id)
    state = plain.get("state", {})

    def text() -> str:
        keys = ("checkpoint_id", "session_id", "saved_at", "label", "schema_version")
        fields = {k: plain.get(k) for k in keys}
        fields.update(
            model=state.get("model"),
            turns=state.get("turns"),
            messages=message_count(state),
            usage=state.get("usage"),
            metadata=state.get("metadata"),
        )
        return render_fields(fields)

    emit(as_json, plain, text)


@checkpoints.command("export")
@click.argument("session_id")
@click.argument("checkpoint_id", required=False)
@click.option("--redact", is_flag=True, help="Drop every secret-looking key and value.")
@data_dir_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Accepted for symmetry with the other commands; export always prints JSON.",
)
def export_checkpoint(
    session_id: str, checkpoint_id: str | None, redact: bool, data_dir: Path, as_json: bool
) -> None:
    """Print the conversation (messages, model, usage, metadata) as one JSON document.

    As stored by default; with ``--redact`` secret-looking keys are dropped and
    credential-looking values removed (``strip_secrets``, then ``redact_secrets``).
    ``--json`` changes nothing (the output is JSON either way).
    """
    plain = _load_plain(data_dir, session_id, checkpoint_id, strip=redact)
    state = plain.get("state", {})
    document: dict[str, Any] = {
        "session_id": session_id,
        "checkpoint_id": plain.get("checkpoint_id"),
        "model": state.get("model"),
        "metadata": state.get("metadata", {}),
        "usage": state.get("usage"),
        "messages": state.get("messages", []),
    }
    if redact:
        document = redact_secrets(document)
    emit(True, document, str)


@checkpoints.command("prune")
@click.option("--keep", type=click.IntRange(min=1), required=True, help="Newest to keep.")
@click.argument("session_id", required=False)
@data_dir_option
@json_option
def prune_checkpoints(keep: int, session_id: str | None, data_dir: Path, as_json: bool) -> None:
    """Keep only the newest KEEP checkpoints of one session, or of every session."""
    with open_store(data_dir, write=True) as store:
        targets = [session_id] if session_id is not None else store.sessions()
        if session_id is not None and not store.list(session_id):
            fail(f"no session {session_id!r} in {str(data_dir)!r}")
        removed = {sid: store.prune(sid, keep) for sid in targets}
    emit(
        as_json,
        {"removed": removed, "total": sum(removed.values())},
        lambda: table(("SESSION", "REMOVED"), [*removed.items(), ("total", sum(removed.values()))]),
    )
