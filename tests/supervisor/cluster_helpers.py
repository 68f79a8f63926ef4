"""Hosts as nodes of one cluster, in this process, for the cluster tests.

Every node gets a ``PostgresCheckpointStore`` of its own on the test's schema,
as a separate process would. A node's heartbeat is made stale in the database
(``expire``) rather than by waiting out its TTL, so a test decides exactly
when another node may claim its sessions.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors import AgentTemplate, current_step, tool
from supervisor import AgentHost, CheckpointStore, PostgresCheckpointStore
from supervisor.cluster import NodeConfig
from tests.supervisor.host_helpers import WAIT, EventWaiter, template

__all__ = [
    "REDIS_URL",
    "Cluster",
    "FakeClock",
    "NodeProcess",
    "expire",
    "quiesce",
    "redis_library_or_skip",
    "redis_url_or_skip",
    "sql",
    "whereami",
]

REDIS_URL = os.environ.get("SESSIONVISOR_REDIS_URL", "redis://127.0.0.1:6379/0")
"""The Redis server of the tests of the Redis event fan-out."""


def redis_url_or_skip() -> str:
    """``REDIS_URL`` if a Redis server answers there; else skip the test, saying how to start
    one (fail instead under ``SESSIONVISOR_REQUIRE_SERVICES=1``)."""
    import pytest  # noqa: PLC0415 (only the tests call this)

    try:
        import redis  # noqa: PLC0415 (the [redis] extra)
    except ImportError as exc:
        problem = f"the redis library is not installed ({exc}); pip install -e '.[dev]'"
    else:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            client.ping()
            problem = ""
        except redis.RedisError as exc:
            problem = (
                f"no Redis server answers at {REDIS_URL} ({exc}); start one with "
                "`redis-server --daemonize yes`, or set SESSIONVISOR_REDIS_URL"
            )
        finally:
            client.close()
    if problem:
        if os.environ.get("SESSIONVISOR_REQUIRE_SERVICES") == "1":
            pytest.fail(f"SESSIONVISOR_REQUIRE_SERVICES=1, but {problem}", pytrace=False)
        pytest.skip(problem)
    return REDIS_URL


def redis_library_or_skip() -> None:
    """Skip the test, saying how to install it, when the ``redis`` library (the ``[redis]``
    extra) is missing; fail instead under ``SESSIONVISOR_REQUIRE_SERVICES=1``. For tests of
    the Redis transport that need no server (one that is down, on purpose)."""
    import pytest  # noqa: PLC0415 (only the tests call this)

    try:
        import redis  # noqa: F401, PLC0415 (the [redis] extra)
    except ImportError as exc:
        problem = f"the redis library is not installed ({exc}); pip install -e '.[dev]'"
        if os.environ.get("SESSIONVISOR_REQUIRE_SERVICES") == "1":
            pytest.fail(f"SESSIONVISOR_REQUIRE_SERVICES=1, but {problem}", pytrace=False)
        pytest.skip(problem)


class FakeClock:
    """A monotonic clock the test moves by hand. Thread-safe enough for reads."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sql(store: PostgresCheckpointStore, text: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run ``text`` (``{s}``: the store's schema) on a connection of its own; its rows."""
    import psycopg  # noqa: PLC0415 (only where a PostgreSQL server is used)

    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        cur = conn.execute(text.replace("{s}", f'"{store.schema}"').encode(), params)
        return cur.fetchall() if cur.description else []


def expire(store: CheckpointStore, node_id: str) -> None:
    """Make ``node_id``'s heartbeat older than its TTL, as if it had stopped an hour ago."""
    assert isinstance(store, PostgresCheckpointStore)
    sql(
        store,
        "UPDATE {s}.nodes SET heartbeat = heartbeat - interval '1 hour' WHERE node_id = %s",
        (node_id,),
    )


def quiesce(host: AgentHost) -> None:
    """Wait until ``host``'s node has published the events queued so far. Its publisher
    marks them under a share lock on the sessions' rows, which a sweep skips (as it
    would a live owner's save); a node that is dead for good holds no such lock, so a
    test that plays a death with ``expire`` calls this first."""
    assert host.node is not None
    if host.node.events is not None:
        assert host.node.events.flush(WAIT), f"node {host.node.node_id}: events not published"


@tool
def whereami() -> str:
    """Report the step key this tool runs under (``actors.current_step()``)."""
    return str(current_step())


class Cluster:
    """Builds nodes (hosts with ``node=``) on one schema; shuts them all down at the end."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.hosts: list[AgentHost] = []
        self.stores: list[PostgresCheckpointStore] = []

    def store(self, **kwargs: Any) -> PostgresCheckpointStore:
        """A store of the cluster's own, closed at the end."""
        store = PostgresCheckpointStore(self.dsn, schema=self.schema, **kwargs)
        self.stores.append(store)
        return store

    def node(
        self,
        node_id: str,
        *,
        ttl: float = 60.0,
        chosen: AgentTemplate | Callable[[str], AgentTemplate] | None = None,
        clock: Callable[[], float] | None = None,
        events: str | None = "postgres",
        **host_options: Any,
    ) -> AgentHost:
        """A host running as ``node_id`` (address ``http://<node_id>``), taking sessions
        over on ``chosen`` (default: the tests' echo template)."""
        config = NodeConfig(
            node_id=node_id,
            address=f"http://{node_id}",
            ttl=ttl,
            template=template() if chosen is None else chosen,
            clock=time.monotonic if clock is None else clock,
            events=events,
        )
        host = AgentHost(store=self.store(), node=config, **host_options)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in self.hosts:
            host.shutdown()
        for store in self.stores:
            store.close()


FENCE_TTL = 8.0
"""A node's TTL in the fenced-node tests."""
FENCED = FENCE_TTL + 2.0
"""Seconds past which such a node has fenced itself (past ttl - margin, margin = ttl / 4)."""


def taken_over_while_fenced(
    cluster: Cluster, *, hibernated: bool = False
) -> tuple[AgentHost, AgentHost, EventWaiter]:
    """Node ``a`` (on a ``FakeClock``) ran ``s``, then fenced itself, and ``b`` took ``s``
    over and ran a turn ``a``'s copy lacks; ``a``'s copy still runs (or is hibernated).
    Returns ``a``, ``b`` and an ``EventWaiter`` subscribed to ``a``'s copy before the
    fence (a fenced node refuses ``subscribe``). The cluster fixture shuts both down."""
    clock = FakeClock()
    a = cluster.node("a", ttl=FENCE_TTL, clock=clock)
    b = cluster.node("b")
    a.start_session(template(), "s")
    a.send("s", "one")
    seen = EventWaiter()
    a.subscribe("s", seen)
    if hibernated:
        assert a.hibernate("s")
    clock.advance(FENCED)
    expire(a.store, "a")
    assert b.send("s", "two").content == "echo: two"
    return a, b, seen


class NodeProcess:
    """A ``cluster_node_worker`` process: requests over its stdin, its JSON lines collected
    by a reader thread (joined by ``close``). Every wait is bounded by ``WAIT``."""

    def __init__(
        self, dsn: str, schema: str, node_id: str, ttl: float, events: str = "postgres"
    ) -> None:
        self.node_id = node_id
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.supervisor.cluster_node_worker", dsn, schema, node_id,
             str(ttl), events],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.lines: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, name=f"read-{node_id}")
        self._reader.start()
        if not self.wait_for(lambda line: line.get("ready") == node_id):
            self.process.kill()  # no process or reader thread outlives a failed start
            self.close()
            raise AssertionError(f"node {node_id} did not start (exit code {self.process.poll()})")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            with self._cond:
                self.lines.append(json.loads(raw))
                self._cond.notify_all()

    def wait_for(self, match: Callable[[dict[str, Any]], bool], count: int = 1) -> bool:
        """Wait until ``count`` lines ``match``; False after ``WAIT`` * 2 seconds."""
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(1 for line in self.lines if match(line)) >= count, WAIT * 2
            )

    def request(self, op: str, **fields: Any) -> Any:
        """Send a request and return its value (raising ``RuntimeError`` with the node's
        error class and message if it failed)."""
        ident = next(self._ids)
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"id": ident, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        assert self.wait_for(lambda line: line.get("id") == ident), f"{op} got no answer"
        with self._cond:
            reply = next(line for line in self.lines if line.get("id") == ident)
        if not reply["ok"]:
            raise RuntimeError(f"{reply['error']}: {reply['message']}")
        return reply["value"]

    def acked(self, sid: str) -> list[str]:
        """The texts of ``sid``'s acknowledged turns so far."""
        with self._cond:
            return [line["text"] for line in self.lines if line.get("ack") == sid]

    def nacks(self) -> dict[str, str]:
        """The error class that ended each session's conversation, by session."""
        with self._cond:
            return {line["nack"]: line["error"] for line in self.lines if "nack" in line}

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def close(self) -> None:
        """End the process (quit if it still answers, else kill) and join the reader."""
        if self.process.poll() is None:  # a killed process is reaped at once
            try:
                self.request("quit")
            except (AssertionError, OSError, RuntimeError):
                self.process.kill()
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(WAIT)
        self._reader.join(WAIT)
        if self.process.stdout is not None:
            self.process.stdout.close()
