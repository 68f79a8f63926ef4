"""The routes read and write the key store's session records (a database: SQLite here,
PostgreSQL in a cluster) off the server's event loop, so a slow database holds up the
request that asked, not every request the server has in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway import KeyStore, Limits, load_templates
from gateway.keys import RememberedSession
from supervisor import AgentHost
from tests.gateway.conftest import TEMPLATES, serving


class WatchedKeys(KeyStore):
    """A ``KeyStore`` noting each session-record call, and which of them ran on an event
    loop's thread (where ``asyncio.get_running_loop`` answers)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.calls: list[str] = []
        self.on_loop: list[str] = []

    def _note(self, name: str) -> None:
        self.calls.append(name)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread: what is wanted
            return
        self.on_loop.append(name)

    def session_row(self, session_id: str) -> RememberedSession | None:
        self._note("session_row")
        return super().session_row(session_id)

    def forget_session(self, session_id: str) -> None:
        self._note("forget_session")
        super().forget_session(session_id)


def test_session_records_are_read_and_dropped_off_the_event_loop(tmp_path: Path) -> None:
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    keys = WatchedKeys(tmp_path)
    with serving(host, load_templates(TEMPLATES), tmp_path, Limits(), keys) as served:
        with served.client(keys.create("acme").key) as client:
            created = client.post("/v1/sessions", json={"template": "echo", "session_id": "s1"})
            assert created.status_code == 201, created.text
            assert client.get("/v1/sessions/s1").json()["template"] == "echo"
            assert client.delete("/v1/sessions/s1").status_code == 204
            assert client.get("/v1/sessions/s1").status_code == 404
    assert {"session_row", "forget_session"} <= set(keys.calls)
    assert keys.on_loop == []
