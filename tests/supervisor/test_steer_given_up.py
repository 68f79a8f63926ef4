"""Steering a session given up after repeated crashes raises ``SessionFailed``, as a send to
it does, in every form of the call; before, the text was queued for a model call that
would never come, and dropped when the session was resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from supervisor import AsyncAgentHost, SessionFailed
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import WAIT, HostFactory, Journal, template, watch_events


def test_steering_a_given_up_session_fails_like_a_send(
    make_host: HostFactory, tmp_path: Path
) -> None:
    journal = Journal(tmp_path)
    host = make_host(clock=FakeClock(), max_restarts=1, max_seconds=5.0)
    sid = host.start_session(template(journal), "doomed")
    host.send(sid, "hello")
    waiter = watch_events(host, sid)
    journal.broken = True
    host.kill(sid)
    waiter.wait_for("given_up")

    with pytest.raises(SessionFailed, match="doomed") as blocking:
        host.steer(sid, "are you there?")
    assert "journal cannot be reopened" in str(blocking.value)
    with pytest.raises(SessionFailed, match="doomed"):
        host.futures.steer(sid, "are you there?").result(WAIT)
    with pytest.raises(SessionFailed, match="doomed"):
        asyncio.run(AsyncAgentHost(host).steer(sid, "are you there?"))

    journal.broken = False
    assert host.resume(sid, template(journal)) == sid
    host.steer(sid, "be brief")  # a resumed session takes steering again
    host.send(sid, "back")
    texts = [m.content for m in host.history(sid) if m.role == "user"]
    assert texts.count("be brief") == 1
    assert "are you there?" not in texts
