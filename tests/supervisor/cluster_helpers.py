"""Hosts as nodes of one cluster, in this process, for the cluster tests.

Every node gets a ``PostgresCheckpointStore`` of its own on the test's schema,
as a separate process would. A node's heartbeat is made stale in the database
(``expire``) rather than by waiting out its TTL, so a test decides exactly
when another node may claim its sessions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors import AgentTemplate, StepKey, current_step, tool
from supervisor import AgentHost, CheckpointStore, PostgresCheckpointStore
from supervisor.cluster import NodeConfig
from tests.supervisor.host_helpers import template

__all__ = ["Cluster", "FakeClock", "StepLog", "expire", "sql"]


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


@dataclass
class StepLog:
    """A tool recording the ``current_step()`` it ran under, in this process."""

    seen: list[StepKey | None] = field(default_factory=list)

    def template(self) -> AgentTemplate:
        def whereami() -> str:
            """Report the step key."""
            key = current_step()
            self.seen.append(key)
            return str(key)

        return template(tools=(tool(whereami),))


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
        )
        host = AgentHost(store=self.store(), node=config, **host_options)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in self.hosts:
            host.shutdown()
        for store in self.stores:
            store.close()
