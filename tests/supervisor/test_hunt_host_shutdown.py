"""Host shutdown and non-blocking calls at awkward moments (bugs found by a hunt).

Sessions stuck in ``session_end`` stop together under one deadline; a call still
queued when the host shuts down fails with the ``RuntimeError`` that
``host.futures`` promises; a done-callback that raises ``SystemExit`` does not
end the host's timer or helper threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import EchoModel, Message, ModelResponse, Plugin, PluginContext, Snapshot, Tool
from supervisor import (
    AgentHost,
    HostShutDown,
    MemoryCheckpointStore,
    SessionAlreadyExists,
    SessionNotFound,
)
from supervisor._helpers import HelperThreads
from supervisor._timer import CallTimer
from tests.supervisor.host_helpers import (
    WAIT,
    HostFactory,
    assert_threads_back,
    host_options,
    poll_until,
    template,
    watch_events,
)

_RELEASE = threading.Event()  # lets the thread-mode sessions' ``session_end`` return


class SlowEnd(Plugin):
    """``session_end`` that hangs for ``seconds`` (until ``_RELEASE`` in thread mode):
    a plugin whose cleanup waits on a dead remote. Picklable, for worker processes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def session_end(self, ctx: PluginContext, reason: str) -> None:
        _RELEASE.wait(self.seconds)


def test_sessions_stuck_in_session_end_cost_one_call_timeout_together(mode: str) -> None:
    _RELEASE.clear()
    sessions, call_timeout = 8, 0.5
    # Thread mode: the hang outlasts the shutdown (released below). Process mode: the
    # workers are joined after the sessions' stop (README: killed after 5 s), so the
    # hang is 1 s, which ends well before the sessions' stops would have added up.
    hang = WAIT if mode == "thread" else 1.0
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=call_timeout, **host_options(mode))
    try:
        for _ in range(sessions):
            host.start_session(template(plugins=[SlowEnd(hang)]))
        began = time.monotonic()
        host.shutdown()
        took = time.monotonic() - began
    finally:
        _RELEASE.set()
    # One after the other they took sessions x call_timeout (4 s); together, about one.
    assert took < sessions * call_timeout * 0.75, f"shutdown took {took:.2f} s"
    assert {info.status for info in host.list_sessions()} == {"stopped"}


class HeldModel(EchoModel):
    """``EchoModel`` whose calls wait for ``release`` (thread mode: the test holds a turn)."""

    model_string = "held-echo"

    def __init__(self) -> None:
        self.release = threading.Event()

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        self.release.wait(WAIT)
        return super().generate(messages, tools)


def test_calls_still_queued_at_shutdown_fail_with_runtime_error() -> None:
    model = HeldModel()
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT)
    sid = host.start_session(template(model=model))
    waiter = watch_events(host, sid)
    running = host.futures.send(sid, "running")
    waiter.wait_for("turn_started")
    queued: list[Future[Any]] = [host.futures.send(sid, f"q{n}") for n in range(3)]
    queued.append(host.futures.stop_session(sid))
    with ThreadPoolExecutor(1) as pool:
        shutting = pool.submit(host.shutdown)
        assert poll_until(lambda: host._table.closed)  # the shutdown began
        model.release.set()
        shutting.result(WAIT)
    assert running.result(WAIT).content == "echo: running"
    for future in queued:  # ran, or failed as the host went away; the session exists
        outcome = future.exception(WAIT)
        assert outcome is None or isinstance(outcome, RuntimeError), repr(outcome)
    late = host.futures.send(sid, "late").exception(WAIT)
    assert isinstance(late, RuntimeError), repr(late)
    assert "shut down" in str(late)


def _exits(*_args: object) -> None:
    raise SystemExit("a done-callback that exits")


def test_a_deadline_raising_system_exit_does_not_stop_later_deadlines() -> None:
    timer = CallTimer("test-timer", linger=0.05)
    fired = threading.Event()
    try:
        timer.call_later(0, _exits)
        timer.call_later(0.01, fired.set)
        assert fired.wait(WAIT)
        assert timer.call_later(0, fired.clear) is not None
        assert poll_until(lambda: not fired.is_set())
    finally:
        timer.close()
    assert not timer.running


def test_helper_work_raising_system_exit_does_not_stop_the_helpers() -> None:
    helpers = HelperThreads(1, "test-helper")
    ran = threading.Event()
    helpers.run(_exits)
    helpers.run(ran.set)
    assert ran.wait(WAIT)
    assert helpers.join(WAIT)
    assert helpers.running == 0


def test_a_done_callback_raising_system_exit_leaves_later_timeouts_working() -> None:
    model = HeldModel()
    host = AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT)
    try:
        sid = host.start_session(template(model=model))
        waiter = watch_events(host, sid)
        running = host.futures.send(sid, "running")
        waiter.wait_for("turn_started")
        first = host.futures.send(sid, "first", timeout=0.05)
        first.add_done_callback(_exits)  # runs on the timer's thread when it times out
        with pytest.raises(TimeoutError, match="stayed busy"):
            first.result(WAIT)
        second = host.futures.send(sid, "second", timeout=0.05)
        with pytest.raises(TimeoutError, match="stayed busy"):
            second.result(WAIT)  # the timer still fires deadlines
        model.release.set()
        assert running.result(WAIT).content == "echo: running"
    finally:
        model.release.set()
        host.shutdown()


class SlowRestart(Plugin):
    """``session_start`` of a restarted incarnation waits for ``release`` (a plugin that
    reconnects to a remote that does not answer)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def session_start(self, ctx: PluginContext) -> None:
        if ctx.resumed:
            self.release.wait(WAIT)


def test_shutdown_during_a_restart_that_hangs_still_releases_the_data_dir(
    tmp_path: Path,
) -> None:
    before = set(threading.enumerate())
    plugin = SlowRestart()
    host = AgentHost(data_dir=tmp_path, call_timeout=0.5)
    try:
        sid = host.start_session(template(plugins=[plugin]))
        host.send(sid, "hello")
        host.kill(sid)  # its restart hangs in session_start, on the supervisor's thread
        assert poll_until(lambda: host.session_info(sid).status == "restarting")
        host.shutdown()  # did raise pykka.Timeout and left the store open and locked
    finally:
        plugin.release.set()
    with AgentHost(data_dir=tmp_path, call_timeout=WAIT) as again:  # not DataDirLocked
        assert again.resume(sid, template()) == sid
        assert [m.content for m in again.history(sid)] == ["hello", "echo: hello"]
    assert_threads_back(before)  # the late incarnation was stopped once its start ended


@pytest.mark.parametrize("form", ["blocking", "future"])
def test_a_stop_queued_behind_a_stop_and_resume_leaves_the_resumed_session_running(
    form: str,
) -> None:
    """A ``stop_session`` that looked the session up, then waited in its queue while
    another call stopped it and a ``resume`` started it again, must not stop the resumed
    session's incarnation (it did, by id: the session was left ``restarting`` with no
    incarnation, every call failing after ``restart_wait``)."""
    with AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT) as host:
        sid = host.start_session(template())
        host.send(sid, "hello")
        first = host._table.live(sid)
        gate = first.op_lock
        assert gate.acquire(timeout=WAIT)  # the call ahead of the queued stop
        with ThreadPoolExecutor(1) as pool:
            if form == "blocking":
                late: Future[None] = pool.submit(host.stop_session, sid)
            else:
                late = host.futures.stop_session(sid)
            assert poll_until(lambda: gate.queued == 1)
            host._sessions.stop(first)  # what the call ahead does: stop_session
            assert host.resume(sid, template()) == sid  # another caller resumes it
            gate.release()
            with pytest.raises(SessionNotFound):  # the session it named was stopped
                late.result(WAIT)
        assert host.session_info(sid).status == "active"
        assert host.send(sid, "again", timeout=WAIT).content == "echo: again"


def test_a_send_queued_behind_a_stop_that_raced_a_restart_fails_at_once() -> None:
    """``stop_session`` while the session is being restarted (a kill; its restart's
    ``session_start`` slow): the restart's incarnation, registering once the stop had
    marked the session stopped, made it ``active`` again, and its termination then
    ``restarting``, so a call queued behind the stop waited ``restart_wait`` for a restart
    that never comes and failed with ``SessionCrashed``, not ``SessionNotFound``."""
    plugin = SlowRestart()
    with AgentHost(store=MemoryCheckpointStore(), call_timeout=WAIT, restart_wait=WAIT) as host:
        sid = host.start_session(template(plugins=[plugin]))
        host.send(sid, "hello")
        record = host._table.live(sid)
        host.kill(sid)  # its restart waits in session_start, on the supervisor's thread
        assert poll_until(lambda: record.status == "restarting")
        gate = record.op_lock
        assert gate.acquire(timeout=WAIT)  # queue the stop, then a send behind it
        with ThreadPoolExecutor(2) as pool:
            stopping = pool.submit(host.stop_session, sid)
            assert poll_until(lambda: gate.queued == 1)
            queued = pool.submit(host.send, sid, "after")
            assert poll_until(lambda: gate.queued == 2)
            gate.release()
            assert poll_until(lambda: record.status == "stopped")  # it waits for the child
            began = time.monotonic()
            plugin.release.set()  # the restart registers, then the stop terminates it
            stopping.result(WAIT)
            assert isinstance(queued.exception(WAIT), SessionNotFound)
            assert time.monotonic() - began < WAIT / 2  # not after restart_wait
        assert record.status == "stopped"
        with pytest.raises(SessionNotFound):
            host.session_info(sid)


class PausingStore(MemoryCheckpointStore):
    """Pauses the first ``load`` made by the thread named ``resumer`` until ``go``."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = threading.Event()
        self.go = threading.Event()

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        snapshot = super().load(session_id, checkpoint_id)
        if threading.current_thread().name == "resumer" and not self.loaded.is_set():
            self.loaded.set()
            self.go.wait(WAIT)
        return snapshot


def test_resume_of_a_running_session_cannot_drop_turns_answered_meanwhile() -> None:
    """``resume`` of a session that runs here loaded its checkpoint before it found the
    session running: had the session answered a turn and been stopped meanwhile, the
    resume started from the older checkpoint and the answered turn was gone."""
    store = PausingStore()
    with AgentHost(store=store, call_timeout=WAIT) as host:
        sid = host.start_session(template())
        host.send(sid, "one")
        with ThreadPoolExecutor(1) as pool:
            resuming = pool.submit(_named("resumer", lambda: host.resume(sid, template())))
            # Refused at once, or (as it did) paused after loading the checkpoint.
            assert poll_until(lambda: resuming.done() or store.loaded.is_set())
            assert host.send(sid, "two").content == "echo: two"
            host.stop_session(sid)
            store.go.set()
            error = resuming.exception(WAIT)
        assert isinstance(error, SessionAlreadyExists), repr(error)
        assert "active on this host" in str(error)
        assert host.resume(sid, template()) == sid
        assert [m.content for m in host.history(sid)] == ["one", "echo: one", "two", "echo: two"]


def _named(name: str, work: Callable[[], str]) -> Callable[[], str]:
    def run() -> str:
        thread = threading.current_thread()
        thread.name, was = name, thread.name
        try:
            return work()
        finally:
            thread.name = was

    return run


def test_calls_on_a_shut_down_host_raise_host_shut_down_a_runtime_error(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(template())
    host.shutdown()
    with pytest.raises(HostShutDown, match="this AgentHost is shut down; create a new one"):
        host.start_session(template())
    failed = host.futures.send(sid, "late").exception(WAIT)
    assert isinstance(failed, HostShutDown)
    assert isinstance(failed, RuntimeError)  # what it always was
