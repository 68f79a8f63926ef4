"""What the tests of a session's last events before its streams end share."""

from __future__ import annotations

import threading

from actors import Plugin, PluginContext
from supervisor import AgentHost
from tests.supervisor.host_helpers import WAIT


class HeldStop:
    """A watcher of the session's stop, registered after the stream under test's (so called
    after it), that holds the stopping thread until that stream ended (``ended``), bounded
    by ``WAIT``: the order in which the stopping thread and the stream's loop run, made
    deterministic."""

    def __init__(self, host: AgentHost, session_id: str) -> None:
        self.ended = threading.Event()
        self._watch = host.futures.watch(session_id, lambda _event: None, self._hold)

    def _hold(self) -> None:
        self.ended.wait(WAIT)

    def close(self) -> None:
        self.ended.set()
        self._watch.close()


class FailingEnd(Plugin):
    """``session_end`` fails: the session's incarnation publishes a ``plugin_error`` as it
    is stopped or shut down. Picklable, for worker processes."""

    name = "failing_end"

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        raise RuntimeError("could not flush the journal")
