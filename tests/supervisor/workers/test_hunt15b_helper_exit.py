"""The delivery threads of a worker's pipe outlive a ``SystemExit`` raised delivering a frame.

Found by a bug hunt: a ``BaseException`` out of ``on_push`` (an event subscriber's
``SystemExit``) ended the thread delivering the frame. On the helper thread (it delivers
the lanes of frames nobody else delivers) that left ``_helper`` set on a thread that was
gone: lanes left without a deliverer later were never delivered (a session's events, a
non-blocking call's completion, a session's ``down``) until the worker died. Now the exit
ends the frame's session alone (``on_push`` gets a ``down`` of it) and the thread goes on.

The lanes are filled here directly: which thread delivers a frame read off a real pipe
depends on timing.
"""

from __future__ import annotations

import threading
from typing import Any

from supervisor.workers._client import WorkerClient
from supervisor.workers._lanes import Lane
from supervisor.workers._pool import _default_context
from tests.supervisor.host_helpers import WAIT


class Pushes:
    """An ``on_push`` recording what it gets; it raises ``SystemExit`` on an ``exit`` event."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.frames: list[tuple[str, Any, Any]] = []

    def __call__(self, _client: WorkerClient, frame: dict[str, Any]) -> None:
        with self.cond:
            self.frames.append((threading.current_thread().name, frame.get("op"), frame))
            self.cond.notify_all()
        if frame.get("type") == "exit":
            raise SystemExit("a subscriber gave up")

    def wait_for(self, op: str, session: str) -> tuple[str, dict[str, Any]]:
        """The thread that pushed the first ``op`` frame of ``session``, and the frame."""

        def found() -> tuple[str, dict[str, Any]] | None:
            return next(
                ((t, f) for t, o, f in self.frames if o == op and f.get("session") == session),
                None,
            )

        with self.cond:
            assert self.cond.wait_for(lambda: found() is not None, WAIT), self.frames
            result = found()
        assert result is not None
        return result


def _ignore(*_args: object) -> None:
    return None


def _leave_orphan(client: WorkerClient, frame: dict[str, Any]) -> None:
    """Queue ``frame`` in its session's lane with nobody to deliver it: the helper's job."""
    with client._pipe_lock:
        lane = client._lanes.setdefault(frame["session"], Lane())
        lane.items.append((frame, None, None))
    client._orphaned()


def test_the_helper_thread_delivers_on_after_a_subscribers_exit() -> None:
    pushes = Pushes()
    client = WorkerClient(_default_context(), pushes, _ignore)
    try:
        assert client.wait_ready(WAIT)
        _leave_orphan(client, {"op": "event", "session": "s1", "type": "exit", "data": {}})
        helper, _ = pushes.wait_for("event", "s1")
        assert helper.endswith("-delivery")

        # The exit ended session s1 alone: its ``down``, on the same thread.
        thread, down = pushes.wait_for("down", "s1")
        assert thread == helper
        assert "SystemExit('a subscriber gave up')" in down["reason"]

        # Another lane left later is delivered (before: never, the helper thread was gone).
        _leave_orphan(client, {"op": "event", "session": "s2", "type": "ok", "data": {}})
        thread, _ = pushes.wait_for("event", "s2")
        assert thread.endswith("-delivery")
        assert client.alive
        assert client.call("unload_template", {"key": "k", "session": "s2"}, WAIT) is None
    finally:
        client.shutdown()
