"""A real uvicorn server on 127.0.0.1 (ephemeral port) in a thread, per test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from actors import AgentTemplate, Message
from gateway import KeyStore, Limits, create_app, load_templates
from gateway.server import bind
from supervisor import AgentHost, AsyncAgentHost
from tests.gateway.cluster_nodes import Nodes

TEMPLATES = ["echo=tests.gateway.agents:echo", "streaming=tests.gateway.agents:make_streaming"]


@dataclass
class Served:
    url: str
    keys: KeyStore
    host: AgentHost
    data_dir: Path

    def client(self, key: str | None) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)


def run_server(app: object) -> tuple[str, uvicorn.Server, threading.Thread]:
    """Serve ``app`` on a socket bound and listening before the thread starts, so a
    client may connect at once (the backlog holds it until uvicorn accepts)."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{port}", server, thread


def stop_server(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(10)
    assert not thread.is_alive()


@contextmanager
def sends_then(
    host: AgentHost,
    templates: dict[str, AgentTemplate],
    keys: KeyStore,
    after: Callable[[], object],
    tenant: str = "acme",
) -> Iterator[httpx.Client]:
    """A client of ``tenant`` on a gateway of ``host`` whose every send (streamed too) is
    submitted, waited for, then followed by ``after()``, all before the send's stream
    reads its first event: on the server's event loop, which that reader needs, so what
    ``after`` does is never a race the reader may win. Server and ``keys`` closed on exit."""
    submit = host.futures.send

    def send_wait_then(*args: Any, **kwargs: Any) -> Future[Message]:
        future = submit(*args, **kwargs)
        future.result(timeout=10)
        after()
        return future

    host.futures.send = send_wait_then  # type: ignore[method-assign]
    with tenant_client(host, templates, keys, tenant) as http:
        yield http


@contextmanager
def tenant_client(
    host: AgentHost, templates: dict[str, AgentTemplate], keys: KeyStore, tenant: str = "acme"
) -> Iterator[httpx.Client]:
    """A client of ``tenant`` on a gateway of ``host`` served on a real uvicorn server;
    server and ``keys`` closed on exit."""
    url, server, thread = run_server(create_app(AsyncAgentHost(host), templates, keys))
    headers = {"Authorization": f"Bearer {keys.create(tenant).key}"}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
            yield http
    finally:
        stop_server(server, thread)
        keys.close()


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[AgentHost]:
    """A host on ``tmp_path`` (its data directory), shut down after the test."""
    agents = AgentHost(data_dir=tmp_path, call_timeout=10)
    try:
        yield agents
    finally:
        agents.shutdown()


@contextmanager
def serving(
    host: AgentHost,
    templates: dict[str, AgentTemplate],
    data_dir: Path,
    limits: Limits,
    keys: KeyStore | None = None,
) -> Iterator[Served]:
    """The gateway of ``host`` (whose data directory is ``data_dir``, keys there too, or
    ``keys``) served on a real uvicorn server; server, host and keys closed on exit."""
    keys = keys or KeyStore(data_dir)
    app = create_app(AsyncAgentHost(host), templates, keys, limits)
    url, server, thread = run_server(app)
    try:
        yield Served(url, keys, host, data_dir)
    finally:
        stop_server(server, thread)
        host.shutdown()
        keys.close()


@contextmanager
def one_session(data_dir: Path, template: AgentTemplate) -> Iterator[httpx.Client]:
    """A client of session ``s`` (of tenant ``acme``), made from ``template`` on a served
    host of its own in ``data_dir``; client, server, host and keys closed on exit."""
    host = AgentHost(data_dir=data_dir, call_timeout=10)
    with serving(host, {"t": template}, data_dir, Limits()) as served:
        with served.client(served.keys.create("acme").key) as client:
            made = client.post("/v1/sessions", json={"template": "t", "session_id": "s"})
            assert made.status_code == 201, made.text
            yield client


@pytest.fixture
def served(tmp_path: Path, limits: Limits) -> Iterator[Served]:
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    with serving(host, load_templates(TEMPLATES), tmp_path, limits) as made:
        yield made


@pytest.fixture
def nodes(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[Nodes]:
    """Gateway nodes of one cluster on the test's PostgreSQL schema, stopped at the end."""
    made = Nodes(pg_dsn, pg_schema, tmp_path)
    try:
        yield made
    finally:
        made.close()
