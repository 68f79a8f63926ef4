"""``serve``: a host on a data directory, its sessions resumed, behind uvicorn."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import uvicorn

from actors import AgentTemplate
from gateway.app import create_app
from gateway.keys import KeyStore
from gateway.limits import Limits
from supervisor import AgentHost, AsyncAgentHost

__all__ = ["resume_sessions", "serve"]

logger = logging.getLogger("gateway")


def resume_sessions(host: AgentHost, keys: KeyStore, templates: dict[str, AgentTemplate]) -> int:
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
) -> None:
    """Run the gateway until interrupted (SIGINT/SIGTERM), then shut the host down."""
    keys = KeyStore(data_dir)
    agent_host = AgentHost(data_dir=data_dir, workers=workers)
    try:
        resume_sessions(agent_host, keys, templates)
        app = create_app(AsyncAgentHost(agent_host), templates, keys, limits)
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
        )
        server = uvicorn.Server(config)
        server.run(sockets=None if sock is None else [sock])
    finally:
        agent_host.shutdown()
        keys.close()
