"""Resume of plugin state, found by a bug hunt: what a plugin keeps in ``ctx.state`` comes
back on every resume, whatever the plugin is called."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from actors import AgentTemplate, Message, Plugin, PluginContext
from supervisor import MemoryCheckpointStore, SessionNotFound
from tests.supervisor.host_helpers import WAIT, HostFactory, thread_only


class TokenBudget(Plugin):
    """Counts turns in its state; its name (``token_budget``) holds a secret-looking word."""

    def session_start(self, ctx: PluginContext) -> None:
        ctx.state.setdefault("turns", 0)
        ctx.state["resumed_with"] = dict(ctx.state)

    def after_turn(self, ctx: PluginContext, messages: Sequence[Message]) -> None:
        ctx.state["turns"] += 1


def test_a_plugin_named_like_a_secret_keeps_its_state_across_a_restart(
    make_host: HostFactory,
) -> None:
    template = AgentTemplate(plugins=(TokenBudget(),))
    host = make_host()
    sid = host.start_session(template, "s")
    host.send(sid, "one")
    host.send(sid, "two")

    saved = host.store.load(sid)
    assert saved.state["plugins"]["token_budget"]["turns"] == 2
    assert saved.stripped_fields == ()

    host.stop_session(sid)
    host.resume(sid, template)
    host.send(sid, "three")
    state = host.checkpoint(sid).state["plugins"]["token_budget"]
    assert state["resumed_with"]["turns"] == 2
    assert "__stripped__" not in state["resumed_with"]
    assert state["turns"] == 3


class EndRecorder(Plugin):
    """Appends ``<name> <reason>`` to ``path`` at ``session_end`` (a resource it releases
    there); with ``exit_`` it then raises ``SystemExit``. Process-safe: one ``O_APPEND``
    write per line."""

    def __init__(self, name: str, path: Path, exit_: bool = False) -> None:
        self.name = name
        self.path = path
        self.exit = exit_

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{self.name} {reason}\n".encode())
        finally:
            os.close(fd)
        if self.exit:
            raise SystemExit(3)


def test_a_session_end_raising_system_exit_lets_every_other_plugin_end_once(
    make_host: HostFactory, tmp_path: Path
) -> None:
    ends = tmp_path / "ends.txt"
    plugins = (EndRecorder("first", ends), EndRecorder("exits", ends, exit_=True))
    template = AgentTemplate(plugins=plugins)
    host = make_host()
    sid = host.start_session(template, "s")
    host.send(sid, "one")

    assert host.hibernate(sid)
    assert host.send(sid, "two").content == "echo: two"  # reactivated: the session goes on
    lines = ends.read_text().splitlines()
    assert lines == ["exits normal", "first normal"]


class SlowStart(Plugin):
    """A ``session_start`` that waits for ``release`` (a resource slow to connect);
    ``ended`` is set by its ``session_end``. Thread mode only: the events are this process's."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.ended = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        self.release.wait(WAIT)

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        self.ended.set()


@thread_only("the plugin's events are shared with the test in this process")
def test_a_start_slower_than_call_timeout_leaves_no_session_behind(
    make_host: HostFactory, mode: str
) -> None:
    slow = SlowStart()
    host = make_host(call_timeout=0.5)

    with pytest.raises(TimeoutError, match=r"session 's' did not start within 0\.5 s"):
        host.start_session(AgentTemplate(plugins=(slow,)), "s")
    assert host.list_sessions() == []
    slow.release.set()

    assert slow.ended.wait(WAIT)  # the late start was stopped, not left running unlisted
    assert host.start_session(AgentTemplate(), "s") == "s"  # and its id is free again
    assert host.send("s", "hi").content == "echo: hi"


def test_a_session_resumes_under_its_tenant_even_one_shaped_like_a_key(
    make_host: HostFactory,
) -> None:
    tenant = "sk-bratislava-office-01"  # matches the sk-... credential pattern
    store = MemoryCheckpointStore()
    host = make_host(store=store)
    host.start_session(AgentTemplate(), "s", tenant_id=tenant)
    host.send("s", "private", tenant_id=tenant)
    host.stop_session("s", tenant_id=tenant)
    assert store.load("s").state["metadata"]["tenant_id"] == tenant

    host.resume("s", AgentTemplate())

    assert host.session_info("s").tenant_id == tenant
    with pytest.raises(SessionNotFound):
        host.history("s", tenant_id="default")
    assert [m.content for m in host.history("s", tenant_id=tenant)] == [
        "private",
        "echo: private",
    ]


class GatedStart(Plugin):
    """A ``session_start`` that waits for ``release`` once ``gate`` is set (a resource slow
    to reconnect on reactivation). Thread mode only: the events are this process's."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if self.gate.is_set():
            self.release.wait(WAIT)


@thread_only("the plugin's events are shared with the test in this process")
def test_a_reactivation_slower_than_call_timeout_is_a_timeout_then_serves(
    make_host: HostFactory, mode: str
) -> None:
    slow = GatedStart()
    host = make_host(call_timeout=0.5)
    host.start_session(AgentTemplate(plugins=(slow,)), "s")
    host.send("s", "one")
    host.hibernate("s")
    slow.gate.set()

    with pytest.raises(TimeoutError, match=r"session 's' is being reactivated and did not start"):
        host.send("s", "two")

    # A second call queues its own reactivation behind the first, still starting: when the
    # first is over, the second finds the session serving, not "already has a child 's'".
    sessions: Any = host._sessions  # to see the second call set out to start the session
    starting = threading.Event()
    spec = sessions._spec

    def noticed(record: Any) -> Any:
        starting.set()
        return spec(record)

    sessions._spec = noticed
    second = host.futures.send("s", "three")
    assert starting.wait(WAIT)
    slow.release.set()
    assert second.result(WAIT).content == "echo: three"
    assert [m.content for m in host.history("s")][-2:] == ["three", "echo: three"]
