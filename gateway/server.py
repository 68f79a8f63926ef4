"""``serve``: a host on a data directory, its sessions resumed, behind uvicorn; or, with
``ClusterOptions``, a node of a cluster sharing one PostgreSQL database.

``serve`` binds its listening socket itself, before uvicorn starts, so it can
announce the address it bound (``--port 0`` picks a free port) in one stable
line, ``serving on http://HOST:PORT``: a client may connect as soon as the line
is out (the socket's backlog holds it until uvicorn accepts).

SIGINT and SIGTERM stop uvicorn gracefully (the requests in flight finish; event
streams, which would only end with their sessions, end at once, cleanly); then the
host is shut down (every running session's final checkpoint) and ``serve`` returns.
uvicorn re-raises the signal it caught once it has stopped; ``serve`` catches that
re-raised signal itself, so a stopped server exits normally (status 0) after its host shutdown
instead of dying of the signal before it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from actors import AgentTemplate
from gateway._context import Gateway
from gateway.app import create_app
from gateway.keys import ApiKeys, KeyStore
from gateway.limits import Limits
from supervisor import AgentHost, AsyncAgentHost

__all__ = [
    "ClusterOptions",
    "ClusterStoreOptionsError",
    "bind",
    "cluster_host",
    "resume_sessions",
    "serve",
    "serving_line",
]

logger = logging.getLogger("gateway")

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ClusterStoreOptionsError(ValueError):
    """``ClusterOptions.dsn`` is no connection string, or ``schema`` no schema name the
    store can use: found before anything connects. The message says which, and what
    to give (it never quotes the connection string, which may hold a password)."""


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


@contextlib.contextmanager
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
        ClusterStoreOptionsError: ``options.dsn`` or ``options.schema`` cannot be used.
        StoreUnreachable: the database cannot be reached.
        NodeIdInUse: another live process runs as ``options.node_id``.
    """
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only for a cluster)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415
    from supervisor.cluster import NodeConfig  # noqa: PLC0415

    try:
        store = PostgresCheckpointStore(options.dsn, schema=options.schema)
    except (TypeError, ValueError) as exc:  # checked before it connects
        raise ClusterStoreOptionsError(str(exc)) from exc
    try:
        keys = PostgresKeyStore(store, data_dir)

        def template_for(session_id: str) -> AgentTemplate | None:
            row = keys.session_row(session_id)
            return None if row is None else templates.get(row.template)

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
        template = None if row is None else templates.get(row.template)
        about = {"session_id": session_id}  # a field of its own, as the host's lines have
        if template is None:
            logger.warning(
                "session %r: its template is not served here; not resumed", session_id, extra=about
            )
            continue
        try:
            host.resume(session_id, template)
            resumed += 1
        except Exception:
            logger.exception("could not resume session %r", session_id, extra=about)
    return resumed


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one), IPv6 if ``host``
    is an IPv6 address. Raises ``OSError`` (e.g. the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on sockets whose proto
    # says TCP, and without it every answer (headers, then body) waits ~40 ms for a
    # delayed ACK (Nagle's algorithm).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def serving_line(sock: socket.socket) -> str:
    """``serving on http://HOST:PORT``: the line ``serve`` announces for the bound ``sock``."""
    address = sock.getsockname()
    host = f"[{address[0]}]" if sock.family == socket.AF_INET6 else address[0]
    return f"serving on http://{host}:{address[1]}"


def _uvicorn_config(app: Any, **options: Any) -> uvicorn.Config:
    """uvicorn's config for ``app``: its warnings only, graceful stops of 5 s at most.

    ``log_config=None``: uvicorn's own loggers (``uvicorn.error``: a malformed request,
    an exception in the app, with its traceback) keep no handlers of their own and
    propagate to the root logger, so they come out in the format the process chose
    (``serve --log-format json``: one JSON object per line) instead of uvicorn's
    plain text between the JSON lines.
    """
    return uvicorn.Config(
        app, log_level="warning", log_config=None, timeout_graceful_shutdown=5, **options
    )


def _worker_setup(workers: int | None, initializer: Callable[[], object] | None) -> dict[str, Any]:
    """``AgentHost``'s keywords that run ``initializer`` in its workers (none without)."""
    if workers is None or initializer is None:
        return {}
    return {"worker_initializer": initializer}


class _Server(uvicorn.Server):
    """uvicorn's server, which ends the gateway's event streams (``/events``, its own and
    those a cluster node relays from the session's owner) as it starts to stop: its
    graceful stop waits for every answer in flight, and an event stream ends only when
    its session does, so the stop would take ``timeout_graceful_shutdown``, then cut the
    streams off mid-answer (an error logged, each client's body broken)."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self._gateway = gateway

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self._gateway.end_streams()
        await super().shutdown(sockets)


@contextlib.contextmanager
def _absorb_stop_signals() -> Iterator[threading.Event]:
    """While inside, SIGINT/SIGTERM only set the event yielded (outside the main thread:
    nothing is changed). uvicorn installs its own handlers over these and, once
    stopped, restores them and re-raises the signal, which then lands here."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def note(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, note) for sig in _STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(
    data_dir: Path,
    templates: dict[str, AgentTemplate],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int | None = None,
    limits: Limits | None = None,
    sock: socket.socket | None = None,
    announce: Callable[[str], None] | None = None,
    cluster: ClusterOptions | None = None,
    metrics_token: str | None = None,
    worker_initializer: Callable[[], object] | None = None,
) -> None:
    """Run the gateway until SIGINT/SIGTERM (or uvicorn stops), then shut the host down
    (final checkpoints) and return.

    Args:
        data_dir: The host's and the key store's directory.
        templates: Template name -> template, as clients name them.
        host, port: Where to listen (port 0: any free port), unless ``sock`` is given.
        workers: Run sessions in that many worker processes (``AgentHost(workers=)``).
        limits: See ``Limits``; the defaults if ``None``.
        sock: A bound, listening socket to serve on instead of ``host:port``.
        announce: Called once, before requests are served, with ``serving_line``
            (the ``sessionvisor serve`` command prints it); also logged.
        cluster: Serve as a node of that cluster (``cluster_host``): sessions live in
            PostgreSQL, requests for sessions another node owns are forwarded there,
            and ``data_dir`` holds only the API keys' secret. SIGINT/SIGTERM drain it.
        metrics_token: ``/metrics`` answers only requests bearing it (``None``: any).
        worker_initializer: Called first in every worker process (``AgentHost``'s
            ``worker_initializer``): e.g. to set its logging up as this process's, which a
            worker does not inherit (``sessionvisor serve`` does so, so that the log lines
            of the sessions' code, run there, have the server's format and level).

    Raises:
        OSError: ``host:port`` could not be bound.
    """
    if cluster is not None:
        _serve_cluster(
            cluster, data_dir, templates, workers, limits, sock, host, port, announce,
            metrics_token=metrics_token, worker_initializer=worker_initializer,
        )  # fmt: skip
        return
    keys = KeyStore(data_dir)
    try:
        agent_host = AgentHost(
            data_dir=data_dir, workers=workers, **_worker_setup(workers, worker_initializer)
        )
    except BaseException:  # the directory is in use, a secret refused, ...
        keys.close()
        raise
    listening = sock
    try:
        with _absorb_stop_signals() as stopped:
            resume_sessions(agent_host, keys, templates)
            app = create_app(
                AsyncAgentHost(agent_host), templates, keys, limits, metrics_token=metrics_token
            )
            if listening is None:
                listening = bind(host, port)
            server = _Server(_uvicorn_config(app), app.state.gateway)
            line = serving_line(listening)
            logger.info("%s", line)
            if announce is not None:
                announce(line)
            if not stopped.is_set():  # a signal before uvicorn took over: do not start
                server.run(sockets=[listening])
            agent_host.shutdown()  # here, so that a second signal cannot cut it short
    finally:
        agent_host.shutdown()
        keys.close()
        if listening is not None and listening is not sock:
            listening.close()


def _serve_cluster(  # noqa: PLR0917 (serve's own arguments, passed on)
    cluster: ClusterOptions,
    data_dir: Path,
    templates: dict[str, AgentTemplate],
    workers: int | None,
    limits: Limits | None,
    sock: socket.socket | None,
    host: str,
    port: int,
    announce: Callable[[str], None] | None,
    *,
    metrics_token: str | None,
    worker_initializer: Callable[[], object] | None,
) -> None:
    """``serve`` as a cluster node. Idle connections are kept 30 s: longer than the other
    nodes keep theirs to it (2 s), so a forwarded request never meets a connection this
    side is closing."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per forwarded request
    listening = sock
    try:
        with (
            _absorb_stop_signals() as stopped,
            cluster_host(
                cluster,
                data_dir,
                templates,
                workers,
                **_worker_setup(workers, worker_initializer),
            ) as (node_host, keys),
        ):
            app = create_app(
                AsyncAgentHost(node_host), templates, keys, limits, metrics_token=metrics_token
            )
            if listening is None:
                listening = bind(host, port)
            server = _Server(_uvicorn_config(app, timeout_keep_alive=30), app.state.gateway)
            line = serving_line(listening)
            logger.info("%s (node %r)", line, cluster.node_id)
            if announce is not None:
                announce(line)
            if not stopped.is_set():
                server.run(sockets=[listening])
    finally:
        if listening is not None and listening is not sock:
            listening.close()
