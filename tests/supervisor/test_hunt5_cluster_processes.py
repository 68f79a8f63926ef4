"""Hunt 5: nodes in separate processes handing sessions over when one shuts down.

Each node is a ``cluster_node_worker`` process (``cluster_helpers.NodeProcess``)
on the test's own schema, with a TTL far longer than any wait here: whatever
moves, moves because the node drained, never because its lease lapsed.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Iterator

import psycopg
import pytest

from tests.supervisor.cluster_helpers import NodeProcess
from tests.supervisor.host_helpers import WAIT, poll_until

TTL = 60.0  # a sweep every TTL / 8 = 7.5 s, a lease lapse after a minute
SESSIONS = ["s0", "s1", "s2"]


@pytest.fixture
def nodes(pg_dsn: str, pg_schema: str) -> Iterator[dict[str, NodeProcess]]:
    started: dict[str, NodeProcess] = {}
    try:
        for node_id in ("a", "b"):
            started[node_id] = NodeProcess(pg_dsn, pg_schema, node_id, TTL)
        yield started
    finally:
        for process in started.values():
            if process.process.poll() is None:
                process.signal(signal.SIGCONT)
            process.close()


def _owners(dsn: str, schema: str) -> dict[str, str | None]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT session_id, owner_node FROM "{schema}".sessions'.encode()
        ).fetchall()
    return {str(sid): None if owner is None else str(owner) for sid, owner in rows}


def _is_ack(sid: str, line: dict[str, object]) -> bool:
    return line.get("ack") == sid


def test_a_node_that_shuts_down_mid_conversation_hands_every_acknowledged_turn_over(
    nodes: dict[str, NodeProcess], pg_dsn: str, pg_schema: str
) -> None:
    a, b = nodes["a"], nodes["b"]
    a.request("start", sids=SESSIONS)
    a.request("converse", sids=SESSIONS)
    for sid in SESSIONS:
        assert a.wait_for(functools.partial(_is_ack, sid), count=3)
    assert b.request("answer", sids=SESSIONS, text="from b") == ["a"] * len(SESSIONS)
    a.request("quit")  # final checkpoints, then the drain: no TTL to wait out
    a.process.wait(WAIT)
    assert a.wait_for(lambda line: "nack" in line, count=len(SESSIONS))
    assert poll_until(
        lambda: sorted(b.request("status")["sessions"]) == SESSIONS, timeout=TTL / 8 + WAIT
    ), "b did not take the drained sessions over at its next sweep"
    assert set(_owners(pg_dsn, pg_schema).values()) == {"b"}
    for sid in SESSIONS:
        history = b.request("history", sid=sid)
        missing = [text for text in a.acked(sid) if text not in history]
        assert missing == [], f"{sid}: turns a acknowledged are not on b"
        assert b.request("send", sid=sid, text="after") == "echo: after"
