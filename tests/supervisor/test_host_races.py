"""Host calls racing a crash, a give-up or a shutdown: each ends with the answer or the
typed error the README promises, never a bare internal error."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from actors import Plugin, PluginContext, ProviderRegistry
from supervisor import (
    AgentHost,
    HostShutDown,
    MemoryCheckpointStore,
    SessionFailed,
)
from tests.supervisor.host_helpers import (
    WAIT,
    HibernateHookStore,
    HostFactory,
    host_options,
    pairs,
    poll_until,
    template,
    thread_only,
    watch_events,
)


class SlowRestart(Plugin):
    """Once ``armed``, the second resumed start waits for ``release``: a reactivation
    starts at once, the restart of its incarnation killed right after does not."""

    def __init__(self) -> None:
        self.armed = False
        self.resumed_starts = 0
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if self.armed and ctx.resumed:
            self.resumed_starts += 1
            if self.resumed_starts == 2:
                self.release.wait(WAIT)


@thread_only("the plugin's gate is an Event shared with the test in this process")
def test_a_send_whose_reactivated_session_is_killed_at_once_waits_for_its_restart(
    make_host: HostFactory,
) -> None:
    slow = SlowRestart()
    host = make_host(call_timeout=WAIT)
    sid = host.start_session(template(plugins=[slow]))
    host.send(sid, "before")
    assert host.hibernate(sid)
    events = watch_events(host, sid)

    def kill_as_it_comes_back(event: Any) -> None:  # on the sending thread, before it serves
        if event.type == "reactivated":
            host.kill(sid)
            events.wait_for("crashed")

    host.subscribe(sid, kill_as_it_comes_back)
    slow.armed = True
    sent: Future[str] = Future()
    threading.Thread(
        target=lambda: sent.set_result(host.send(sid, "after", timeout=WAIT).content or "")
    ).start()
    events.wait_for("crashed")
    slow.release.set()

    assert sent.result(WAIT) == "echo: after"  # was a bare AssertionError
    assert pairs(host.history(sid)) == [("before", "echo: before"), ("after", "echo: after")]


def test_a_session_given_up_while_it_hibernates_stays_failed(make_host: HostFactory) -> None:
    store = HibernateHookStore()
    host = make_host(store=store, max_restarts=0)
    sid = host.start_session(template())
    host.send(sid, "hello")
    events = watch_events(host, sid)

    def crash_past_its_intensity() -> None:  # after its snapshot, before it is stopped
        host.kill(sid)
        events.wait_for("given_up")

    store.hook = crash_past_its_intensity

    assert host.hibernate(sid) is False  # was the supervisor's ChildNotFound
    assert host.session_info(sid).status == "failed"
    with pytest.raises(SessionFailed, match="past its restart intensity"):
        host.send(sid, "lost")
    assert "hibernated" not in events.types()
    host.resume(sid, template())  # from the hibernate checkpoint
    assert pairs(host.history(sid)) == [("hello", "echo: hello")]


def test_a_hibernation_racing_shutdown_raises_host_shut_down(mode: str) -> None:
    store = HibernateHookStore()
    host = AgentHost(store=store, **host_options(mode))
    sid = host.start_session(template())
    host.send(sid, "hello")
    store.hook = host.shutdown  # after its snapshot, before it is stopped

    with pytest.raises(HostShutDown):  # was pykka.ActorDeadError
        host.hibernate(sid)

    assert pairs(store.load(sid).messages()) == [("hello", "echo: hello")]


def test_a_start_racing_shutdown_raises_host_shut_down(mode: str) -> None:
    providers = ProviderRegistry()
    host = AgentHost(store=MemoryCheckpointStore(), providers=providers, **host_options(mode))

    def shut_down_then_echo(_model_id: str) -> Any:  # resolved after the id is taken
        host.shutdown()
        return providers.lookup("echo")

    providers.register("late", "test", shut_down_then_echo)
    with pytest.raises(HostShutDown):  # was pykka.ActorDeadError
        host.start_session(template(model="registry:late:test:m"), "late")
    assert host.list_sessions() == []


def test_watchers_of_a_failed_session_end_when_it_is_resumed(make_host: HostFactory) -> None:
    host = make_host(max_restarts=0)
    sid = host.start_session(template())
    host.send(sid, "hello")
    events = watch_events(host, sid)
    host.kill(sid)
    events.wait_for("given_up")
    ended = threading.Event()
    host.futures.watch(sid, lambda _event: None, ended.set)

    host.resume(sid, template())

    assert ended.wait(WAIT)  # the failed session is gone for good; its stream ends
    assert poll_until(lambda: host.session_info(sid).status == "active")
