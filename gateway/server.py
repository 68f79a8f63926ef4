"""``serve``: a host on a data directory, its sessions resumed, behind uvicorn; or, with
``ClusterOptions``, a node of a cluster sharing one PostgreSQL database."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from actors import AgentTemplate
from gateway.app import create_app
from gateway.keys import ApiKeys, KeyStore
from gateway.limits import Limits
from supervisor import AgentHost, AsyncAgentHost

__all__ = ["ClusterOptions", "cluster_host", "resume_sessions", "serve"]

logger = logging.getLogger("gateway")


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """How ``serve`` joins a cluster. Immutable, thread-safe.

    Attributes:
        dsn: The PostgreSQL connection string every node of the cluster shares.
        node_id: This node's id, unique among live nodes.
        advertise: The URL other nodes reach this node's gateway at
            (``http://10.0.0.5:8080``); it is what they forward requests to.
        ttl: Seconds without a heartbeat after which the node counts as dead
            and its sessions move (see ``supervisor.cluster.NodeConfig``).
        schema: The PostgreSQL schema of the cluster's tables.
    """

    dsn: str
    node_id: str
    advertise: str
    ttl: float = 10.0
    schema: str = "sessionvisor"

    def __post_init__(self) -> None:
        if not self.advertise.startswith(("http://", "https://")):
            raise ValueError(
                f"advertise must be the gateway's URL (http://host:port), got {self.advertise!r}"
            )


@contextmanager
def cluster_host(
    options: ClusterOptions,
    data_dir: Path,
    templates: dict[str, AgentTemplate],
    workers: int | None = None,
    **host_options: Any,
) -> Iterator[tuple[AgentHost, ApiKeys]]:
    """A host that is a node of the cluster, and the cluster's shared key store; drained
    and closed on exit. A session is taken over (by the sweeper, or on a request) on the
    template it was created from, which the shared key store records.

    Raises:
        StoreUnreachable: the database cannot be reached.
        NodeIdInUse: another live process runs as ``options.node_id``.
    """
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only for a cluster)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415
    from supervisor.cluster import NodeConfig  # noqa: PLC0415

    store = PostgresCheckpointStore(options.dsn, schema=options.schema)
    try:
        keys = PostgresKeyStore(store, data_dir)

        def template_for(session_id: str) -> AgentTemplate | None:
            row = keys.session_row(session_id)
            return None if row is None else templates.get(row[0])

        node = NodeConfig(
            node_id=options.node_id, address=options.advertise, ttl=options.ttl,
            template=template_for,
        )  # fmt: skip
        host = AgentHost(store=store, node=node, workers=workers, **host_options)
        try:
            yield host, keys
        finally:
            host.shutdown()  # the final checkpoints, then the drain: others claim at once
    finally:
        store.close()


def resume_sessions(host: AgentHost, keys: ApiKeys, templates: dict[str, AgentTemplate]) -> int:
    """Resume every gateway session of the store on the template it was created from;
    one whose template this server lacks is logged and left. Returns how many resumed."""
    resumed = 0
    for session_id in host.store.sessions():
        row = keys.session_row(session_id)
        template = None if row is None else templates.get(row[0])
        if template is None:
            logger.warning("session %r: its template is not served here; not resumed", session_id)
            continue
        try:
            host.resume(session_id, template)
            resumed += 1
        except Exception:
            logger.exception("could not resume session %r", session_id)
    return resumed


def serve(
    data_dir: Path,
    templates: dict[str, AgentTemplate],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int | None = None,
    limits: Limits | None = None,
    sock: socket.socket | None = None,
    cluster: ClusterOptions | None = None,
) -> None:
    """Run the gateway until interrupted (SIGINT/SIGTERM), then shut the host down.

    With ``cluster`` the host is a node of that cluster (``cluster_host``): its
    sessions live in PostgreSQL, and requests for sessions another node owns
    are forwarded there; ``data_dir`` then holds only the API keys' secret.
    """
    if cluster is not None:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per forwarded request
        with cluster_host(cluster, data_dir, templates, workers) as (node_host, shared_keys):
            app = create_app(AsyncAgentHost(node_host), templates, shared_keys, limits)
            _run(app, host, port, sock, keep_alive=30)
        return
    keys = KeyStore(data_dir)
    agent_host = AgentHost(data_dir=data_dir, workers=workers)
    try:
        resume_sessions(agent_host, keys, templates)
        app = create_app(AsyncAgentHost(agent_host), templates, keys, limits)
        _run(app, host, port, sock)
    finally:
        agent_host.shutdown()
        keys.close()


def _run(
    app: object, host: str, port: int, sock: socket.socket | None, keep_alive: int = 5
) -> None:
    """Serve ``app`` until SIGINT/SIGTERM. A cluster node keeps idle connections for 30 s
    (``keep_alive``): longer than the other nodes keep theirs to it (2 s), so a
    forwarded request never meets a connection this side is closing."""
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=keep_alive,
    )
    with _sigterm_returns():
        uvicorn.Server(config).run(sockets=None if sock is None else [sock])


@contextmanager
def _sigterm_returns() -> Iterator[None]:
    """While uvicorn runs: a SIGTERM it re-raises once it has stopped (it does, to give the
    signal its previous meaning) lets ``serve`` return, so the host still shuts down
    (final checkpoints; a cluster node drains) instead of the process dying on it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _note_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _note_sigterm(signum: int, frame: object) -> None:
    logger.info("SIGTERM: the server has stopped; shutting the host down")
