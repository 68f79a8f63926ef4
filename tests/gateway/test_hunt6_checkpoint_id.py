"""``GET /v1/sessions/{id}/export?checkpoint_id=`` had no length cap: any length went to
the store's query. Past ``MAX_CHECKPOINT_ID`` characters it answers 422 naming the limit."""

from __future__ import annotations

from gateway.routes_checkpoints import MAX_CHECKPOINT_ID
from tests.gateway.conftest import Served
from tests.gateway.test_gateway import problem


def test_a_checkpoint_id_past_the_cap_answers_422(served: Served) -> None:
    key = served.keys.create("acme").key
    with served.client(key) as client:
        assert client.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        long = client.get(
            "/v1/sessions/s/export", params={"checkpoint_id": "x" * (MAX_CHECKPOINT_ID + 1)}
        )
        body = problem(long, 422, "invalid-request")  # was 404 checkpoint-not-found
        assert body["detail"] == (
            f"query.checkpoint_id: String should have at most {MAX_CHECKPOINT_ID} characters"
        )
        at_cap = client.get("/v1/sessions/s/export", params={"checkpoint_id": "x" * 256})
        problem(at_cap, 404, "checkpoint-not-found")  # the cap itself is allowed
        saved = served.host.store.list("acme/s")[0].checkpoint_id
        assert client.get("/v1/sessions/s/export", params={"checkpoint_id": saved}).is_success
    assert MAX_CHECKPOINT_ID == 256
