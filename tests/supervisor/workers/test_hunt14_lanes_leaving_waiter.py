"""A frame of a session is delivered even when the thread woken to deliver it was leaving.

``WorkerClient`` hands a frame nobody delivers yet to a thread parked for a reply of the
frame's session (it delivers that session's frames), and only when there is none to the
reader thread or the helper thread. A parked thread whose own reply had just been
settled (or whose wait had just run out) still counted as such a thread until it got
the processor back: it was woken for the frame, found its own call over and left, and
the frame stayed queued with nobody to deliver it. A non-blocking call's completion
(``host.futures.send``, ``AsyncAgentHost.send``) or a session's ``down`` then never
came, and the session stayed busy until ``call_timeout``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from supervisor.workers._client import Reply, WorkerClient
from supervisor.workers._lanes import Parked
from supervisor.workers._pool import _default_context
from tests.supervisor.host_helpers import WAIT


def _ignore(*_args: object) -> None:
    return None


class _Interleaving:
    """Hooks holding the threads of the test at the points where the race happens."""

    def __init__(self) -> None:
        self.waiter: int | None = None  # the thread whose wake-up is held
        self.parked = threading.Event()  # it sleeps, its reply in a lane another delivers
        self.woken = threading.Event()  # its reply is settled; it is held before it leaves
        self.go = threading.Event()  # let it leave
        self.delivering = threading.Event()  # the reader thread delivers the first reply
        self.release = threading.Event()  # let it deliver on
        self.late: Reply | None = None  # the reply read while the waiter is held
        self.late_queued = threading.Event()  # that reply was read and queued (or delivered)

    def slow(self, value: Any) -> Any:
        """The first reply's ``on_reply``: the reader thread holds its session's lane here."""
        self.delivering.set()
        self.release.wait(WAIT)
        return value


@pytest.fixture
def interleaving(monkeypatch: pytest.MonkeyPatch) -> _Interleaving:
    hooks = _Interleaving()
    wait = Parked.wait
    dispatch = WorkerClient._dispatch

    def held_wait(self: Parked, timeout: float | None) -> None:
        if self.ident == hooks.waiter:
            hooks.parked.set()
        wait(self, timeout)
        if self.ident == hooks.waiter and self.reply.done() and not hooks.woken.is_set():
            hooks.woken.set()
            hooks.go.wait(WAIT)

    def noted_dispatch(self: WorkerClient, frame: dict[str, Any], *args: Any, **kw: Any) -> None:
        dispatch(self, frame, *args, **kw)
        if hooks.late is not None and frame.get("id") == hooks.late._id:
            hooks.late_queued.set()

    monkeypatch.setattr(Parked, "wait", held_wait)
    monkeypatch.setattr(WorkerClient, "_dispatch", noted_dispatch)
    return hooks


def test_a_reply_read_while_its_sessions_woken_waiter_leaves_is_delivered(
    interleaving: _Interleaving,
) -> None:
    hooks = interleaving
    client = WorkerClient(_default_context(), _ignore, _ignore)
    answers: list[Any] = []
    try:
        assert client.wait_ready(WAIT)
        # The reader thread delivers a reply of session s0, slowly (its lane is the reader's).
        first = client.submit("unload_template", {"key": "a", "session": "s0"}, hooks.slow)
        assert hooks.delivering.wait(WAIT)

        def waiter() -> None:
            hooks.waiter = threading.get_ident()
            answers.append(client.call("unload_template", {"key": "w", "session": "s0"}, WAIT))

        thread = threading.Thread(target=waiter)
        thread.start()
        # Its reply is read, and waits in the lane the reader thread delivers: it sleeps.
        assert hooks.parked.wait(WAIT)
        hooks.release.set()
        # The reader thread settles its reply (it is woken), empties the lane and reads on.
        assert hooks.woken.wait(WAIT)
        hooks.late = client.submit("unload_template", {"key": "b", "session": "s0"})
        # The next reply of s0 is read while the waiter, settled, has not left yet.
        assert hooks.late_queued.wait(WAIT)
        hooks.go.set()
        thread.join(WAIT)

        assert answers == [None]
        assert first.result(WAIT) is None
        assert hooks.late.result(WAIT) is None  # it was left undelivered: TimeoutError
        assert client.call("unload_template", {"key": "c", "session": "s0"}, WAIT) is None
    finally:
        hooks.release.set()
        hooks.go.set()
        client.shutdown()
