"""Hunt 10: a create of one session id racing, on two cluster nodes, with another create or
with a delete of it.

A gateway's per-id lock (``Gateway.id_lock``) is per node, so the two requests'
steps interleave. The claim in the cluster's database picks the one create that
runs (the other answers 409 ``session-exists``, as on one node), but the loser of a
create, and a delete whose session was created anew meanwhile, then dropped the
session's record (its template) from under the session that runs: it was listed
without its template, and no node could take it over when its owner died.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gateway._context import host_id
from supervisor import SessionNotFound
from tests.gateway.cluster_nodes import WAIT, Nodes, created
from tests.supervisor.host_helpers import poll_until


def _pausing(
    method: Callable[..., Any], reached: threading.Event, go: threading.Event, *, after: bool
) -> Callable[..., Any]:
    """``method`` that, before (or ``after``) it runs, sets ``reached`` and waits for ``go``."""

    def paused(*args: Any) -> Any:
        if not after:
            reached.set()
            assert go.wait(WAIT), "the test never let it go on"
        result = method(*args)
        if after:
            reached.set()
            assert go.wait(WAIT), "the test never let it go on"
        return result

    return paused


def test_the_loser_of_two_creates_of_one_id_leaves_the_winners_record(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    reserved, go = threading.Event(), threading.Event()
    # b records the id first, then waits while a's create of the same id runs through
    monkeypatch.setattr(
        b.keys, "reserve_session", _pausing(b.keys.reserve_session, reserved, go, after=True)
    )
    body = {"template": "echo", "session_id": "s", "metadata": {"by": "b"}}
    with ThreadPoolExecutor(1) as pool, b.client(key) as via_b:
        losing = pool.submit(via_b.post, "/v1/sessions", json=body)
        try:
            assert reserved.wait(WAIT)
            won = created(a, key, "s")
        finally:
            go.set()
        lost = losing.result(timeout=WAIT)

    assert won["status"] == "active"
    assert lost.status_code == 409, lost.text
    assert lost.json()["type"] == "/problems/session-exists"
    record = a.keys.session_row(host_id("acme", "s"))
    assert record is not None, "the winner's session lost its record"
    assert record.template == "echo"
    with b.client(key) as client:
        answer = client.get("/v1/sessions/s")  # forwarded to a, the owner
    assert answer.status_code == 200, answer.text
    assert answer.json()["template"] == "echo"


def test_a_delete_racing_a_new_create_of_the_id_on_another_node_keeps_the_new_record(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    created(a, key, "s")
    forgetting, go = threading.Event(), threading.Event()
    # a's delete has stopped the session and deleted its checkpoints; it waits before it
    # drops the record, while b creates the id anew
    monkeypatch.setattr(
        a.keys, "forget_session", _pausing(a.keys.forget_session, forgetting, go, after=False)
    )
    with ThreadPoolExecutor(1) as pool, a.client(key) as via_a:
        deleting = pool.submit(via_a.delete, "/v1/sessions/s")
        try:
            assert forgetting.wait(WAIT)
            again = created(b, key, "s")
        finally:
            go.set()
        deleted = deleting.result(timeout=WAIT)

    assert deleted.status_code == 204, deleted.text
    assert again["status"] == "active"
    record = a.keys.session_row(host_id("acme", "s"))
    assert record is not None, "the delete dropped the record of the session created after it"
    with a.client(key) as client:
        answer = client.get("/v1/sessions/s")  # forwarded to b, the new owner
    assert answer.status_code == 200, answer.text
    assert answer.json()["template"] == "echo"
    assert answer.headers["x-sessionvisor-node"] == "b"


def test_a_request_on_another_node_during_a_create_does_not_take_the_id(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request for the id reaching another node while the create has recorded it but not
    claimed it yet: that node found no owner and took the id over (a claim) to resume it,
    found no checkpoint, answered 404, and kept the claim, so the create (and every retry
    of it, while that node lived) answered 409 ``session-exists`` for a session that
    existed nowhere."""
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    reserved, go = threading.Event(), threading.Event()
    monkeypatch.setattr(
        a.keys, "reserve_session", _pausing(a.keys.reserve_session, reserved, go, after=True)
    )
    with ThreadPoolExecutor(1) as pool, a.client(key) as via_a:
        creating = pool.submit(
            via_a.post, "/v1/sessions", json={"template": "echo", "session_id": "s"}
        )
        try:
            assert reserved.wait(WAIT)
            with b.client(key) as client:
                early = client.get("/v1/sessions/s")
        finally:
            go.set()
        made = creating.result(timeout=WAIT)

    assert early.status_code == 404, early.text
    assert made.status_code == 201, made.text
    assert b.host.node is not None
    assert b.host.node.leases() == {}
    with b.client(key) as client:
        answer = client.post("/v1/sessions/s/messages", json={"text": "hi"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-sessionvisor-node"] == "a"


def test_a_lookup_on_another_node_during_a_create_claims_nothing(
    nodes: Nodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, past the routing: the host's own take-over of an id it does not have
    (``AgentHost.history`` of a session it lacks, say) claimed the recorded id, found no
    checkpoint and released it; a create claiming in between answered 409."""
    a, b = nodes.start("a"), nodes.start("b")
    key = a.keys.create("acme").key
    reserved, go = threading.Event(), threading.Event()
    monkeypatch.setattr(
        a.keys, "reserve_session", _pausing(a.keys.reserve_session, reserved, go, after=True)
    )
    node_b = b.host.node
    assert node_b is not None
    claimed, release = threading.Event(), threading.Event()
    monkeypatch.setattr(node_b, "claim", _pausing(node_b.claim, claimed, release, after=True))
    with ThreadPoolExecutor(2) as pool, a.client(key) as via_a:
        creating = pool.submit(
            via_a.post, "/v1/sessions", json={"template": "echo", "session_id": "s"}
        )
        try:
            assert reserved.wait(WAIT)
            looking = pool.submit(b.host.history, host_id("acme", "s"))
            assert poll_until(lambda: claimed.is_set() or looking.done(), WAIT)
            go.set()  # the create claims now: while b holds its claim, if it made one
            made = creating.result(timeout=WAIT)
        finally:
            go.set()
            release.set()
        with pytest.raises(SessionNotFound):
            looking.result(timeout=WAIT)

    assert not claimed.is_set(), "b claimed an id that had nothing to take over"
    assert made.status_code == 201, made.text
