"""``/v1/sessions/{id}``: list and take checkpoints, export the conversation redacted."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Query

from actors import Snapshot, redact_secrets, strip_secrets
from gateway._context import SessionCaller, SessionJsonCaller, host_id
from gateway.problems import problem_responses
from gateway.schemas import JSON_BODY_RESPONSES, CheckpointOut, CheckpointRequest, CheckpointsOut
from supervisor import CheckpointNotFound

__all__ = ["router"]

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["checkpoints"])

MAX_CHECKPOINT_ID: Final = 256
"""The longest ``checkpoint_id`` a request may name (the host's are 32 characters): a
longer one answers 422 before any store is asked."""


@router.get("/checkpoints", summary="List checkpoints")
async def list_checkpoints(session_id: str, call: SessionCaller) -> CheckpointsOut:
    """The session's stored checkpoints, newest first (metadata only)."""
    gateway, key = call
    gateway.owned(key.tenant_id, session_id)
    store = gateway.ahost.host.store
    infos = await asyncio.to_thread(store.list, host_id(key.tenant_id, session_id))
    return CheckpointsOut(
        checkpoints=[
            CheckpointOut(
                checkpoint_id=i.checkpoint_id,
                saved_at=i.saved_at.isoformat(),
                label=i.label,
                size=i.size,
            )
            for i in infos
        ]
    )


@router.post(
    "/checkpoints",
    status_code=201,
    summary="Take a checkpoint",
    responses={
        **JSON_BODY_RESPONSES,
        **problem_responses(
            {
                500: "The newest checkpoint of a hibernated session cannot be read",
                507: "The session's state is too large to checkpoint",
            }
        ),
    },
)
async def take_checkpoint(
    session_id: str,
    call: SessionJsonCaller,
    body: Annotated[CheckpointRequest | None, Body()] = None,
) -> CheckpointOut:
    """Save a checkpoint now (the body, and its label, may be left out)."""
    gateway, key = call
    internal = host_id(key.tenant_id, session_id)
    label = None if body is None else body.label
    snap = await gateway.ahost.checkpoint(internal, label, tenant_id=key.tenant_id)
    infos = await asyncio.to_thread(gateway.ahost.host.store.list, internal)
    size = next((i.size for i in infos if i.checkpoint_id == snap.checkpoint_id), None)
    return CheckpointOut(
        checkpoint_id=snap.checkpoint_id,
        saved_at=snap.saved_at.isoformat(),
        label=snap.label,
        size=size,
    )


@router.get(
    "/export",
    summary="Export the conversation, redacted",
    responses=problem_responses({500: "The checkpoint cannot be read"}),
)
async def export(
    session_id: str,
    call: SessionCaller,
    checkpoint_id: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_CHECKPOINT_ID,
            description="A checkpoint_id of /checkpoints; by default the newest that loads",
        ),
    ] = None,
) -> dict[str, Any]:
    """A checkpoint as JSON, secrets redacted: credential-looking values and what sits
    under secret-looking keys (as the host strips them by default, so a host saving with
    ``redact=None`` or its own ``redact`` exports no secret either), then the
    secret-looking keys themselves. By default the newest that can be read, the one the
    session comes back from (a damaged newer one is skipped, as ``/history`` skips it)."""
    gateway, key = call
    gateway.owned(key.tenant_id, session_id)
    internal = host_id(key.tenant_id, session_id)
    snapshot: Snapshot | None
    if checkpoint_id is None:
        snapshot = await gateway.ahost.latest_checkpoint(internal, tenant_id=key.tenant_id)
    else:
        store = gateway.ahost.host.store
        snapshot = await asyncio.to_thread(store.load, internal, checkpoint_id)
    if snapshot is None:
        raise CheckpointNotFound(internal)
    redacted = strip_secrets(snapshot).redact(redact_secrets)
    plain: dict[str, Any] = json.loads(redacted.to_json())
    plain["session_id"] = session_id  # the id the client knows, not the host's tenant/id
    state = plain.get("state")
    if isinstance(state, dict) and state.get("session_id") == internal:
        state["session_id"] = session_id  # (the conversation's own copy of it too)
    return plain
