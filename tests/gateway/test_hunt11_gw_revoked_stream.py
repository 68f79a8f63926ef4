"""Hunt 11: an open ``/events`` stream of a key revoked meanwhile ends, with an ``error``
frame of the 401 problem, within ``Limits.key_check_s``: a stream lasts as long as its
session, and the revoked key kept receiving the session's events."""

from __future__ import annotations

import threading
import time

import pytest

from gateway import Limits
from gateway.keys import ApiKey
from tests.gateway.conftest import Served
from tests.gateway.test_gateway import sse


@pytest.fixture
def limits() -> Limits:
    return Limits(key_check_s=0.2)


def test_a_revoked_keys_open_event_stream_ends_with_a_401_error_frame(served: Served) -> None:
    made = served.keys.create("acme")
    with served.client(made.key) as client:
        assert client.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        assert client.post("/v1/sessions/s/messages", json={"text": "hi"}).status_code == 200
        with client.stream("GET", "/v1/sessions/s/events", params={"since": "0"}) as events:
            assert events.status_code == 200
            lines = events.iter_lines()
            assert next(lines) == "id: 1"  # the stream runs
            served.keys.revoke(made.info.key_id)
            revoked_at = time.monotonic()
            rest = "\n".join(lines)  # to the end of the answer (the client's read timeout: 10 s)
            ended_after = time.monotonic() - revoked_at
        last_event, last_data, last_id = sse(rest)[-1]
    assert (last_event, last_id) == ("error", None)
    assert last_data == {
        "status": 401,
        "type": "/problems/unauthorized",
        "detail": "the API key was revoked (or is unknown) while this stream was open; "
        "use a valid key",
        "title": "Unauthorized",
        "retryable": False,
    }
    assert ended_after < 5.0  # key_check_s is 0.2 s: bounded, not "when the session ends"


def test_a_valid_keys_stream_keeps_going_across_key_checks(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = served.keys.create("acme")
    checks: list[bool] = []
    checked_thrice = threading.Event()
    authenticate = served.keys.authenticate

    def counted(key: str) -> ApiKey | None:
        found = authenticate(key)
        checks.append(found is not None)
        if len(checks) >= 3:
            checked_thrice.set()
        return found

    with served.client(made.key) as client:
        assert client.post("/v1/sessions", json={"template": "echo", "session_id": "s"}).is_success
        with client.stream("GET", "/v1/sessions/s/events") as events:
            assert events.status_code == 200
            monkeypatch.setattr(served.keys, "authenticate", counted)
            assert checked_thrice.wait(10), "the open stream's key was not checked again"
            lines = events.iter_lines()
            with served.client(made.key) as other:
                sent = other.post("/v1/sessions/s/messages", json={"text": "hi"})
                assert sent.status_code == 200, sent.text
            assert next(lines) == "id: 1"  # events still arrive after the checks
    assert all(checks)
