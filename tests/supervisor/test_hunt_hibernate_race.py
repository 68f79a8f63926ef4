"""``hibernate`` racing a crash: the session ends hibernated and serves the next call."""

from __future__ import annotations

import threading

from actors import Plugin, PluginContext
from supervisor import AgentHost
from tests.supervisor.host_helpers import WAIT, HibernateHookStore, poll_until, template


class SlowResume(Plugin):
    """A resumed start that waits for ``release``: the restart is still starting while
    hibernate stops the session."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if ctx.resumed:
            self.release.wait(WAIT)


def test_a_crash_while_hibernating_leaves_the_session_hibernated_and_serving() -> None:
    store, slow = HibernateHookStore(), SlowResume()
    host = AgentHost(store=store, call_timeout=WAIT)
    try:
        sid = host.start_session(template(plugins=[slow]))
        host.send(sid, "hello")

        def crash_then_let_the_restart_finish() -> None:
            host.kill(sid)  # after the snapshot: its restart starts, slowly
            assert poll_until(lambda: host.session_info(sid).status == "restarting")
            threading.Thread(target=slow.release.set).start()

        store.hook = crash_then_let_the_restart_finish
        assert host.hibernate(sid)

        assert host.session_info(sid).status == "hibernated"
        assert host.send(sid, "after", timeout=WAIT).content == "echo: after"
        assert [m.content for m in host.history(sid)] == [
            "hello",
            "echo: hello",
            "after",
            "echo: after",
        ]
    finally:
        host.shutdown()
