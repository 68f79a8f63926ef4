"""A subscriber's ``SystemExit`` ends its own session only, in process mode as in thread mode.

Found by a bug hunt: in process mode a subscriber runs on the thread delivering the
session's frames. A ``SystemExit`` it raised escaped ``WorkerClient._push`` (which caught
``Exception`` only): on the pipe's reader thread it ended that thread, the worker was
killed, and every session of the worker crashed; the call whose events were being
delivered was never answered. In thread mode the exit ends the subscriber's session
alone (``actors._loop``): the call fails with ``SessionCrashed``, the session is restarted
from its last checkpoint, other sessions are untouched.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from actors import Event
from supervisor import AgentHost, SessionCrashed
from tests.supervisor.host_helpers import MODES, WAIT, HostFactory, template, watch_events


class ExitsOnce:
    """A subscriber that raises ``SystemExit`` on the first event of ``type_`` for a turn
    whose text is ``"exit"``; records the thread it raised on."""

    def __init__(self, type_: str) -> None:
        self.type = type_
        self.armed = True
        self.thread: threading.Thread | None = None
        self._exiting = False

    def __call__(self, event: Event) -> None:
        if event.type == "turn_started":
            self._exiting = event.data.get("text") == "exit"
        if self.armed and self._exiting and event.type == self.type:
            self.armed = False
            self.thread = threading.current_thread()
            raise SystemExit("a subscriber gave up")


def _worker_pids(host: AgentHost) -> set[int | None]:
    return {w.pid for w in host.workers()}


def _send_error(host: AgentHost, sid: str, via: str) -> BaseException | None:
    """What sending ``"exit"`` to ``sid`` raised (``via`` a future, or a blocking call)."""
    if via == "futures":
        call = host.futures.send(sid, "exit", timeout=4 * WAIT)
        return call.exception(WAIT)  # (TimeoutError if the call is not answered by then)
    try:
        host.send(sid, "exit", timeout=WAIT)
    except SessionCrashed as exc:
        return exc
    return None


def _user_texts(host: AgentHost, sid: str) -> list[str]:
    return [m.content or "" for m in host.history(sid) if m.role == "user"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("event_type", ["turn_started", "turn_finished"])
@pytest.mark.parametrize("via", ["futures", "blocking"])
def test_a_subscribers_exit_crashes_its_session_only(
    make_host: HostFactory, mode: str, event_type: str, via: str
) -> None:
    """``futures.send``: the reply is delivered off the caller's thread (the pipe's reader
    thread, in process mode); a blocking ``send``: usually on the caller's (the main
    thread, where the exit was raised on to the caller). ``turn_started`` comes with the
    reply's events; ``turn_finished`` is published once the turn's checkpoint is saved."""
    options: dict[str, Any] = {}
    if mode != "thread":  # one worker: both sessions on it
        options = {"workers": 1, "worker_call_timeout": 4 * WAIT}
    host = make_host(**options)
    sid = host.start_session(template())
    other = host.start_session(template())
    host.send(sid, "kept", timeout=WAIT)
    pids = _worker_pids(host)
    waiter = watch_events(host, sid)
    exits = ExitsOnce(event_type)
    host.subscribe(sid, exits)

    error = _send_error(host, sid, via)
    assert isinstance(error, SessionCrashed), repr(error)
    assert exits.thread is not None
    assert not exits.armed
    crashed = waiter.wait_for("crashed")
    if mode != "thread":  # where it ended: on the host, not in the worker
        assert "died on the host, delivering worker pid" in crashed.data["reason"]
    waiter.wait_for("resumed")
    # The other session of the worker never noticed: same worker, answers at once.
    assert host.send(other, "still here", timeout=WAIT).content == "echo: still here"
    assert _worker_pids(host) == pids
    assert host.send(sid, "again", timeout=WAIT).content == "echo: again"
    kept = _user_texts(host, sid)
    assert kept[0] == "kept"
    assert kept[-1] == "again"
    if event_type == "turn_started":  # the turn's checkpoint was not saved
        assert "exit" not in kept
