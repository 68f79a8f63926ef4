"""A call past ``worker_call_timeout`` ends even when its worker's death is never reported.

Found by a bug hunt: with ``worker_call_timeout`` no longer than a call's own timeout, the
call's deadline only kills the worker; the call then ends when the death of the worker
fails it. When that failure never came (the worker dead already, its last frames left
undelivered: see ``test_hunt15_orphans_after_death``), the call never ended: a
``futures.send`` never resolved, a blocking ``send`` never returned. Now the call fails
with ``WorkerCrashed`` a bounded time (``_KILL_GRACE``) after the kill.

Here a client stands in for a worker that never answers and whose death never comes.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import EventBuffer
from supervisor._timer import CallTimer
from supervisor.errors import WorkerCrashed
from supervisor.workers import _proxy
from supervisor.workers._client import Reply
from supervisor.workers._proxy import SessionLink
from tests.supervisor.host_helpers import WAIT

_CALL_TIMEOUT = 0.05


class SilentClient:
    """A ``WorkerClient`` stand-in: requests are never answered, ``kill`` changes nothing."""

    pid = 4242

    def __init__(self) -> None:
        self.kills = 0
        self.replies: list[Reply] = []

    def submit(
        self, op: str, payload: Any = None, on_reply: Any = None, on_done: Any = None
    ) -> Reply:
        reply = Reply(on_reply, on_done)
        self.replies.append(reply)
        return reply

    def ask(self, op: str, payload: Any = None, on_reply: Any = None, timeout: Any = None) -> Reply:
        return self.submit(op, payload, on_reply)

    def wait(self, reply: Reply, timeout: float | None = None) -> Any:
        return reply.result(timeout)

    def kill(self) -> None:
        self.kills += 1

    def release(self) -> None:
        """Settle every reply left (a test's clean-up: no thread waits on)."""
        for reply in self.replies:
            if not reply.done():
                reply._settle(None, RuntimeError("released"))


@pytest.fixture
def grace(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(_proxy, "_KILL_GRACE", 0.1)
    return 0.1


def test_a_submitted_call_fails_after_the_kill_when_no_death_comes(grace: float) -> None:
    client = SilentClient()
    link = SessionLink(client, "s1", EventBuffer(), None, _CALL_TIMEOUT)  # type: ignore[arg-type]
    timer = CallTimer("test-timer")
    outcome: list[tuple[Any, BaseException | None]] = []
    ended = threading.Event()

    def done(value: Any, error: BaseException | None) -> None:
        outcome.append((value, error))
        ended.set()

    try:
        link.submit_send("hi", None, 10 * WAIT, done, timer)
        assert ended.wait(WAIT), "the call never ended"
    finally:
        timer.close()
        client.release()
    [(value, error)] = outcome
    assert value is None
    assert isinstance(error, WorkerCrashed), repr(error)
    assert error.pid == client.pid
    assert error.session_id == "s1"
    assert "did not answer" in str(error)
    assert client.kills == 1


def test_a_blocking_call_fails_after_the_kill_when_no_death_comes(grace: float) -> None:
    client = SilentClient()
    link = SessionLink(client, "s1", EventBuffer(), None, _CALL_TIMEOUT)  # type: ignore[arg-type]
    raised: list[BaseException] = []

    def call() -> None:
        try:
            link.send("hi", None, 10 * WAIT)
        except BaseException as exc:
            raised.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        caller.join(WAIT)
        assert not caller.is_alive(), "the call never ended"
    finally:
        client.release()
        caller.join(WAIT)
    [error] = raised
    assert isinstance(error, WorkerCrashed), repr(error)
    assert error.pid == client.pid
    assert error.session_id == "s1"
    assert client.kills == 1
