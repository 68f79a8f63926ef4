"""Failure tests with several host processes on one PostgreSQL database.

Each node is a ``cluster_node_worker`` process on 127.0.0.1 (TTL 1.5 s), its
sessions conversing without pause through a model that takes 20 ms, so a
signal lands mid-turn. Ownership is read back from the database itself.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.supervisor.cluster_helpers import NodeProcess
from tests.supervisor.host_helpers import poll_until

TTL = 1.5
SESSIONS = ["s0", "s1", "s2", "s3"]


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
                process.signal(signal.SIGCONT)  # a test that failed while it was stopped
            process.close()


def _rows(dsn: str, schema: str, text: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(text.replace("{s}", f'"{schema}"').encode()).fetchall()


def _owners(dsn: str, schema: str) -> dict[str, tuple[str, int]]:
    rows = _rows(dsn, schema, "SELECT session_id, owner_node, epoch FROM {s}.sessions")
    return {str(sid): (str(owner), int(str(epoch))) for sid, owner, epoch in rows}


def _no_old_epoch_after_claim(dsn: str, schema: str) -> None:
    """No checkpoint of an older epoch was written by a transaction younger than the claim
    that ended it (the claim's update waits for every save holding the fence)."""
    late = _rows(
        dsn,
        schema,
        "SELECT c.session_id, c.checkpoint_id FROM {s}.checkpoints c"
        " JOIN {s}.sessions s USING (session_id)"
        " WHERE c.epoch < s.epoch AND c.xmin::text::bigint > s.xmin::text::bigint",
    )
    assert late == []


def _start_conversing(node: NodeProcess) -> None:
    node.request("start", sids=SESSIONS)
    node.request("converse", sids=SESSIONS)
    for sid in SESSIONS:
        assert node.wait_for(functools.partial(_is_ack, sid), count=3)


def _is_ack(sid: str, line: dict[str, object]) -> bool:
    return line.get("ack") == sid


def _taken_over_by(node: NodeProcess, dsn: str, schema: str) -> bool:
    owners = _owners(dsn, schema)
    leases = node.request("status")["leases"]
    return all(owners.get(sid, ("", 0))[0] == node.node_id for sid in SESSIONS) and all(
        sid in leases for sid in SESSIONS
    )


def test_a_killed_nodes_sessions_resume_on_another_with_every_acknowledged_turn(
    nodes: dict[str, NodeProcess], pg_dsn: str, pg_schema: str
) -> None:
    a, b = nodes["a"], nodes["b"]
    _start_conversing(a)
    a.signal(signal.SIGKILL)
    killed = time.monotonic()
    a.process.wait(5)
    assert poll_until(lambda: _taken_over_by(b, pg_dsn, pg_schema), timeout=TTL + 8)
    assert poll_until(lambda: b.request("status")["sessions"] == SESSIONS)  # and resumed
    took = time.monotonic() - killed
    assert took < TTL + 3.0, f"takeover took {took:.2f} s"
    _no_old_epoch_after_claim(pg_dsn, pg_schema)
    for sid in SESSIONS:
        history = b.request("history", sid=sid)
        missing = [text for text in a.acked(sid) if text not in history]
        assert missing == [], f"{sid}: acknowledged turns lost"
        assert b.request("send", sid=sid, text="after") == "echo: after"
    assert all(epoch == 2 for _, epoch in _owners(pg_dsn, pg_schema).values())


def test_a_frozen_node_fences_itself_and_every_late_save_is_refused(
    nodes: dict[str, NodeProcess], pg_dsn: str, pg_schema: str
) -> None:
    a, b = nodes["a"], nodes["b"]
    _start_conversing(a)
    a.signal(signal.SIGSTOP)
    assert poll_until(lambda: _taken_over_by(b, pg_dsn, pg_schema), timeout=TTL + 8)
    for sid in SESSIONS:  # the new owner moves on: checkpoints of epoch 2
        assert b.request("send", sid=sid, text=f"{sid} on b") == f"echo: {sid} on b"
    a.signal(signal.SIGCONT)
    # Every conversation on a ends with a refusal: the turn in flight has its checkpoint
    # refused (OwnershipLost), or the next one is refused by the fence or by the owner.
    assert a.wait_for(lambda line: "nack" in line, count=len(SESSIONS))
    assert set(a.nacks()) == set(SESSIONS)
    assert set(a.nacks().values()) <= {"OwnershipLost", "NodeFenced", "SessionOwnedElsewhere"}
    assert poll_until(lambda: a.request("status")["sessions"] == [])
    status = a.request("status")
    assert status["leases"] == {}
    _no_old_epoch_after_claim(pg_dsn, pg_schema)
    for sid in SESSIONS:  # no answer a gave after the move: every ack of a is in b's history
        history = b.request("history", sid=sid)
        missing = [text for text in a.acked(sid) if text not in history]
        assert missing == [], f"{sid}: a acknowledged turns the new owner does not have"
        assert history[-1] == f"{sid} on b"
    with pytest.raises(RuntimeError, match=r"SessionOwnedElsewhere.*node 'b'"):
        a.request("send", sid="s0", text="late")
