"""``sessionvisor serve``: the HTTP gateway on a data directory."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TextIO

import click

from cli import main
from cli._common import data_dir_errors, fail, make_data_dir
from cli._templates import load
from supervisor import SWITCH_INTERVAL, freeze_startup_objects, pin_to_one_cpu, tune_interpreter
from supervisor.cluster import MAX_TTL, MIN_TTL, NodeConfig
from supervisor.log_format import JsonLogFormatter

__all__ = ["configure_logging", "serve"]

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LIMIT_DEFAULTS: Final = {
    "max_body_bytes": 1 << 20,
    "max_message_chars": 32_000,
    "max_sessions_per_tenant": 100,
    "max_concurrent_per_key": 16,
}
"""The defaults of the ``--max-*`` options: ``gateway.limits.Limits``'s own (stated here,
as the gateway, the server extra, is imported only once ``serve`` runs; a test checks
they agree)."""


def _limit_option(key: str, help_text: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The ``--max-...`` option that sets ``Limits.<key>`` (an integer >= 1)."""
    return click.option(
        f"--{key.replace('_', '-')}",
        type=click.IntRange(min=1),
        default=LIMIT_DEFAULTS[key],
        show_default=True,
        help=help_text,
    )


def configure_logging(log_format: str, level: str, stream: TextIO | None = None) -> None:
    """Send every log line to ``stream`` (stderr by default), as text or one JSON object
    per line (``supervisor.log_format``), replacing the root logger's handlers."""
    handler = logging.StreamHandler(stream)
    formatter = JsonLogFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


@main.command()
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The host's data directory, created if missing when its parent exists; in a "
    "cluster (--postgres) only the API keys' secret, the same gateway.secret file on every node",
)
@click.option(
    "--template",
    "templates",
    multiple=True,
    required=True,
    help="NAME=pkg.module:attr (repeatable)",
)
@click.option(
    "--app-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="Where the templates' modules are imported from, first (put on sys.path, as "
    "uvicorn's --app-dir)",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=1024),
    default=None,
    help="Run sessions in N worker processes",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with stable field names",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.option(
    "--postgres",
    "dsn",
    default=None,
    envvar="SESSIONVISOR_POSTGRES",
    help="Cluster mode: the PostgreSQL connection string all nodes share "
    "(env SESSIONVISOR_POSTGRES)",
)
@click.option("--node-id", default=None, help="Cluster mode: this node's id (unique among live)")
@click.option(
    "--advertise",
    default=None,
    help="Cluster mode: the URL other nodes reach this gateway at [default: http://HOST:PORT]",
)
@click.option(
    "--ttl",
    type=click.FloatRange(min=MIN_TTL, max=MAX_TTL),
    default=10.0,
    show_default=True,
    help="Cluster mode: seconds without a heartbeat before a node's sessions move",
)
@click.option(
    "--switch-interval",
    type=click.FloatRange(min=0, min_open=True, max=1),
    default=SWITCH_INTERVAL,
    show_default=True,
    help="Seconds a thread may hold Python's GIL while another waits (sys.setswitchinterval); "
    "Python's 0.005 thrashes with thousands of session threads",
)
@click.option(
    "--cpu",
    type=click.IntRange(min=0),
    default=None,
    help="Run every thread of the process on this one CPU, as batch work (Linux; "
    "supervisor.pin_to_one_cpu): with thousands of sessions, threads on several CPUs "
    "fight over Python's GIL; worker processes run as before [default: every CPU]",
)
@click.option(
    "--metrics-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file holding a token /metrics then asks for (Authorization: Bearer <token>, as "
    "Prometheus' scrape config sends it); without it /metrics is open",
)
@click.option(
    "--postgres-schema",
    "schema",
    default="sessionvisor",
    show_default=True,
    help="Cluster mode: the PostgreSQL schema of the cluster's tables",
)
@_limit_option("max_body_bytes", "Largest request body, in bytes (413 beyond it)")
@_limit_option(
    "max_message_chars", "Longest message or steering text, in characters (422 beyond it)"
)
@_limit_option("max_sessions_per_tenant", "Sessions a tenant may have at once (409 beyond it)")
@_limit_option(
    "max_concurrent_per_key",
    "Requests in flight per API key, open event streams included (429 beyond it)",
)
def serve(  # noqa: PLR0917 (the command's options)
    data_dir: Path,
    templates: tuple[str, ...],
    app_dir: Path,
    workers: int | None,
    host: str,
    port: int,
    log_format: str,
    log_level: str,
    dsn: str | None,
    node_id: str | None,
    advertise: str | None,
    ttl: float,
    switch_interval: float,
    cpu: int | None,
    metrics_token_file: Path | None,
    schema: str,
    max_body_bytes: int,
    max_message_chars: int,
    max_sessions_per_tenant: int,
    max_concurrent_per_key: int,
) -> None:
    """Serve the sessions of DATA_DIR over HTTP until SIGINT or SIGTERM; with --postgres,
    as one node of a cluster sharing that database (any node answers for any session).

    Prints one line, ``serving on http://HOST:PORT``, once it listens (with
    ``--port 0``, the port picked); on SIGINT/SIGTERM it finishes the requests
    in flight, checkpoints every session (a cluster node then releases them to
    the other nodes) and exits 0.

    The --max-* options set what one caller may ask; a request past one answers
    its problem (413, 422, 409 or 429)."""
    try:
        from gateway.keys import SecretUnusable  # noqa: PLC0415  (the server extra)
        from gateway.limits import Limits  # noqa: PLC0415
        from gateway.server import ClusterOptions, ClusterStoreOptionsError, bind  # noqa: PLC0415
        from gateway.server import serve as run  # noqa: PLC0415
    except ImportError as exc:
        fail(f"serve needs the server extra ({exc}): pip install 'sessionvisor[server]'")

    def cluster_at(advertised: str) -> ClusterOptions:
        assert dsn is not None
        assert node_id is not None
        try:
            return ClusterOptions(
                dsn=dsn, node_id=node_id, advertise=advertised, ttl=ttl, schema=schema
            )
        except ValueError as exc:  # the advertised address is no URL
            raise click.BadParameter(str(exc), param_hint="'--advertise'") from None

    if dsn is not None:
        if node_id is None:
            raise click.UsageError("--postgres (cluster mode) needs --node-id")
        _check_node(node_id, ttl, advertise)
        if advertise is not None:  # a bad URL is a usage error before any startup work
            cluster_at(advertise)
    elif node_id is not None or advertise is not None:
        raise click.UsageError("--node-id and --advertise need --postgres (cluster mode)")
    limits = Limits(
        max_body_bytes=max_body_bytes,
        max_message_chars=max_message_chars,
        max_sessions_per_tenant=max_sessions_per_tenant,
        max_concurrent_per_key=max_concurrent_per_key,
    )
    if cpu is not None:
        _pin(cpu)
    _importable(app_dir)
    loaded = load(templates)
    metrics_token = None if metrics_token_file is None else _token(metrics_token_file)
    make_data_dir(data_dir)
    configure_logging(log_format, log_level)
    tune_interpreter(switch_interval)  # before the host starts: its workers take it too
    freeze_startup_objects()  # imports and templates loaded, no session yet
    try:
        sock = bind(host, port)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}")
    with sock:
        cluster = None
        if dsn is not None:  # by default, the address this node listens at
            cluster = cluster_at(advertise or f"http://{host}:{sock.getsockname()[1]}")
        with (
            data_dir_errors(data_dir),
            _secret_errors(SecretUnusable),
            _store_option_errors(ClusterStoreOptionsError),
        ):
            run(
                data_dir,
                loaded,
                workers=workers,
                limits=limits,
                sock=sock,
                announce=click.echo,
                cluster=cluster,
                metrics_token=metrics_token,
                # the sessions' own log lines in worker processes: as this process's
                worker_initializer=functools.partial(configure_logging, log_format, log_level),
            )


_OPTION_OF = {"node_id": "--node-id", "ttl": "--ttl", "address": "--advertise"}
"""The ``NodeConfig`` field a ``NodeConfigError`` names (its ``field``) -> the option that
sets it."""


def _pin(cpu: int) -> None:
    """``pin_to_one_cpu(cpu)``, its refusal as the option's usage error: before the host
    starts, whose threads, but not its workers, inherit the CPU."""
    try:
        pin_to_one_cpu(cpu)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--cpu'") from None
    except NotImplementedError as exc:
        fail(str(exc))


def _check_node(node_id: str, ttl: float, advertise: str | None) -> None:
    """Refuse, as a usage error naming the option (exit 2), a node id, TTL or advertised
    address no cluster node can use: by ``NodeConfig``'s own rules, before the templates
    are imported and the data directory, the socket and the host are made (the node is
    built last, and would only fail then). The option is the one that sets the field the
    error names (its ``field``), whatever its message says.

    Raises:
        click.BadParameter: ``NodeConfig`` refuses it; its message says what to do.
    """
    try:
        NodeConfig(node_id=node_id, address=advertise or "", ttl=ttl, events=None)
    except (TypeError, ValueError) as exc:
        refused = getattr(exc, "field", None)  # a NodeConfigError's field
        option = _OPTION_OF.get(refused, "--node-id") if isinstance(refused, str) else "--node-id"
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from None


@contextlib.contextmanager
def _secret_errors(error: type[Exception]) -> Iterator[None]:
    """Exit 1 with its message for an ``error`` (``gateway.keys.SecretUnusable``, imported
    with the server extra): the key store's secret file cannot be used, which the server
    finds as it starts (a traceback before)."""
    try:
        yield
    except error as exc:
        fail(str(exc))


STORE_OPTIONS = "'--postgres' / '--postgres-schema'"
"""The options an unusable connection string or schema name is a usage error of."""


@contextlib.contextmanager
def _store_option_errors(error: type[Exception]) -> Iterator[None]:
    """A usage error (exit 2) for an ``error`` (``gateway.server.ClusterStoreOptionsError``):
    ``--postgres`` is no connection string, or ``--postgres-schema`` no schema name (its
    message says which); the store refuses them before it connects (a traceback before).
    """
    try:
        yield
    except error as exc:
        raise click.BadParameter(str(exc), param_hint=STORE_OPTIONS) from None


def _importable(app_dir: Path) -> None:
    """Put ``app_dir`` first on ``sys.path`` (once), so that ``--template myapp.agents:chat``
    is found from the directory that holds ``myapp/``, as uvicorn finds apps; worker
    processes, started later, inherit the path."""
    where = str(app_dir.resolve())
    if where not in sys.path:
        sys.path.insert(0, where)


def _token(path: Path) -> str:
    """The metrics token in ``path``: one line, surrounding whitespace dropped.

    Raises:
        SystemExit: it cannot be read, or holds no token (status 1, on one line).
    """
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the metrics token file {str(path)!r}: {exc}")
    if not token or "\n" in token:
        fail(f"the metrics token file {str(path)!r} must hold one token on one line")
    return token
