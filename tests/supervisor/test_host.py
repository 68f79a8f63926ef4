"""``AgentHost`` end to end: real sessions, a real supervisor, real stores.

Crashes are real (``kill``, a tool raising ``SystemExit``, a plugin failing on
resume); every wait is on an event, a condition or a future, with a bound.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from actors import (
    SCHEMA_VERSION,
    AgentTemplate,
    EchoModel,
    Message,
    MigrationRegistry,
    Plugin,
    PluginContext,
    PluginError,
    ProviderRegistry,
    RegistryProfileMissing,
    Snapshot,
    Usage,
    encode_plain,
    is_stripped_marker,
)
from supervisor import (
    AgentHost,
    CheckpointNotFound,
    CheckpointStore,
    Down,
    HostShutDown,
    MemoryCheckpointStore,
    SessionAlreadyExists,
    SessionCrashed,
    SessionFailed,
    SessionNotFound,
    SQLiteCheckpointStore,
    monitor,
)
from tests.supervisor.helpers import FakeClock
from tests.supervisor.host_helpers import (
    WAIT,
    FlakyModel,
    HostFactory,
    Journal,
    ModelDown,
    assert_threads_back,
    host_options,
    pairs,
    registry_lookup_fails,
    same_error,
    session_thread_gone,
    template,
    watch_events,
)


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    """A process-safe journal: it reports back from worker processes through ``tmp_path``."""
    return Journal(tmp_path)


def _contents(history: list[Message]) -> list[str | None]:
    return [m.content for m in history]


def _crash_and_wait(host: AgentHost, session_id: str) -> None:
    """Kill the session and wait until the supervisor has resumed it."""
    waiter = watch_events(host, session_id)
    host.kill(session_id, reason="test")
    waiter.wait_for("resumed")


# -- start_session ---------------------------------------------------------------------------


def test_start_session_returns_ids_and_registers_metadata(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host()
    generated = host.start_session(template(journal))
    given = host.start_session(
        template(journal), "s-given", tenant_id="acme", api_key="key-1", blueprint="support"
    )

    assert isinstance(generated, str)
    assert len(generated) == 32
    assert given == "s-given"
    entry = host.registry.get(given)
    assert entry.tenant_id == "acme"
    assert entry.blueprint == "support"
    assert entry.model == "echo"
    assert entry.plugins == ("journal",)
    assert entry.actor_ref.is_alive()
    assert host.registry.api_key_matches(given, "key-1")
    assert not host.registry.api_key_matches(given, "key-2")
    assert [s.resumed for s in journal.of(given)] == [False]


def test_start_session_rejects_a_taken_id(make_host: HostFactory) -> None:
    host = make_host()
    host.start_session(template(), "dup")

    with pytest.raises(SessionAlreadyExists, match="'dup' already exists; it is active on th"):
        host.start_session(template(), "dup")
    assert [s.session_id for s in host.list_sessions()] == ["dup"]


def test_start_session_rejects_an_id_with_checkpoints_in_the_store(
    make_host: HostFactory,
) -> None:
    store = MemoryCheckpointStore()
    first = make_host(store=store)
    first.start_session(template(), "old")
    first.send("old", "remember me")
    first.shutdown()

    host = make_host(store=store)
    with pytest.raises(SessionAlreadyExists, match=r"'old' .* earlier life: resume\(\) it"):
        host.start_session(template(), "old")
    assert host.list_sessions() == []
    # What the error suggests works.
    assert host.resume("old", template()) == "old"
    assert _contents(host.history("old")) == ["remember me", "echo: remember me"]


def test_plugin_error_on_start_leaves_nothing_registered_or_running(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host()
    journal.fail_first_start = True

    with pytest.raises(PluginError, match="journal") as caught:
        host.start_session(template(journal), "bad", tenant_id="acme")

    assert caught.value.plugin == "journal"
    assert same_error(caught.value.error, RuntimeError)
    assert host.list_sessions() == []
    assert host.list_sessions("acme") == []
    assert host.registry.count() == 0
    assert registry_lookup_fails(host, "bad")
    assert session_thread_gone(journal, "bad")
    with pytest.raises(SessionNotFound):
        host.send("bad", "hello")
    # The id is free again.
    journal.fail_first_start = False
    assert host.start_session(template(journal), "bad") == "bad"
    assert host.send("bad", "hello").content == "echo: hello"


class SetsUnstorableState(Plugin):
    """Leaves in its state what no checkpoint can hold (``kind``: a set, or a cycle)."""

    name = "tags"

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def session_start(self, ctx: PluginContext) -> None:
        if self.kind == "set":
            ctx.state["tags"] = {"a", "b"}
        else:
            loop: list[Any] = []
            loop.append(loop)
            ctx.state["loop"] = loop


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("set", "at state.plugins.tags.tags: builtins.set is not a plain value"),
        ("cycle", "at state.plugins.tags: it holds a cycle"),
    ],
)
def test_a_state_no_checkpoint_can_hold_fails_the_start_not_every_turn(
    make_host: HostFactory, kind: str, message: str
) -> None:
    host = make_host()

    with pytest.raises(PluginError, match="'tags' failed in session_start") as caught:
        host.start_session(AgentTemplate(model="echo", plugins=[SetsUnstorableState(kind)]), "s")

    assert message in str(caught.value.error)
    assert host.list_sessions() == []
    assert host.start_session(AgentTemplate(model="echo"), "s") == "s"  # the id is free
    assert host.send("s", "hi").content == "echo: hi"


def test_plugin_error_keeps_the_plugin_exception_as_its_cause(
    make_host: HostFactory, journal: Journal
) -> None:
    """Regression: the host re-raised the PluginError ``from`` its ChildStartError wrapper."""
    host = make_host()
    journal.fail_first_start = True

    with pytest.raises(PluginError) as caught:
        host.start_session(template(journal), "bad")

    assert same_error(caught.value.__cause__, RuntimeError)
    assert caught.value.__cause__ is caught.value.error


def test_plugin_error_carries_the_plugins_own_exception(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host()
    journal.fail_first_start = True

    with pytest.raises(PluginError) as caught:
        host.start_session(template(journal), "bad")

    assert isinstance(caught.value.error, RuntimeError)
    assert str(caught.value.error) == "journal storage unavailable"


def test_start_session_with_a_missing_registry_profile(make_host: HostFactory) -> None:
    host = make_host(providers=ProviderRegistry())

    with pytest.raises(RegistryProfileMissing, match="acme") as caught:
        host.start_session(template(model="registry:acme:echo:e1"), "r1")

    assert caught.value.profile == "acme"
    assert host.list_sessions() == []
    assert host.registry.count() == 0


@pytest.mark.parametrize(
    ("attrs", "error", "message"),
    [
        ({"colour": "red"}, TypeError, "unknown session attribute.*'colour'"),
        ({"blueprint": 5}, TypeError, "session attribute blueprint must be"),
        ({"max_steering_queue": 0}, ValueError, "max_steering_queue must be >= 1"),
        ({"event_buffer_size": "big"}, TypeError, "event_buffer_size must be an int"),
        ({"tenant_id": ""}, ValueError, "tenant_id must be a non-empty str"),
        ({"tenant_id": " \t"}, ValueError, r"tenant_id must be a non-empty str \(not only whi"),
        ({"model": "  "}, ValueError, "model must be a non-empty str or None"),
        ({"api_key": 42}, TypeError, "api_key must be"),
        ({"plugins": "journal"}, TypeError, "plugins must be a list"),
    ],
    ids=[
        "unknown",
        "blueprint-type",
        "steering-zero",
        "buffer-type",
        "empty-tenant",
        "blank-tenant",
        "blank-model",
        "key",
        "plugins",
    ],
)
def test_start_session_rejects_invalid_attributes(
    make_host: HostFactory, attrs: dict[str, Any], error: type[Exception], message: str
) -> None:
    host = make_host()

    with pytest.raises(error, match=message):
        host.start_session(template(), "x", **attrs)

    assert host.list_sessions() == []
    assert host.registry.count() == 0
    assert host.start_session(template(), "x") == "x"


def test_start_session_rejects_a_bad_session_id_and_template(make_host: HostFactory) -> None:
    host = make_host()
    with pytest.raises(ValueError, match="session_id must be a non-empty str"):
        host.start_session(template(), "")
    with pytest.raises(TypeError, match=r"template must be an actors\.AgentTemplate"):
        host.start_session("echo", "x")  # type: ignore[arg-type]


# -- talking to a session --------------------------------------------------------------------


def test_send_history_usage_and_tools(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())

    assert host.send(sid, "hello") == Message.assistant("echo: hello")
    assert host.send(sid, '/add {"a": 2, "b": 3}').content == "add returned: 5"

    history = host.history(sid)
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert history[4].content == "5"
    # EchoModel counts words of what it newly reads (system prompt included) and writes.
    assert host.checkpoint(sid).usage() == Usage((5 + 1) + 5 + 1, 2 + 1 + 3)
    with pytest.raises(TypeError, match="as a str"):
        host.send(sid, b"bytes")  # type: ignore[arg-type]


def test_steer_injects_before_the_next_model_call(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())

    host.steer(sid, "also mention the weather")
    answer = host.send(sid, "what now?")

    assert answer.content == "echo: what now?"
    assert _contents(host.history(sid)) == [
        "also mention the weather",
        "what now?",
        "echo: what now?",
    ]
    with pytest.raises(SessionNotFound):
        host.steer("nobody", "x")


def test_events_stream_with_a_cursor(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "one")

    first = host.events(sid)
    assert [e.type for e in first.events] == ["turn_started", "model_response", "turn_finished"]
    host.send(sid, "two")
    second = host.events(sid, since=first.cursor)
    assert [e.type for e in second.events] == ["turn_started", "model_response", "turn_finished"]
    assert second.events[0].data["text"] == "two"
    assert host.events(sid, since=second.cursor).events == ()
    with pytest.raises(SessionNotFound):
        host.events("nobody")


def test_checkpoint_on_demand_with_a_label(make_host: HostFactory, journal: Journal) -> None:
    host = make_host(checkpoint_every=None)
    sid = host.start_session(template(journal))
    host.send(sid, "hello")

    snapshot = host.checkpoint(sid, label="before-deploy")

    assert snapshot.label == "before-deploy"
    assert snapshot.messages() == host.history(sid)
    assert snapshot.stripped_fields == ("plugins.journal.handle",)
    assert host.store.load(sid) == snapshot
    assert [(c.checkpoint_id, c.label) for c in host.store.list(sid)] == [
        (snapshot.checkpoint_id, "before-deploy")
    ]


def test_list_sessions_by_tenant(make_host: HostFactory) -> None:
    host = make_host()
    host.start_session(template(), "a1", tenant_id="acme")
    host.start_session(template(), "a2", tenant_id="acme")
    host.start_session(template(), "b1", tenant_id="bolt")
    host.start_session(template(model=FlakyModel()), "d1")

    assert sorted(s.session_id for s in host.list_sessions()) == ["a1", "a2", "b1", "d1"]
    acme = host.list_sessions("acme")
    assert sorted(s.session_id for s in acme) == ["a1", "a2"]
    assert {(s.tenant_id, s.status, s.model) for s in acme} == {("acme", "active", "echo")}
    assert [s.session_id for s in host.list_sessions("bolt")] == ["b1"]
    assert [(s.session_id, s.model) for s in host.list_sessions("default")] == [
        ("d1", "flaky-echo")
    ]
    assert host.list_sessions("nobody") == []


def test_stop_session_checkpoints_evicts_and_forgets(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host(checkpoint_every=None)
    sid = host.start_session(template(journal), tenant_id="acme")
    host.send(sid, "hello")
    assert host.store.list(sid) == []

    host.stop_session(sid)

    # Final checkpoint, with the turn that was never checkpointed.
    assert _contents(host.store.load(sid).messages()) == ["hello", "echo: hello"]
    assert registry_lookup_fails(host, sid)
    assert host.list_sessions() == []
    assert host.list_sessions("acme") == []
    assert session_thread_gone(journal, sid)
    assert len(journal.of(sid)) == 1  # not restarted
    assert journal.ends == [(sid, "normal")]
    for call in (
        lambda: host.send(sid, "again"),
        lambda: host.history(sid),
        lambda: host.stop_session(sid),
        lambda: host.kill(sid),
        lambda: host.checkpoint(sid),
    ):
        with pytest.raises(SessionNotFound):
            call()


def test_shutdown_checkpoints_everything_and_releases_every_thread(
    tmp_path: Path, mode: str
) -> None:
    before = set(threading.enumerate())
    journal = Journal(tmp_path)
    with AgentHost(data_dir=tmp_path / "data", checkpoint_every=None, **host_options(mode)) as host:
        for index in range(3):
            host.start_session(template(journal), f"s{index}")
            host.send(f"s{index}", f"hello {index}")
    host.shutdown()  # idempotent

    assert_threads_back(before)
    assert sorted(end for _, end in journal.ends) == ["normal"] * 3
    with SQLiteCheckpointStore(tmp_path / "data" / "checkpoints.db") as store:
        assert store.sessions() == ["s0", "s1", "s2"]
        assert _contents(store.load("s1").messages()) == ["hello 1", "echo: hello 1"]


def test_a_shut_down_host_refuses_new_sessions(make_host: HostFactory) -> None:
    host = make_host()
    host.start_session(template(), "s")
    host.shutdown()

    with pytest.raises(RuntimeError, match="shut down"):
        host.start_session(template(), "late")
    for sid in ("s", "never-there"):  # retryable (its checkpoints stand), not a 404
        with pytest.raises(HostShutDown, match="this AgentHost is shut down; create a new one"):
            host.send(sid, "hello")
        with pytest.raises(HostShutDown):
            host.history(sid)


def test_a_shut_down_host_with_its_own_store_refuses_new_sessions(
    tmp_path: Path, mode: str
) -> None:
    """Regression: the closed store's ValueError came out before the host's own error."""
    host = AgentHost(data_dir=tmp_path, **host_options(mode))
    host.shutdown()

    with pytest.raises(RuntimeError, match="shut down"):
        host.start_session(template(), "late")
    with pytest.raises(RuntimeError, match="shut down"):
        host.resume("late", template())


# -- checkpoint policy -----------------------------------------------------------------------


def test_default_policy_checkpoints_durably_before_send_returns(tmp_path: Path, mode: str) -> None:
    store = SQLiteCheckpointStore(tmp_path / "c.db")
    with AgentHost(store=store, **host_options(mode)) as host:
        sid = host.start_session(template())
        for index in range(4):
            host.send(sid, f"turn {index}")
            # A second connection to the file sees it: it is committed, not cached.
            with SQLiteCheckpointStore(tmp_path / "c.db") as reader:
                assert reader.load(sid).messages() == host.history(sid)
            assert len(store.list(sid)) == index + 1
    store.close()


def test_checkpoint_every_third_turn(make_host: HostFactory) -> None:
    host = make_host(checkpoint_every=3)
    sid = host.start_session(template())

    counts = []
    for index in range(7):
        host.send(sid, f"turn {index}")
        counts.append(len(host.store.list(sid)))

    assert counts == [0, 0, 1, 1, 1, 2, 2]
    assert len(host.store.load(sid).messages()) == 12


def test_checkpoint_every_none_is_manual_only(make_host: HostFactory) -> None:
    host = make_host(checkpoint_every=None)
    sid = host.start_session(template())
    host.send(sid, "kept")
    host.checkpoint(sid, label="manual")
    host.send(sid, "lost in the crash")
    assert [c.label for c in host.store.list(sid)] == ["manual"]

    _crash_and_wait(host, sid)

    # Resumed from the only checkpoint there was: the manual one.
    assert _contents(host.history(sid)) == ["kept", "echo: kept"]


@pytest.mark.parametrize("every", [0, -1, True, 1.5])
def test_invalid_checkpoint_every_is_rejected(every: Any) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        AgentHost(store=MemoryCheckpointStore(), checkpoint_every=every)


# -- crash recovery --------------------------------------------------------------------------


def test_converse_crash_resume_continue(make_host: HostFactory, tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    host = make_host()
    sid = host.start_session(template(journal), "e2e", tenant_id="acme", api_key="k")
    other = host.start_session(template(journal), "bystander")
    host.send(sid, "hello")
    host.send(sid, '/add {"a": 20, "b": 22}')
    host.send(other, "hi")
    history = host.history(sid)
    before = host.checkpoint(sid)
    other_ref = host.registry.get(other).actor_ref
    waiter = watch_events(host, sid)

    host.kill(sid, reason="chaos monkey")
    resumed = waiter.wait_for("resumed")

    # The registry evicted it and the supervisor brought it back from its checkpoint.
    crashed = waiter.wait_for("crashed")
    assert "chaos monkey" in crashed.data["reason"]
    assert resumed.data["checkpoint_id"] is not None
    assert waiter.types()[-2:] == ["crashed", "resumed"]
    assert host.history(sid) == history
    after = host.checkpoint(sid)
    assert after.usage() == before.usage()
    assert after.state["plugins"]["journal"]["turns_seen"] == 2
    assert after.stripped_fields == ("plugins.journal.handle",)  # live again, stripped again
    assert after.state["turns"] == before.state["turns"] == 2
    # The plugin saw the resume, the stripped live field, and rebuilt it.
    starts = journal.of(sid)
    assert [(s.resumed, s.stripped, s.turns_seen) for s in starts] == [
        (False, (), 0),
        (True, ("handle",), 2),
    ]
    assert is_stripped_marker(starts[1].handle_was)
    assert sid in {ended for ended, _ in journal.ends}  # its reason: see the test below
    # Metadata survived: same tenant, same API key.
    assert [s.status for s in host.list_sessions("acme")] == ["active"]
    assert host.registry.api_key_matches(sid, "k")
    # It continues: with its history, and the rebuilt file handle works.
    assert host.send(sid, "and now?").content == "echo: and now?"
    assert len(host.history(sid)) == len(history) + 2
    assert (tmp_path / "e2e.journal").read_text(encoding="utf-8").splitlines() == [
        "turn 1",
        "turn 2",
        "turn 3",
    ]
    # The other session never noticed.
    assert host.registry.get(other).actor_ref is other_ref
    assert len(journal.of(other)) == 1


def test_plugins_see_a_killed_session_end_with_error(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host()
    sid = host.start_session(template(journal), "victim")
    host.send(sid, "hello")

    _crash_and_wait(host, sid)

    assert journal.wait_ends(sid, 1) == ["error"]
    assert host.send(sid, "again").content == "echo: again"


def test_registry_evicts_before_anyone_hears_of_the_death(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    ref = host.registry.get(sid).actor_ref
    seen: list[tuple[bool, bool]] = []
    heard = threading.Event()

    def on_down(down: Down) -> None:
        # Early phase, added after the registry's own watcher: runs after the
        # eviction and before the supervisor gets its Down (so no restart yet).
        seen.append((registry_lookup_fails(host, sid), down.actor_ref.is_alive()))
        heard.set()

    monitor(ref, on_down, early=True)
    waiter = watch_events(host, sid)
    host.kill(sid)

    assert heard.wait(WAIT)
    assert seen == [(True, False)]
    waiter.wait_for("resumed")
    new_ref = host.registry.get(sid).actor_ref
    assert new_ref is not ref
    assert new_ref.is_alive()


def test_a_tool_raising_system_exit_crashes_its_session_alone(
    make_host: HostFactory, journal: Journal, mode: str
) -> None:
    host = make_host()
    sid = host.start_session(template(journal), "victim")
    other = host.start_session(template(journal), "other")
    host.send(sid, "before")
    other_ref = host.registry.get(other).actor_ref
    waiter = watch_events(host, sid)

    with pytest.raises(SessionCrashed, match="victim") as caught:
        host.send(sid, "/exit_tool {}")

    if mode == "thread":
        assert isinstance(caught.value.__cause__.__cause__, SystemExit)  # type: ignore[union-attr]
    else:  # raised in the worker: only its repr crossed the pipe
        assert "SystemExit(3)" in str(caught.value)
    waiter.wait_for("resumed")
    # The crashing turn was never acknowledged, nor saved.
    assert _contents(host.history(sid)) == ["before", "echo: before"]
    assert host.send(sid, "after").content == "echo: after"
    # Nobody else was touched: same actor, same thread, host up.
    assert host.registry.get(other).actor_ref is other_ref
    assert host.send(other, "still here").content == "echo: still here"
    assert len(journal.of(other)) == 1
    assert {s.status for s in host.list_sessions()} == {"active"}


def test_the_model_raising_is_not_a_crash(make_host: HostFactory, journal: Journal) -> None:
    host = make_host()
    sid = host.start_session(template(journal, model=FlakyModel()))
    host.send(sid, "fine")
    ref = host.registry.get(sid).actor_ref
    cursor = host.events(sid).cursor

    with pytest.raises(Exception, match="provider unavailable") as caught:
        host.send(sid, "!fail please")

    assert same_error(caught.value, ModelDown)  # its own type: see the test below
    assert host.registry.get(sid).actor_ref is ref
    assert ref.is_alive()
    assert _contents(host.history(sid)) == ["fine", "echo: fine"]  # not recorded
    assert _contents(host.store.load(sid).messages()) == ["fine", "echo: fine"]
    types = [e.type for e in host.events(sid, since=cursor).events]
    assert types == ["turn_started", "error"]
    assert len(journal.of(sid)) == 1
    assert host.send(sid, "again").content == "echo: again"


def test_send_raises_the_models_own_exception(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(model=FlakyModel()))

    with pytest.raises(ModelDown, match="provider unavailable"):
        host.send(sid, "!fail please")


def test_a_session_crashing_on_every_resume_is_given_up(
    make_host: HostFactory, journal: Journal
) -> None:
    clock = FakeClock()
    host = make_host(clock=clock, max_restarts=2, max_seconds=5.0)
    sid = host.start_session(template(journal), "doomed", tenant_id="acme")
    other = host.start_session(template(journal), "healthy")
    host.send(sid, "hello")
    waiter = watch_events(host, sid)
    journal.broken = True

    host.kill(sid)
    given_up = waiter.wait_for("given_up")

    assert "journal cannot be reopened" in given_up.data["reason"]
    # The first start, then max_restarts resumes that failed; the next one was refused.
    assert [s.resumed for s in journal.of(sid)] == [False, True, True]
    assert [(s.session_id, s.status) for s in host.list_sessions("acme")] == [("doomed", "failed")]
    assert registry_lookup_fails(host, sid)
    with pytest.raises(SessionFailed, match="doomed") as failed:
        host.send(sid, "anyone?")
    assert "journal cannot be reopened" in str(failed.value)  # the cause, not a set phrase
    assert "past its restart intensity" in str(failed.value)
    assert host.send(other, "fine").content == "echo: fine"
    # Its checkpoints are kept: fix the cause and resume.
    journal.broken = False
    assert host.resume(sid, template(journal)) == sid
    assert _contents(host.history(sid)) == ["hello", "echo: hello"]
    assert host.send(sid, "back").content == "echo: back"
    assert [s.status for s in host.list_sessions("acme")] == ["active"]


def test_restart_intensity_is_per_session_and_per_window(make_host: HostFactory) -> None:
    clock = FakeClock()
    host = make_host(clock=clock, max_restarts=1, max_seconds=5.0)
    sid = host.start_session(template(), "flappy")
    other = host.start_session(template(), "other")

    _crash_and_wait(host, sid)
    clock.now += 10  # outside the window: the first restart no longer counts
    _crash_and_wait(host, sid)
    _crash_and_wait(host, other)  # other sessions have their own budget
    waiter = watch_events(host, sid)
    host.kill(sid)  # a second restart within 5 s: over the limit

    waiter.wait_for("given_up")
    assert {s.session_id: s.status for s in host.list_sessions()} == {
        "flappy": "failed",
        "other": "active",
    }
    with pytest.raises(SessionFailed):
        host.send(sid, "x")
    assert host.send(other, "y").content == "echo: y"


# -- resume ----------------------------------------------------------------------------------


def test_resume_a_stopped_session_from_its_latest_checkpoint(
    make_host: HostFactory, journal: Journal
) -> None:
    host = make_host()
    sid = host.start_session(template(journal), tenant_id="acme")
    host.send(sid, "one")
    host.send(sid, "two")
    history = host.history(sid)
    host.stop_session(sid)

    assert host.resume(sid, template(journal)) == sid

    assert host.history(sid) == history
    assert [(s.session_id, s.tenant_id) for s in host.list_sessions()] == [(sid, "acme")]
    assert [(s.resumed, s.stripped) for s in journal.of(sid)] == [
        (False, ()),
        (True, ("handle",)),
    ]
    assert host.send(sid, "three").content == "echo: three"


def test_resume_from_a_given_checkpoint(make_host: HostFactory, journal: Journal) -> None:
    host = make_host()
    sid = host.start_session(template(journal))
    host.send(sid, "one")
    early = host.checkpoint(sid, label="after one")
    host.send(sid, "two")
    host.stop_session(sid)

    host.resume(sid, template(journal), checkpoint_id=early.checkpoint_id)

    assert _contents(host.history(sid)) == ["one", "echo: one"]
    assert [(s.resumed, s.stripped, s.turns_seen) for s in journal.of(sid)][-1] == (
        True,
        ("handle",),
        1,
    )
    host.send(sid, "two again")
    assert _contents(host.history(sid)) == ["one", "echo: one", "two again", "echo: two again"]


def test_a_crash_after_resuming_an_older_checkpoint_keeps_that_checkpoint(
    make_host: HostFactory,
) -> None:
    """Regression: the crash restart came back from the store's newest checkpoint,
    resurrecting the turns the resume had abandoned."""
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "one")
    early = host.checkpoint(sid)
    host.send(sid, "two")
    host.stop_session(sid)
    host.resume(sid, template(), checkpoint_id=early.checkpoint_id)

    _crash_and_wait(host, sid)

    assert _contents(host.history(sid)) == ["one", "echo: one"]


def test_resuming_an_older_checkpoint_sorts_after_a_newest_made_by_a_clock_ahead(
    make_host: HostFactory,
) -> None:
    """The newest checkpoint was stamped by a process whose clock runs a minute ahead (a
    worker's ids need not sort with the host's): the resumed one must still be newest."""
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "one")
    early = host.checkpoint(sid)
    host.send(sid, "two")
    host.stop_session(sid)
    newest = host.store.load(sid)
    ahead_ms = int(newest.checkpoint_id[:12], 16) + 60_000
    host.store.save(dataclasses.replace(newest, checkpoint_id=f"{ahead_ms:012x}{0:020x}"))

    host.resume(sid, template(), checkpoint_id=early.checkpoint_id)

    assert host.store.load(sid).label == f"resumed from {early.checkpoint_id}"
    _crash_and_wait(host, sid)
    assert _contents(host.history(sid)) == ["one", "echo: one"]


def test_resume_errors(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template())
    host.send(sid, "one")

    with pytest.raises(SessionAlreadyExists, match=f"{sid}' already exists; it is active"):
        host.resume(sid, template())
    with pytest.raises(CheckpointNotFound, match="nobody"):
        host.resume("nobody", template())
    host.stop_session(sid)
    with pytest.raises(CheckpointNotFound, match="no-such-checkpoint"):
        host.resume(sid, template(), checkpoint_id="no-such-checkpoint")
    assert host.list_sessions() == []


def test_resume_with_a_missing_registry_profile_then_registered(
    make_host: HostFactory, journal: Journal
) -> None:
    providers = ProviderRegistry()
    providers.register("acme", "echo", lambda _model_id: EchoModel())
    store = MemoryCheckpointStore()
    model = "registry:acme:echo:echo-1"
    first = make_host(store=store, providers=providers)
    sid = first.start_session(template(journal, model=model))
    first.send(sid, "hello")
    first.shutdown()
    providers.unregister("acme")  # the new host process has not set up its profiles yet

    host = make_host(store=store, providers=providers)
    with pytest.raises(RegistryProfileMissing, match="acme") as caught:
        host.resume(sid, template(journal, model=model))

    assert caught.value.profile == "acme"
    assert host.list_sessions() == []
    assert host.registry.count() == 0
    assert len(journal.of(sid)) == 1  # no session was built
    providers.register("acme", "echo", lambda _model_id: EchoModel())
    assert host.resume(sid, template(journal, model=model)) == sid
    assert _contents(host.history(sid)) == ["hello", "echo: hello"]
    assert host.checkpoint(sid).state["model"] == model
    assert host.send(sid, "again").content == "echo: again"


def test_resume_a_snapshot_whose_model_string_is_plain(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    first = make_host(store=store)
    sid = first.start_session(template(model="echo"))
    first.send(sid, "hello")
    first.shutdown()
    assert store.load(sid).state["model"] == "echo"

    host = make_host(store=store, providers=ProviderRegistry())
    host.resume(sid, template(model="echo"))

    assert _contents(host.history(sid)) == ["hello", "echo: hello"]
    assert host.send(sid, "more").content == "echo: more"


def test_resume_takes_the_live_half_from_the_template(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    first = make_host(store=store)
    sid = first.start_session(template(model="echo"))
    first.send(sid, "hello")
    first.shutdown()

    host = make_host(store=store)
    host.resume(sid, template(model=FlakyModel()))

    with pytest.raises(Exception, match="provider unavailable") as caught:
        host.send(sid, "!fail now")
    assert same_error(caught.value, ModelDown)
    assert host.checkpoint(sid).state["model"] == "flaky-echo"


def _schema_v2_registry() -> MigrationRegistry:
    """Version 1 kept the history under ``state.history`` and usage as ``state.tokens``."""
    registry = MigrationRegistry(current_version=SCHEMA_VERSION + 1)

    @registry.register(SCHEMA_VERSION)
    def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        state = dict(data["state"])
        if "history" in state:  # snapshots written in the new shape need no change
            state["messages"] = state.pop("history")
            tokens = state.pop("tokens")
            state["usage"] = {
                "input_tokens": tokens["in"],
                "output_tokens": tokens["out"],
                "total": tokens["in"] + tokens["out"],
            }
            state.setdefault("turns", len(state["messages"]) // 2)
        return {**data, "state": state}

    return registry


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_resume_a_checkpoint_of_an_older_schema_through_a_migration(
    make_host: HostFactory, journal: Journal, kind: str, tmp_path: Path
) -> None:
    migrations = _schema_v2_registry()
    store: CheckpointStore = (
        MemoryCheckpointStore(migrations=migrations)
        if kind == "memory"
        else SQLiteCheckpointStore(tmp_path / "legacy.db", migrations=migrations)
    )
    old = Snapshot.new(session_id="legacy", state={}).to_dict()
    old["state"] = {
        "session_id": "legacy",
        "history": [
            Message.user("old question").to_dict(),
            Message.assistant("old answer").to_dict(),
        ],
        "tokens": {"in": 2, "out": 2},
        "metadata": {"tenant_id": "acme"},
        "model": "echo",
        "plugins": {"journal": {"turns_seen": 1}},
    }
    # Written as this code writes version 1, in the old shape the test migration upgrades.
    store.save(Snapshot.from_dict(old))
    upgraded = Snapshot.deserialize(encode_plain(old), migrations=migrations)
    assert upgraded.schema_version == SCHEMA_VERSION + 1
    assert upgraded.usage() == Usage(2, 2)
    assert store.load("legacy").schema_version == SCHEMA_VERSION + 1

    host = make_host(store=store)
    host.resume("legacy", template(journal))

    assert _contents(host.history("legacy")) == ["old question", "old answer"]
    assert [(s.session_id, s.tenant_id) for s in host.list_sessions()] == [("legacy", "acme")]
    assert [(s.resumed, s.turns_seen) for s in journal.of("legacy")] == [(True, 1)]
    host.send("legacy", "new question")
    latest = host.checkpoint("legacy")
    assert latest.usage() == Usage(2 + 2, 2 + 3)
    assert latest.state["plugins"]["journal"]["turns_seen"] == 2
    assert _contents(store.load("legacy").messages())[-2:] == ["new question", "echo: new question"]


def test_resume_all_skips_live_sessions_and_reports_none_twice(make_host: HostFactory) -> None:
    store = MemoryCheckpointStore()
    first = make_host(store=store)
    for name in ("a", "b", "c"):
        first.start_session(template(), name)
        first.send(name, f"hi {name}")
    first.shutdown()

    host = make_host(store=store)
    host.resume("b", template())
    assert sorted(host.resume_all(template())) == ["a", "c"]
    assert host.resume_all(lambda _sid: template()) == []
    assert {s.session_id: s.status for s in host.list_sessions()} == dict.fromkeys("abc", "active")
    assert _contents(host.history("c")) == ["hi c", "echo: hi c"]


# -- concurrency -----------------------------------------------------------------------------


def test_many_threads_call_the_host_at_once(make_host: HostFactory) -> None:
    host = make_host()
    own = [host.start_session(template(), f"own-{i}") for i in range(8)]
    shared = host.start_session(template(), "shared")
    callers = [(sid, f"own-{i}") for i, sid in enumerate(own)]
    callers += [(shared, f"shared-{i}") for i in range(6)]
    turns = 15
    barrier = threading.Barrier(len(callers))

    def converse(sid: str, name: str) -> list[tuple[str, str]]:
        barrier.wait(WAIT)
        done = []
        for turn in range(turns):
            text = f"{name} says {turn}"
            done.append((text, host.send(sid, text, timeout=WAIT).content or ""))
        return done

    with ThreadPoolExecutor(len(callers)) as pool:
        futures = [pool.submit(converse, sid, name) for sid, name in callers]
        results = [f.result(timeout=WAIT * 4) for f in futures]

    for (_sid, name), acked in zip(callers, results, strict=True):
        assert acked == [(f"{name} says {t}", f"echo: {name} says {t}") for t in range(turns)]
    for index, sid in enumerate(own):
        assert pairs(host.history(sid)) == results[index]
    # One session, six callers: every turn whole (user then its answer), each caller in order.
    shared_pairs = pairs(host.history(shared))
    assert len(host.history(shared)) == 2 * 6 * turns
    assert all(answer == f"echo: {text}" for text, answer in shared_pairs)
    for index in range(6):
        mine = [p for p in shared_pairs if p[0].startswith(f"shared-{index} ")]
        assert mine == results[len(own) + index]
