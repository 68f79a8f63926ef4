"""Hunt 7: ``HostMetrics`` forgets a crashed session that is stopped before its restart
comes (it never resumes): the sessions it remembers stay bounded by the live ones.

Each session's restart is held in its plugin's ``session_start`` until the stop's
``terminate_child`` waits behind it at the supervisor; then that restart fails, and the
stop removes the child before a retry: the session ends crashed, never resumed.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from actors import AgentTemplate, Plugin, PluginContext
from supervisor import SessionNotFound
from supervisor.metrics import HostMetrics
from tests.supervisor.host_helpers import WAIT, HostFactory, poll_until, thread_only


class FailsOnRestart(Plugin):
    """Starts once; every restart waits for ``release``, then fails (its backend is gone)."""

    name = "fails_on_restart"

    def __init__(self) -> None:
        self.starts = 0
        self.restarting = threading.Event()
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        self.starts += 1  # on the session's thread; one start at a time
        if self.starts > 1:
            self.restarting.set()
            self.release.wait(WAIT)
            raise RuntimeError("its backend is gone")


@thread_only("the plugin's events are shared with the test in this process")
def test_sessions_stopped_between_crash_and_restart_are_forgotten(
    make_host: HostFactory, mode: str
) -> None:
    registry = CollectorRegistry()
    host = make_host(max_restarts=100, max_seconds=60.0)
    metrics = HostMetrics(host, registry)
    for n in range(3):
        plugin = FailsOnRestart()
        sid = host.start_session(AgentTemplate(plugins=(plugin,)), f"s{n}")
        host.kill(sid, reason="test")
        assert plugin.restarting.wait(WAIT)  # its restart is held, so not resumed
        stopping = host.futures.stop_session(sid, checkpoint=False)
        # The stop (which marks it stopped first) queues its terminate_child at the
        # supervisor, behind the held restart (private: nothing public tells that).
        inbox: Any = host._sessions.supervisors.of(sid).actor_ref.actor_inbox  # a Queue
        assert poll_until(lambda: inbox.qsize() > 0)  # noqa: B023 (called at once)
        plugin.release.set()
        stopping.result(WAIT)
        with pytest.raises(SessionNotFound):
            host.session_info(sid)

    assert registry.get_sample_value("sessionvisor_session_crashes_total", {"reason": "killed"})
    assert registry.get_sample_value("sessionvisor_session_restarts_total") == 0
    assert metrics.awaiting_restart == 0
    assert host.list_sessions() == []


@thread_only("kills in this process are enough")
def test_a_session_restarted_again_and_again_is_counted_and_forgotten(
    make_host: HostFactory, mode: str
) -> None:
    registry = CollectorRegistry()
    host = make_host(max_restarts=100, max_seconds=60.0)
    metrics = HostMetrics(host, registry)
    sid = host.start_session(AgentTemplate(), "s")
    for _ in range(3):
        host.kill(sid, reason="test")
        assert host.send(sid, "back?").content == "echo: back?"
    assert registry.get_sample_value("sessionvisor_session_restarts_total") == 3
    assert metrics.awaiting_restart == 0
    host.kill(sid, reason="test")
    host.stop_session(sid, checkpoint=False)
    assert metrics.awaiting_restart == 0
