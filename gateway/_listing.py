"""``ClusterListing``: ``GET /v1/sessions`` on a cluster node lists the caller's tenant's
sessions on every node, as one node lists its own.

The key store's record of the tenant's gateway sessions is the authority on
which sessions there are; each one's fields come from the node that runs it::

    the tenant's recorded sessions (key store) and their owners (sessions, nodes): two reads
    in parallel, each bounded by the timeout:
        this node ─────────────── its own table (no request)
        each live other owner ─── GET /v1/sessions with X-Sessionvisor-Forwarded-By,
                                  which it answers with its own sessions only
    each recorded session, unless the cluster marked it stopped:
        its owner's entry; else any node's (it moved meanwhile); else the store's:
            "unavailable"  its live owner did not answer (killed, frozen, cut off)
            "hibernated"   no live owner, a checkpoint: its next request resumes it
            "starting"     recorded, never claimed (a create in flight)

A node that does not answer in time costs the listing that time once (the
nodes are asked at once), never the listing itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Final

import httpx
from pydantic import ValidationError

from actors import AgentTemplate, Snapshot, SnapshotDecodeError, Usage
from gateway._context import public_id
from gateway.keys import ApiKeys, RememberedSession
from gateway.routes_sessions import session_body
from gateway.schemas import SessionOut, SessionsOut, UsageOut
from supervisor import AgentHost, CheckpointNotFound, SessionInfo
from supervisor.cluster import ClusterNode, Owner

__all__ = ["LIST_TIMEOUT", "UNAVAILABLE", "ClusterListing"]

logger = logging.getLogger("gateway.routing")

LIST_TIMEOUT: Final = 5.0
"""Seconds a listing waits for another node's answer before listing its sessions from the
store."""
UNAVAILABLE: Final = "unavailable"
"""The status of a session whose owner holds its lease but did not answer the listing."""


class ClusterListing:
    """Lists a tenant's sessions across the cluster (see the module docstring). Used on the
    server's event loop; its database reads and snapshot loads run in threads.

    Args:
        host: The node's host (``AgentHost(node=...)``).
        node: Its cluster node.
        keys: The cluster's shared key store.
        templates: Template name -> template (a session listed from the store shows its
            template's model).
        http: The pooled client to ask other nodes with.
        forwarded_header: ``(name, value)`` marking a request as forwarded by this node.
        timeout: Seconds to wait for another node's answer (``None``: ``LIST_TIMEOUT``).
    """

    def __init__(
        self,
        host: AgentHost,
        node: ClusterNode,
        keys: ApiKeys,
        templates: dict[str, AgentTemplate],
        *,
        http: Callable[[], httpx.AsyncClient],
        forwarded_header: tuple[str, str],
        timeout: float | None = None,
    ) -> None:
        self.host = host
        self.node = node
        self.keys = keys
        self.templates = templates
        self._http = http
        self._forwarded = forwarded_header
        self.timeout = LIST_TIMEOUT if timeout is None else timeout

    async def sessions(self, tenant_id: str, authorization: str) -> SessionsOut:
        """Every recorded session of ``tenant_id``, oldest first.

        Args:
            tenant_id: The caller's tenant.
            authorization: The caller's ``Authorization`` header, sent on to other nodes.

        Raises:
            StoreUnreachable: the database cannot be reached.
        """
        records = await asyncio.to_thread(self.keys.tenant_sessions, tenant_id)
        if not records:
            return SessionsOut(sessions=[])
        owners = await asyncio.to_thread(self.node.owners, [r.session_id for r in records])
        others = {
            o.node_id: o.address
            for o in owners.values()
            if o.live and o.node_id is not None and o.node_id != self.node.node_id
        }
        asked = await asyncio.gather(
            *(self._ask(node_id, address, authorization) for node_id, address in others.items())
        )
        answers: dict[str, dict[str, SessionOut]] = {
            node_id: answer for node_id, answer in zip(others, asked, strict=True) if answer
        }
        answers[self.node.node_id] = self._own(tenant_id, records)
        listed: list[SessionOut | None] = []
        missing: list[tuple[int, RememberedSession, Owner | None]] = []
        for record in records:
            owner = owners.get(record.session_id)
            if owner is not None and owner.state == "stopped":
                continue  # stopped sessions are forgotten, as on one host
            entry = _entry(public_id(record.session_id), owner, answers)
            if entry is None:
                missing.append((len(listed), record, owner))
            listed.append(entry)
        stored = await asyncio.gather(
            *(asyncio.to_thread(self._from_store, record, owner) for _, record, owner in missing)
        )
        for (index, _, _), entry in zip(missing, stored, strict=True):
            listed[index] = entry
        return SessionsOut(sessions=[entry for entry in listed if entry is not None])

    def _own(self, tenant_id: str, records: Sequence[RememberedSession]) -> dict[str, SessionOut]:
        """This node's sessions of the tenant, with the records already read."""
        rows = {r.session_id: r for r in records}
        infos: list[SessionInfo] = self.host.list_sessions(tenant_id)
        return {
            public_id(info.session_id): session_body(info, rows.get(info.session_id))
            for info in infos
        }

    async def _ask(
        self, node_id: str, address: str, authorization: str
    ) -> dict[str, SessionOut] | None:
        """``node_id``'s own sessions of the caller's tenant, or ``None`` (logged) when it
        does not answer them within the timeout."""
        headers = {"Authorization": authorization, self._forwarded[0]: self._forwarded[1]}
        url = address.rstrip("/") + "/v1/sessions"
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._http().get(url, headers=headers)
            if response.status_code != 200:
                logger.warning("node %s answered %s to a listing", node_id, response.status_code)
                return None
            sessions = SessionsOut.model_validate_json(response.content).sessions
        except (httpx.HTTPError, TimeoutError, ValidationError) as exc:
            logger.warning("node %s did not answer a listing: %r", node_id, exc)
            return None
        return {entry.session_id: entry for entry in sessions}

    def _from_store(self, record: RememberedSession, owner: Owner | None) -> SessionOut:
        """A session no node listed, from its record and latest checkpoint (in a thread).

        A newest checkpoint that cannot be read lists the session still (its next request
        resumes it from the newest one that can be), with no usage: raised, it failed the
        whole listing of the tenant.
        """
        snapshot: Snapshot | None = None
        try:
            snapshot = self.host.store.load(record.session_id)
            saved = True
        except CheckpointNotFound:
            saved = False
        except SnapshotDecodeError:
            saved = True
        if owner is not None and (owner.live or not saved):
            status = UNAVAILABLE  # held by a node that did not answer, or died too early
        elif not saved:
            status = "starting"  # recorded, not claimed yet: a create in flight
        else:
            status = "hibernated"  # no live owner: its next request resumes it
        try:
            usage = Usage() if snapshot is None else snapshot.usage()
        except SnapshotDecodeError:
            usage = Usage()
        template = self.templates.get(record.template)
        return SessionOut(
            session_id=public_id(record.session_id),
            tenant_id=record.tenant_id,
            template=record.template,
            status=status,
            model="" if template is None else template.model_string,
            created_at=record.created_at,
            metadata=json.loads(record.metadata_json),
            usage=UsageOut(**usage.to_dict()),
        )


def _entry(
    session_id: str, owner: Owner | None, answers: dict[str, dict[str, SessionOut]]
) -> SessionOut | None:
    """The session's entry from its live owner's answer, else from any node's (it moved
    between the owners' read and the answers), else ``None``."""
    if owner is not None and owner.live and owner.node_id in answers:
        entry = answers[owner.node_id].get(session_id)
        if entry is not None:
            return entry
    for answer in answers.values():
        entry = answer.get(session_id)
        if entry is not None:
            return entry
    return None
