"""A checkpoint that cannot be read answers 500 ``checkpoint-unreadable`` without the
store's own words: they named the host's ``tenant/id`` of the session and, for a damaged
page, the path of the server's database file."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem


def _damage_newest(served: Served, internal: str) -> str:
    """Make the newest checkpoint of ``internal`` fail its checksum; its id."""
    newest = served.host.store.list(internal)[0].checkpoint_id
    with closing(sqlite3.connect(served.data_dir / "checkpoints.db")) as conn:
        (body,) = conn.execute(
            "SELECT body FROM checkpoints WHERE checkpoint_id = ?", (newest,)
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE checkpoint_id = ?", (body + b"\x00", newest)
        )
        conn.commit()
    return newest


def test_an_unreadable_checkpoint_names_no_internals(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as c:
        assert c.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        assert c.post("/v1/sessions/s/messages", json={"text": "hi"}).is_success
        assert served.host.hibernate("acme/s", tenant_id="acme")
        newest = _damage_newest(served, "acme/s")
        # (the default export skips it for the newest that loads: test_hunt5_export_damaged)
        answer = c.get("/v1/sessions/s/export", params={"checkpoint_id": newest})
        body = problem(answer, 500, "checkpoint-unreadable")
        assert body["detail"] == (
            "a checkpoint of session 's' cannot be read (damaged, or saved by a newer "
            "version); the server logged which, and why"
        )
        assert "acme" not in answer.text
        assert str(served.data_dir) not in answer.text
        # what the session comes back with: the newest checkpoint that loads
        history = c.get("/v1/sessions/s/history")
        assert history.status_code == 200, history.text
        assert [m["content"] for m in history.json()["messages"]] == ["hi", "echo: hi"]
