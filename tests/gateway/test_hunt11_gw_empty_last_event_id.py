"""Hunt 11: an empty ``Last-Event-ID`` (a browser's ``EventSource`` sends one when no frame
it got had an id) is no cursor: the stream starts as without it, where it answered 400."""

from __future__ import annotations

from tests.gateway.conftest import Served


def test_empty_last_event_id_is_treated_as_absent(served: Served) -> None:
    with served.client(served.keys.create("acme").key) as client:
        assert client.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        sent = client.post("/v1/sessions/s/messages", json={"text": "hi"})
        assert sent.status_code == 200, sent.text
        headers = {"Last-Event-ID": ""}
        params = {"since": "0"}  # with the empty header ignored, the query's cursor counts
        with client.stream("GET", "/v1/sessions/s/events", headers=headers, params=params) as got:
            assert got.status_code == 200
            first = next(got.iter_lines())
        assert first == "id: 1"
        with client.stream("GET", "/v1/sessions/s/events", headers=headers) as live:
            assert live.status_code == 200
            assert live.headers["content-type"].startswith("text/event-stream")
