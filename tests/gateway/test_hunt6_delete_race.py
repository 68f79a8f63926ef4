"""A DELETE racing a create of the same id left a running session with no key store
record: the create started its session after the delete's stop and checkpoint deletion,
and the delete then dropped the record (now the new session's). Unrecorded, the session
counted against no limit and lost its template on a restart. A create and a delete of one
id now run one after the other."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from gateway import KeyStore, Limits, load_templates
from gateway.keys import Reservation
from supervisor import AgentHost
from tests.gateway.conftest import TEMPLATES, serving

WAIT = 10.0


class GatedKeys(KeyStore):
    """A ``KeyStore`` whose ``forget_session``, once armed, says it started and waits for
    ``release``; ``reserving`` is set at each ``reserve_session`` made while armed."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.armed = False
        self.forgetting = threading.Event()
        self.release = threading.Event()
        self.reserving = threading.Event()

    def forget_session(self, session_id: str) -> None:
        if self.armed:
            self.forgetting.set()
            assert self.release.wait(WAIT)
        super().forget_session(session_id)

    def reserve_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str, limit: int
    ) -> Reservation:
        if self.armed:
            self.reserving.set()
        return super().reserve_session(session_id, tenant_id, template, metadata_json, limit)


def test_a_create_racing_a_delete_of_its_id_keeps_its_record(tmp_path: Path) -> None:
    host = AgentHost(data_dir=tmp_path, call_timeout=10)
    keys = GatedKeys(tmp_path)
    body = {"template": "echo", "session_id": "s"}
    with (
        serving(host, load_templates(TEMPLATES), tmp_path, Limits(), keys) as served,
        ThreadPoolExecutor(2) as pool,
    ):
        key = keys.create("acme").key

        def call(method: str) -> httpx.Response:
            with served.client(key) as client:
                if method == "DELETE":
                    return client.delete("/v1/sessions/s")
                return client.post("/v1/sessions", json=body)

        assert call("POST").status_code == 201
        keys.armed = True
        deleted = pool.submit(call, "DELETE")
        assert keys.forgetting.wait(WAIT)  # stopped, checkpoints deleted, record next
        created = pool.submit(call, "POST")
        # Unfixed, the create runs now, to its answer; fixed, it waits for the delete (no
        # reserve comes, and the bounded wait passes): either way the delete goes on.
        if keys.reserving.wait(1.0):
            created.result(WAIT)
        keys.release.set()
        assert deleted.result(WAIT).status_code == 204
        answer = created.result(WAIT)
        assert answer.status_code == 201, answer.text  # after the delete: a new session
        keys.armed = False
        assert host.session_info("acme/s", tenant_id="acme").status == "active"
        row = keys.session_row("acme/s")
        assert row is not None  # was None: a session running unrecorded
        assert row.template == "echo"
        assert [i.label for i in host.store.list("acme/s")] != []  # its checkpoint kept
        with served.client(key) as client:
            listed = client.get("/v1/sessions").json()["sessions"]
        assert [(s["session_id"], s["template"]) for s in listed] == [("s", "echo")]
