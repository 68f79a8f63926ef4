"""The supervisor survives user code: a ``BaseException`` from a start function (a model
factory, a template's pickling) fails that one child's start or restart, never the
supervisor, its other children or the host (issue 13, item 3)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pykka
import pytest

from actors import (
    AgentTemplate,
    EchoModel,
    Event,
    Model,
    Plugin,
    PluginContext,
    PluginError,
    ProviderRegistry,
)
from supervisor import (
    ChildSpec,
    ChildStartError,
    RestartIntensityExceeded,
    SessionFailed,
    Supervisor,
    SupervisorHandle,
    monitor,
)
from tests.supervisor.helpers import Downs, FakeClock, Starts, Worker, crash, worker_spec
from tests.supervisor.host_helpers import (
    MODES,
    WAIT,
    HostFactory,
    poll_until,
    template,
    watch_events,
)


class Interrupted(BaseException):
    """A ``BaseException`` of user code that is neither ``SystemExit`` nor ``KeyboardInterrupt``."""


BASE_EXCEPTIONS = [SystemExit(3), KeyboardInterrupt(), Interrupted("user code")]
IDS = ["SystemExit", "KeyboardInterrupt", "custom"]


def _raiser(exc: BaseException) -> ChildSpec:
    def start() -> pykka.ActorRef[Any]:
        raise exc

    return ChildSpec("x", start)


# -- the generic Supervisor -------------------------------------------------------------


@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=IDS)
def test_start_child_raising_a_base_exception_fails_that_start_only(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    starts = Starts()
    handle = SupervisorHandle.start([worker_spec("steady", starts)])
    steady = starts.latest("steady")

    with pytest.raises(ChildStartError, match=r"child 'x' failed to start") as info:
        handle.start_child(_raiser(exc))

    assert info.value.child_id == "x"
    assert info.value.__cause__ is exc
    assert type(exc).__name__ in str(info.value)
    assert handle.is_alive()
    assert [c.id for c in handle.which_children()] == ["steady"]
    assert steady.ask("ping", timeout=5.0) == "pong"
    handle.start_child(worker_spec("later", starts))
    assert [c.id for c in handle.which_children()] == ["steady", "later"]
    [warned] = [r for r in caplog.records if r.levelno == logging.WARNING and "'x'" in r.message]
    assert warned.exc_info is not None
    assert warned.exc_info[1] is exc
    handle.stop()


@pytest.mark.parametrize("exc", BASE_EXCEPTIONS, ids=IDS)
def test_restart_raising_a_base_exception_counts_against_the_childs_intensity(
    exc: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    starts = Starts()
    attempts: list[int] = []
    given_up: list[tuple[str, object]] = []
    reported = threading.Event()

    def first_only() -> pykka.ActorRef[Any]:
        attempts.append(1)
        if len(attempts) > 1:
            raise exc
        return Worker.start("f", starts=starts)

    def on_give_up(child_id: str, reason: object) -> None:
        given_up.append((child_id, reason))
        reported.set()

    handle = SupervisorHandle.start(
        [worker_spec("steady", starts), ChildSpec("f", first_only, max_restarts=2)],
        max_restarts=None,
        clock=FakeClock(),
        on_give_up=on_give_up,
    )
    steady = starts.latest("steady")
    crash(starts.latest("f"))

    assert reported.wait(5.0), "the child was never given up"
    assert given_up == [("f", exc)]
    assert len(attempts) == 3  # the first start, then max_restarts restarts that raised
    assert handle.is_alive()
    assert [c.id for c in handle.which_children()] == ["steady"]
    assert steady.ask("ping", timeout=5.0) == "pong"
    failed = [r.message for r in caplog.records if "restarting 'f' failed" in r.message]
    assert len(failed) == 2
    handle.stop()


def test_restart_raising_system_exit_escalates_through_the_supervisor_wide_limit() -> None:
    starts = Starts()
    attempts: list[int] = []

    def first_only() -> pykka.ActorRef[Any]:
        attempts.append(1)
        if len(attempts) > 1:
            raise SystemExit(3)
        return Worker.start("f", starts=starts)

    handle = SupervisorHandle.start([ChildSpec("f", first_only)], max_restarts=2, clock=FakeClock())
    downs = Downs()
    monitor(handle.actor_ref, downs)
    crash(starts.latest("f"))

    [down] = downs.wait()
    # A deliberate exit that names the child, not the user's SystemExit as the reason.
    assert isinstance(down.reason, RestartIntensityExceeded)
    assert down.reason.child_id == "f"
    assert isinstance(down.reason.last_reason, SystemExit)
    assert len(attempts) == 3


def test_on_give_up_raising_system_exit_leaves_the_supervisor_running() -> None:
    starts = Starts()
    called = threading.Event()

    def on_give_up(_child_id: str, _reason: object) -> None:
        called.set()
        raise SystemExit(4)

    spec = ChildSpec("f", lambda: Worker.start("f", starts=starts), max_restarts=0)
    handle = SupervisorHandle.start(
        [worker_spec("steady", starts), spec], max_restarts=None, on_give_up=on_give_up
    )
    crash(starts.latest("f"))

    assert called.wait(5.0)
    assert [c.id for c in handle.which_children()] == ["steady"]
    assert handle.is_alive()
    handle.stop()


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)], ids=IDS[1::-1])
def test_static_child_raising_a_base_exception_on_the_callers_thread_propagates(
    exc: BaseException,
) -> None:
    """On the caller's (here the main) thread, Ctrl-C stays Ctrl-C: never wrapped."""
    starts = Starts()
    stops: list[str] = []
    specs = [worker_spec("a", starts, stops=stops), _raiser(exc)]

    with pytest.raises(type(exc)) as info:
        Supervisor.start(specs)

    assert info.value is exc
    assert stops == ["a"]  # those already started were stopped
    assert pykka.ActorRegistry.get_all() == []


# -- the host ---------------------------------------------------------------------------


class _Switch:
    """A provider factory that builds an ``EchoModel`` until ``poisoned`` is set, then
    raises ``SystemExit`` (a factory that calls ``sys.exit`` on a broken configuration).
    Thread-safe. Models are resolved in the host's process in every mode."""

    def __init__(self) -> None:
        self.poisoned = threading.Event()
        self._lock = threading.Lock()
        self.exits = 0

    def __call__(self, _model_id: str) -> Model:
        if self.poisoned.is_set():
            with self._lock:
                self.exits += 1
            raise SystemExit("provider configuration is broken")
        return EchoModel()


def test_provider_factory_raising_system_exit_on_a_restart_fails_that_session_only(
    make_host: HostFactory,
) -> None:
    factory = _Switch()
    providers = ProviderRegistry()
    providers.register("acme", "echo", factory)
    host = make_host(providers=providers, clock=FakeClock(), max_restarts=2, max_seconds=5.0)
    model = "registry:acme:echo:echo-1"
    sid = host.start_session(template(model=model), "poisoned")
    other = host.start_session(template(), "healthy")
    host.send(sid, "hello")
    waiter = watch_events(host, sid)
    factory.poisoned.set()

    host.kill(sid)

    given_up = waiter.wait_for("given_up")
    assert "SystemExit" in given_up.data["reason"]
    assert waiter.count("crashed") == 1
    assert factory.exits == 2  # each allowed restart failed, and counted
    assert {s.session_id: s.status for s in host.list_sessions()} == {
        "poisoned": "failed",
        "healthy": "active",
    }
    with pytest.raises(SessionFailed, match="poisoned"):
        host.send(sid, "anyone?")
    assert host.send(other, "fine").content == "echo: fine"
    late = host.start_session(template(), "late")
    assert host.send(late, "hi").content == "echo: hi"
    # Fixed, it comes back from its checkpoints.
    factory.poisoned.clear()
    assert host.resume(sid, template(model=model)) == sid
    assert host.send(sid, "back").content == "echo: back"


def test_provider_factory_raising_system_exit_on_a_first_start_is_a_clear_error(
    make_host: HostFactory,
) -> None:
    factory = _Switch()
    providers = ProviderRegistry()
    providers.register("acme", "echo", factory)
    host = make_host(providers=providers)
    other = host.start_session(template(), "healthy")
    calls: list[int] = []

    def second_call_exits(model_id: str) -> Model:
        # The host resolves the model once on the caller's thread (it works there)
        # and again on the supervisor's thread, where it raises.
        calls.append(1)
        if len(calls) > 1:
            factory.poisoned.set()
        return factory(model_id)

    providers.register("acme", "echo", second_call_exits)

    with pytest.raises(ChildStartError, match=r"'doomed' failed to start.*SystemExit") as info:
        host.start_session(template(model="registry:acme:echo:echo-1"), "doomed")

    assert info.value.child_id == "doomed"
    assert isinstance(info.value.__cause__, SystemExit)
    assert [s.session_id for s in host.list_sessions()] == ["healthy"]
    assert host.send(other, "fine").content == "echo: fine"
    assert host.send(host.start_session(template(), "late"), "hi").content == "echo: hi"


def test_provider_factory_raising_system_exit_on_the_callers_thread_is_a_clear_error(
    make_host: HostFactory,
) -> None:
    """The host resolves a model string on the caller's thread first: a factory that
    raises ``SystemExit`` there must not end the caller's program either."""
    factory = _Switch()
    providers = ProviderRegistry()
    providers.register("acme", "echo", factory)
    host = make_host(providers=providers)
    model = "registry:acme:echo:echo-1"
    saved = host.start_session(template(model=model), "saved")
    host.send(saved, "kept")
    host.stop_session(saved)
    factory.poisoned.set()

    with pytest.raises(ChildStartError, match=r"'doomed' failed to start.*SystemExit") as info:
        host.start_session(template(model=model), "doomed")
    assert isinstance(info.value.__cause__, SystemExit)
    with pytest.raises(ChildStartError, match=r"'saved' failed to start.*SystemExit") as info:
        host.resume(saved, template(model=model))
    assert isinstance(info.value.__cause__, SystemExit)

    assert host.list_sessions() == []
    factory.poisoned.clear()
    assert host.resume(saved, template(model=model)) == saved
    assert [m.content for m in host.history(saved)] == ["kept", "echo: kept"]


class ExitOnPickle(Plugin):
    """A plugin that cannot be pickled: its ``__reduce__`` raises ``SystemExit``."""

    name = "exit-on-pickle"

    def __reduce__(self) -> str | tuple[Any, ...]:
        raise SystemExit("no pickling here")


@pytest.mark.parametrize("mode", [m for m in MODES if m != "thread"])
def test_template_whose_pickling_raises_system_exit_fails_its_start_only(
    make_host: HostFactory,
) -> None:
    host = make_host()
    other = host.start_session(template(), "healthy")
    unpicklable = AgentTemplate(model="echo", plugins=(ExitOnPickle(),))

    with pytest.raises(ChildStartError, match=r"'unpicklable' failed to start.*SystemExit") as info:
        host.start_session(unpicklable, "unpicklable")

    assert info.value.child_id == "unpicklable"
    assert isinstance(info.value.__cause__, SystemExit)
    assert [s.session_id for s in host.list_sessions()] == ["healthy"]
    assert host.send(other, "fine").content == "echo: fine"
    late = host.start_session(template(), "late")
    assert host.send(late, "hi").content == "echo: hi"
    placed = sorted(sid for worker in host.workers() for sid in worker.sessions)
    assert placed == ["healthy", "late"]  # nothing was left placed for the failed start


def test_subscriber_raising_system_exit_on_resumed_leaves_the_restart_done(
    make_host: HostFactory, caplog: pytest.LogCaptureFixture
) -> None:
    host = make_host()
    sid = host.start_session(template(), "s")
    host.send(sid, "hello")
    seen: list[str] = []
    resumed = threading.Event()

    def exits_on_resumed(event: Event) -> None:
        if event.type == "resumed":
            seen.append(event.type)
            resumed.set()
            raise SystemExit("a subscriber exits")

    host.subscribe(sid, exits_on_resumed)

    host.kill(sid)

    assert resumed.wait(WAIT)
    assert host.send(sid, "again").content == "echo: again"
    assert seen == ["resumed"]  # restarted once: that incarnation serves
    assert [s.status for s in host.list_sessions()] == ["active"]
    # Logged on the supervisor's thread right after the subscriber raised.
    assert poll_until(
        lambda: any("subscriber failed on 'resumed'" in r.message for r in caplog.records)
    )
    # Still supervised: the next crash is restarted too.
    host.kill(sid)
    assert host.send(sid, "once more").content == "echo: once more"
    assert seen == ["resumed", "resumed"]


class _ExitOnStart(Plugin):
    name = "exits"

    def session_start(self, ctx: PluginContext) -> None:
        raise SystemExit(3)


def test_a_plugin_exiting_in_session_start_fails_that_start_with_plugin_error(
    make_host: HostFactory,
) -> None:
    host = make_host()
    with pytest.raises(PluginError, match="exits") as caught:
        host.start_session(AgentTemplate(plugins=(_ExitOnStart(),)), "bad")
    assert "SystemExit" in repr(caught.value.error)
    assert host.list_sessions() == []
    assert host.send(host.start_session(AgentTemplate(), "good"), "hi").content == "echo: hi"
