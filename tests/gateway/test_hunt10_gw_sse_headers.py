"""Hunt 10: every SSE answer (``/events``, a streamed send) says ``Cache-Control: no-cache``
and ``X-Accel-Buffering: no``: without them nginx, the usual reverse proxy, buffers the
answer, so a client behind it got the frames in bursts, or only once the turn ended."""

from __future__ import annotations

from tests.gateway.conftest import Served
from tests.gateway.test_gateway import sse

SSE = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def test_both_event_streams_ask_proxies_and_caches_to_pass_frames_on(served: Served) -> None:
    with served.client(served.keys.create("acme").key) as client:
        assert client.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        sent = client.post("/v1/sessions/s/messages", json={"text": "hi", "stream": True})
        assert sent.status_code == 200, sent.text
        assert [name for name, _, _ in sse(sent.text)][-1] == "answer"
        with client.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as events:
            assert events.status_code == 200
            headers = dict(events.headers)
            first = next(events.iter_lines())
    assert first == "id: 1"
    for answer in (dict(sent.headers), headers):
        assert answer["content-type"].startswith("text/event-stream")
        assert {name: answer.get(name) for name in SSE} == SSE
