"""``GET /v1/sessions/{id}/export`` of a session whose newest checkpoint is damaged exports
the newest one that loads, the one the session comes back from (as ``/history`` reads it);
a damaged checkpoint named by ``checkpoint_id``, or every checkpoint damaged, answers 500
``checkpoint-unreadable``."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem


def _damage(served: Served, checkpoint_id: str) -> None:
    """Make the checkpoint ``checkpoint_id`` fail its checksum."""
    with closing(sqlite3.connect(served.data_dir / "checkpoints.db")) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?",
            (body + b"\x00", checkpoint_id),
        )
        conn.commit()


def _session_with_a_turn(served: Served, *, hibernate: bool) -> tuple[str, list[str]]:
    """Session ``s`` of tenant ``acme`` after one turn; its key and checkpoint ids."""
    key = served.keys.create("acme").key
    with served.client(key) as c:
        assert c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        assert c.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
    if hibernate:
        assert served.host.hibernate("acme/s", tenant_id="acme")
    return key, [i.checkpoint_id for i in served.host.store.list("acme/s")]


def test_a_hibernated_session_exports_the_checkpoint_it_comes_back_from(served: Served) -> None:
    key, (newest, good, *_) = _session_with_a_turn(served, hibernate=True)
    _damage(served, newest)
    with served.client(key) as c:
        exported = c.get("/v1/sessions/s/export")
        assert exported.status_code == 200, exported.text
        body = exported.json()
        assert (body["session_id"], body["checkpoint_id"]) == ("s", good)
        assert [m["content"] for m in body["state"]["messages"]] == ["hi", "echo: hi"]
        history = c.get("/v1/sessions/s/history").json()["messages"]
        assert [m["content"] for m in history] == ["hi", "echo: hi"]  # the same conversation
        named = c.get("/v1/sessions/s/export", params={"checkpoint_id": newest})
        problem(named, 500, "checkpoint-unreadable")  # asked for by id: no other one
        older = c.get("/v1/sessions/s/export", params={"checkpoint_id": good})
        assert older.json() == body


def test_an_active_session_exports_its_newest_checkpoint_that_loads(served: Served) -> None:
    key, (newest, good, *_) = _session_with_a_turn(served, hibernate=False)
    _damage(served, newest)
    with served.client(key) as c:
        exported = c.get("/v1/sessions/s/export")
    assert exported.status_code == 200, exported.text
    assert exported.json()["checkpoint_id"] == good


def test_every_checkpoint_damaged_answers_unreadable_naming_the_session(served: Served) -> None:
    key, ids = _session_with_a_turn(served, hibernate=True)
    for checkpoint_id in ids:
        _damage(served, checkpoint_id)
    detail = (
        "a checkpoint of session 's' cannot be read (damaged, or saved by a newer version); "
        "the server logged which, and why"
    )
    with served.client(key) as c:
        for answer in (
            c.get("/v1/sessions/s/export"),
            c.get("/v1/sessions/s/history"),
            c.post("/v1/sessions/s/messages", json={"text": "again"}),  # (said "the session")
        ):
            assert problem(answer, 500, "checkpoint-unreadable")["detail"] == detail
        streamed = c.post("/v1/sessions/s/messages", json={"text": "again", "stream": True})
    assert streamed.status_code == 200, streamed.text
    error = streamed.text.strip().split("\n\n")[-1]
    assert error.startswith("event: error\n"), streamed.text
    assert json.loads(error.partition("data: ")[2])["detail"] == detail
