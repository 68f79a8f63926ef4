"""Gateway nodes of one cluster for the routing tests: in-process uvicorn servers (each
with its own host, store and key store on the test's schema, as separate processes
would have) and ``sessionvisor serve`` processes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from gateway import create_app, load_templates
from gateway.keys import ApiKeys
from gateway.limits import Limits
from gateway.server import ClusterOptions, cluster_host
from supervisor import AgentHost, AsyncAgentHost

__all__ = ["TEMPLATES", "GatewayNode", "Nodes", "ServeProcess", "listening_socket"]

TEMPLATES = ["echo=tests.gateway.agents:echo", "streaming=tests.gateway.agents:make_streaming"]
WAIT = 20.0


def listening_socket(port: int = 0) -> socket.socket:
    """A socket on 127.0.0.1 (``port``, or an ephemeral one), bound and listening."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


@dataclass
class GatewayNode:
    """One in-process node: its URL, host and key store; ``stop`` drains it."""

    node_id: str
    url: str
    host: AgentHost
    keys: ApiKeys
    _stack: contextlib.ExitStack
    _server: uvicorn.Server
    _thread: threading.Thread
    stopped: bool = field(default=False)

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT
        )

    def stop_serving(self) -> None:
        """Stop the HTTP server only: the node keeps its leases (it heartbeats on) but no
        longer answers, as a node cut off from the other nodes would."""
        self._server.should_exit = True
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), f"node {self.node_id} did not stop"

    def stop(self) -> None:
        """Stop the server, then shut the host down (final checkpoints, drain). Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        self.stop_serving()
        self._stack.close()


class Nodes:
    """Starts in-process gateway nodes on one schema; stops them all at the end."""

    def __init__(self, dsn: str, schema: str, data_dir: Path) -> None:
        self.dsn = dsn
        self.schema = schema
        self.data_dir = data_dir
        self.made: list[GatewayNode] = []

    def start(
        self, node_id: str, *, ttl: float = 30.0, port: int = 0, limits: Limits | None = None
    ) -> GatewayNode:
        sock = listening_socket(port)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        options = ClusterOptions(
            dsn=self.dsn, node_id=node_id, advertise=url, ttl=ttl, schema=self.schema
        )
        stack = contextlib.ExitStack()
        stack.callback(sock.close)
        templates = load_templates(TEMPLATES)
        host, keys = stack.enter_context(
            cluster_host(options, self.data_dir, templates, call_timeout=WAIT)
        )
        app = create_app(AsyncAgentHost(host), templates, keys, limits)
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        node = GatewayNode(node_id, url, host, keys, stack, server, thread)
        self.made.append(node)
        return node

    def close(self) -> None:
        for node in reversed(self.made):
            node.stop()


class ServeProcess:
    """``sessionvisor serve --postgres ...`` in a process of its own, on ``port`` (a free
    one if ``None``; a restarted node is given its predecessor's)."""

    def __init__(  # noqa: PLR0917 (what a node is started with)
        self,
        dsn: str,
        schema: str,
        data_dir: Path,
        node_id: str,
        ttl: float,
        templates: list[str] | None = None,
        port: int | None = None,
    ) -> None:
        if port is None:
            with listening_socket() as probe:  # a free port, released for the server to bind
                port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        command = [
            str(Path(sys.executable).parent / "sessionvisor"),
            "serve", "--data-dir", str(data_dir), "--port", str(port),
            "--postgres", dsn, "--postgres-schema", schema, "--node-id", node_id,
            "--ttl", str(ttl), "--log-level", "warning",
        ]  # fmt: skip
        for spec in TEMPLATES if templates is None else templates:
            command += ["--template", spec]
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.process = subprocess.Popen(command, cwd=root, env=env)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "serve exited at start"
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)  # polling a starting process: no event to wait on
        raise AssertionError("serve did not answer /healthz in time")

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(WAIT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WAIT)


def created(node: GatewayNode, key: str, session_id: str, template: str = "echo") -> Any:
    """Create ``session_id`` through ``node``; its body."""
    with node.client(key) as client:
        answer = client.post("/v1/sessions", json={"template": template, "session_id": session_id})
    assert answer.status_code == 201, answer.text
    return answer.json()
