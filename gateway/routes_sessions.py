"""``/v1/sessions``: create, list, get and delete the caller's tenant's sessions."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Final

from fastapi import APIRouter, Response

from actors import AgentTemplate, Usage
from gateway._context import (
    Caller,
    Gateway,
    JsonCaller,
    SessionCaller,
    host_id,
    public_id,
)
from gateway.keys import RememberedSession, now_ms
from gateway.problems import Problem, ProblemError, shown
from gateway.schemas import (
    JSON_BODY_RESPONSES,
    CreateSession,
    SessionOut,
    SessionsOut,
    UsageOut,
)
from supervisor import SessionAlreadyExists, SessionInfo, SessionNotFound, SessionOwnedElsewhere

__all__ = ["router", "session_body", "session_out"]

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
logger = logging.getLogger("gateway")

STALE_RECORD_SECONDS: Final = 60.0
"""A recorded session that no host runs, older than this, was left by a create that
died between recording it and starting it: deleting it drops the record (it was
listed as ``starting`` and counted against the tenant's limit). A younger one may
be a create still in flight, and is left to it."""


async def session_out(gateway: Gateway, info: SessionInfo) -> SessionOut:
    """The response body of one session; its key store record is read off the event loop
    (a database read)."""
    row = await asyncio.to_thread(gateway.keys.session_row, info.session_id)
    return session_body(info, row)


def session_body(info: SessionInfo, row: RememberedSession | None) -> SessionOut:
    """The response body of one session, given its key store record (``session_row``):
    created when the gateway recorded it, not when this host last resumed it."""
    return SessionOut(
        session_id=public_id(info.session_id),
        tenant_id=info.tenant_id,
        template=None if row is None else row.template,
        status=info.status,
        model=info.model,
        created_at=info.created_at if row is None else row.created_at,
        metadata={} if row is None else json.loads(row.metadata_json),
        usage=UsageOut(**info.usage.to_dict()),
    )


@router.post(
    "",
    status_code=201,
    summary="Create a session",
    responses=JSON_BODY_RESPONSES,
)
async def create_session(body: CreateSession, call: JsonCaller) -> SessionOut:
    """Start a session on a named template; its id is yours or a new random one."""
    gateway, key = call
    template = gateway.templates.get(body.template)
    if template is None:
        names = ", ".join(sorted(gateway.templates))
        detail = f"no template {shown(body.template)!r}; this server has: {names}"
        raise ProblemError(Problem(422, "unknown-template", "Unknown template", detail))
    tenant = key.tenant_id
    session_id = body.session_id or uuid.uuid4().hex
    internal = host_id(tenant, session_id)
    lock = gateway.id_lock(internal)  # no delete of this id between the steps below
    async with lock:
        await _create(gateway, template, internal, tenant, body)
        return await session_out(gateway, gateway.owned(tenant, session_id))


async def _create(
    gateway: Gateway, template: AgentTemplate, internal: str, tenant: str, body: CreateSession
) -> None:
    """Record, start and checkpoint the session ``internal`` (the caller holds its
    ``id_lock``); a failed step undoes the ones before it and raises."""
    metadata = json.dumps(body.metadata)
    limit = gateway.limits.max_sessions_per_tenant
    # the count and the record in one atomic step of the key store, against every other
    # create of the tenant (every node's, in a cluster); the start comes after it
    keys = gateway.keys
    reserved = await asyncio.to_thread(
        keys.reserve_session, internal, tenant, body.template, metadata, limit
    )
    if not reserved.admitted:
        detail = f"tenant has {reserved.count} sessions, the most allowed; delete one first"
        raise ProblemError(Problem(409, "session-limit", "Too many sessions", detail))
    try:
        await gateway.ahost.start_session(template, internal, tenant)
    except Exception as exc:  # (cancelled: it may have started; the record stays)
        if reserved.new:  # not started: its record goes (a session of that id keeps its own)
            await asyncio.to_thread(keys.forget_session, internal)
        if isinstance(exc, SessionOwnedElsewhere):  # a cluster: another node runs this id
            raise SessionAlreadyExists(internal) from None
        raise
    if not reserved.new:  # the id had a stale record: this session's replaces it
        await asyncio.to_thread(keys.remember_session, internal, tenant, body.template, metadata)
    # Durable before it is answered: a restart (after a SIGKILL too) resumes the sessions
    # that have a checkpoint, and one never sent a message would have none yet.
    try:
        await gateway.ahost.checkpoint(internal, tenant_id=tenant)
    except Exception:  # (cancelled: as above)
        await _undo_start(gateway, internal, tenant)
        raise


async def _undo_start(gateway: Gateway, internal: str, tenant: str) -> None:
    """Undo a create whose first checkpoint failed, before its (retryable) error answers:
    otherwise the session runs and is recorded, so the client's retry of the same id got
    409 ``session-exists``, and one of a random id held a place of the tenant's limit.
    Stopped without a final checkpoint (the store would fail it the same way), then any
    checkpoint of it deleted and its record dropped. A step that fails is logged and ends
    the undo there: the session, or its record, stays listed and can be deleted."""
    host = gateway.ahost.host
    try:
        await gateway.ahost.stop_session(internal, tenant_id=tenant, checkpoint=False)
    except SessionNotFound:
        pass  # gone already (the host shut down)
    except Exception:
        logger.exception("undoing the create of %r: its stop failed", internal)
        return
    try:
        await asyncio.to_thread(host.store.delete, internal)
        await asyncio.to_thread(gateway.keys.forget_session, internal)
    except Exception:
        logger.exception("undoing the create of %r: its checkpoints or record stay", internal)


@router.get("", summary="List your sessions")
async def list_sessions(call: Caller) -> SessionsOut:
    """Every session of the caller's tenant (each counts against its session limit): live,
    hibernated, restarting or failed; ``starting``, one being created; and
    ``unavailable``, one whose template this server does not serve, or that never
    started or could not be resumed here (DELETE removes it)."""
    gateway, key = call
    records = await asyncio.to_thread(gateway.keys.tenant_sessions, key.tenant_id)
    rows = {record.session_id: record for record in records}
    infos = gateway.ahost.host.list_sessions(key.tenant_id)
    listed = [session_body(info, rows.get(info.session_id)) for info in infos]
    here = {info.session_id for info in infos}
    cutoff = now_ms() - int(STALE_RECORD_SECONDS * 1000)
    # A cluster node answers here for its own sessions only (gateway._listing lists the
    # others, from the store): there, the others are not "not here" but elsewhere.
    alone = gateway.ahost.host.node is None
    listed += [
        _not_here(gateway, record, cutoff)
        for record in records
        if record.session_id not in here and (alone or record.template not in gateway.templates)
    ]
    return SessionsOut(sessions=listed)


def _not_here(gateway: Gateway, record: RememberedSession, cutoff: int) -> SessionOut:
    """A recorded session this host does not run, as its record has it: a create in flight
    (made after ``cutoff``), else one this server cannot serve (its template is not
    among this server's, or its create died, or it was not resumed at start). Listed, as
    it counts against the tenant's limit: one the client never got the id of would
    otherwise hold its place unseen."""
    template = gateway.templates.get(record.template)
    starting = template is not None and record.created_at > cutoff
    return SessionOut(
        session_id=public_id(record.session_id),
        tenant_id=record.tenant_id,
        template=record.template,
        status="starting" if starting else "unavailable",
        model="" if template is None else template.model_string,
        created_at=record.created_at,
        metadata=json.loads(record.metadata_json),
        usage=UsageOut(**Usage().to_dict()),
    )


@router.get("/{session_id}", summary="Get a session")
async def get_session(session_id: str, call: SessionCaller) -> SessionOut:
    """One session of the caller's tenant."""
    gateway, key = call
    return await session_out(gateway, gateway.owned(key.tenant_id, session_id))


@router.delete("/{session_id}", status_code=204, summary="Delete a session")
async def delete_session(session_id: str, call: SessionCaller) -> Response:
    """Stop the session and delete its checkpoints: it is gone for good."""
    gateway, key = call
    internal = host_id(key.tenant_id, session_id)
    lock = gateway.id_lock(internal)  # no create of this id between the steps below
    async with lock:
        try:
            gateway.owned(key.tenant_id, session_id)
        except SessionNotFound:
            if not await asyncio.to_thread(_forget_stale_record, gateway, key.tenant_id, internal):
                raise
            return Response(status_code=204)
        # no final checkpoint: every checkpoint of it is deleted next
        await gateway.ahost.stop_session(internal, tenant_id=key.tenant_id, checkpoint=False)
        await asyncio.to_thread(gateway.ahost.host.store.delete, internal)
        await asyncio.to_thread(gateway.keys.forget_session, internal)
    return Response(status_code=204)


def _forget_stale_record(gateway: Gateway, tenant_id: str, internal: str) -> bool:
    """Drop the stale record of ``internal`` (see ``STALE_RECORD_SECONDS``), or that of a
    session of a template this server does not serve (never resumed here), and any
    checkpoints of it; whether there was one.

    Raises:
        SessionOwnedElsewhere: a live other node of the cluster owns it now.
    """
    cutoff = now_ms() - int(STALE_RECORD_SECONDS * 1000)
    stale = any(
        record.session_id == internal
        and (record.created_at <= cutoff or record.template not in gateway.templates)
        for record in gateway.keys.tenant_sessions(tenant_id)
    )
    if stale:
        _refuse_if_owned_elsewhere(gateway, internal)
        gateway.ahost.host.store.delete(internal)
        gateway.keys.forget_session(internal)
    return stale


def _refuse_if_owned_elsewhere(gateway: Gateway, internal: str) -> None:
    """On a cluster node, refuse to drop ``internal``'s checkpoints and record while a live
    other node owns it (one read of its owner in the database): that node created it anew
    since this request was routed here, and its first checkpoint would be lost. The
    client's retry is routed to that node, which deletes the session it runs.

    Raises:
        SessionOwnedElsewhere: a live other node owns it (503, retryable).
    """
    node = gateway.ahost.host.node
    if node is None:
        return
    owner = node.owner(internal)
    if owner is None or owner.node_id is None or not owner.live:
        return
    if (owner.node_id, owner.incarnation) != (node.node_id, node.incarnation):
        raise SessionOwnedElsewhere(public_id(internal), owner.node_id, owner.address)
