"""``AgentHost`` checks that complement the suite run in both modes.

``tests/supervisor/test_host.py`` and ``test_host_hibernate.py`` run whole in
thread mode and in process mode; these add what is specific to worker
processes (the exact event stream and snapshot shape across the pipe, a tool
from another module raising, templates that cannot be pickled), each asserted
identically in both modes where both apply.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actors import (
    AgentTemplate,
    EchoModel,
    Message,
    ModelResponse,
    ProviderRegistry,
    Snapshot,
    Tool,
    tool,
)
from supervisor import (
    AgentHost,
    MemoryCheckpointStore,
    SessionCrashed,
    SessionNotFound,
    TemplateNotPicklable,
)
from tests.supervisor.host_helpers import (
    WAIT,
    HostFactory,
    pairs,
    registry_lookup_fails,
    template,
    watch_events,
)
from tests.supervisor.workers.worker_tools import (
    FifoModel,
    Holder,
    boom,
    crash_template,
    worker_pid,
)


def _contents(history: list[Message]) -> list[str | None]:
    return [m.content for m in history]


def test_send_history_events_tools_and_checkpoints(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), "s1", tenant_id="acme")

    assert host.send(sid, "hello").content == "echo: hello"
    assert host.send(sid, '/add {"a": 2, "b": 3}').content == "add returned: 5"

    assert _contents(host.history(sid)) == [
        "hello",
        "echo: hello",
        '/add {"a": 2, "b": 3}',
        None,
        "5",
        "add returned: 5",
    ]
    types = [e.type for e in host.events(sid).events]
    assert types == [
        "turn_started",
        "model_response",
        "turn_finished",
        "turn_started",
        "model_response",
        "tool_call",
        "tool_result",
        "model_response",
        "turn_finished",
    ]
    saved = host.store.load(sid)
    assert saved.state["turns"] == 2
    assert len(saved.messages()) == 6
    assert host.registry.get(sid).tenant_id == "acme"


def test_snapshot_has_the_same_shape_in_both_modes(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(template(), "shape")
    host.send(sid, "hi")

    snap = host.checkpoint(sid, label="mine")

    assert isinstance(snap, Snapshot)
    assert snap.label == "mine"
    assert sorted(snap.state) == [
        "instructions",
        "messages",
        "metadata",
        "model",
        "plugins",
        "provider_state",
        "session_id",
        "turns",
        "usage",
    ]
    assert snap.state["metadata"] == {"tenant_id": "default"}
    assert host.store.load(sid).checkpoint_id == snap.checkpoint_id


def test_a_tool_raising_is_a_tool_message_not_a_crash(make_host: HostFactory) -> None:
    host = make_host()
    sid = host.start_session(crash_template())
    waiter = watch_events(host, sid)

    answer = host.send(sid, "/boom {}")

    assert answer.content == "boom returned: error: ValueError: tool failed on purpose"
    assert waiter.count("crashed") == 0
    assert host.send(sid, "still here").content == "echo: still here"
    assert boom.name == "boom"


def test_stop_resume_hibernate_reactivate_and_list(make_host: HostFactory) -> None:
    host = make_host()
    a = host.start_session(template(), "a", tenant_id="t1")
    b = host.start_session(template(), "b", tenant_id="t2")
    host.send(a, "one")
    host.send(b, "uno")

    assert host.hibernate(b)
    assert {(s.session_id, s.status) for s in host.list_sessions()} == {
        ("a", "active"),
        ("b", "hibernated"),
    }
    assert registry_lookup_fails(host, b)
    assert host.send(b, "dos").content == "echo: dos"
    assert pairs(host.history(b)) == [("uno", "echo: uno"), ("dos", "echo: dos")]

    host.stop_session(a)
    assert [s.session_id for s in host.list_sessions()] == ["b"]
    with pytest.raises(SessionNotFound):
        host.send(a, "gone")
    host.resume(a, template())
    assert host.send(a, "two").content == "echo: two"
    assert pairs(host.history(a)) == [("one", "echo: one"), ("two", "echo: two")]
    assert [s.session_id for s in host.list_sessions("t1")] == ["a"]


def test_unpicklable_template_names_the_attribute() -> None:
    """Process mode only: thread mode never pickles a template."""
    with socket.socket() as sock:
        host = AgentHost(MemoryCheckpointStore(), workers=1)
        try:
            with pytest.raises(TemplateNotPicklable, match=r"plugins\[0\] \(holder\)"):
                host.start_session(template(plugins=[Holder(sock)]), "np")
            assert host.list_sessions() == []
            assert host.send(host.start_session(template()), "ok").content == "echo: ok"
        finally:
            host.shutdown()


class _Client:
    """Stands for an SDK client: an ``OpenAI`` client, for one, holds a ``threading.RLock``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()


class _ClientModel(EchoModel):
    """A model that opens its client when it is built, as a naive adapter would."""

    def __init__(self) -> None:
        self.client = _Client()


def _client_tool() -> Tool:
    client = _Client()

    @tool
    def lookup(query: str) -> str:
        """Look ``query`` up with the client the closure holds."""
        return f"{query}: {client!r}"

    return lookup


_RLOCK = "(TypeError: cannot pickle '_thread.RLock' object)"

UNPICKLABLE_PARTS: dict[str, tuple[AgentTemplate, str]] = {
    "model": (
        AgentTemplate(model=_ClientModel()),
        f"model (_ClientModel) cannot be pickled {_RLOCK}; build the model's client lazily "
        "on first use (e.g. in generate) and keep only plain configuration on the model",
    ),
    "resolved-model": (
        AgentTemplate(model="registry:clients:sdk:large"),
        "model (resolved from 'registry:clients:sdk:large') cannot be pickled "
        f"{_RLOCK}; the model its ProviderRegistry factory returned is sent to the "
        "workers: have it build its client lazily on first use (e.g. in generate)",
    ),
    "tool": (
        AgentTemplate(tools=(boom, _client_tool())),
        f"tools[1] (lookup) cannot be pickled {_RLOCK}; create the resource inside the "
        "tool function, or keep only plain configuration in its closure",
    ),
    "plugin": (
        AgentTemplate(plugins=(Holder(_Client()),)),
        f"plugins[0] (holder) cannot be pickled {_RLOCK}; create live resources in "
        "session_start (they are rebuilt on resume) and keep only configuration on the plugin",
    ),
}


@pytest.mark.parametrize("part", sorted(UNPICKLABLE_PARTS))
def test_an_unpicklable_part_gets_the_fix_that_fits_it(part: str) -> None:
    """Process mode only: the message names the part and says how to fix that kind of part."""
    unpicklable, expected = UNPICKLABLE_PARTS[part]
    providers = ProviderRegistry()
    providers.register("clients", "sdk", lambda _model_id: _ClientModel())
    host = AgentHost(MemoryCheckpointStore(), workers=1, providers=providers)
    try:
        message = f"the template cannot be sent to a worker process: {expected}"
        with pytest.raises(TemplateNotPicklable, match=f"^{re.escape(message)}$"):
            host.start_session(unpicklable, "np")
        assert host.list_sessions() == []
    finally:
        host.shutdown()


def test_a_slow_steps_events_are_seen_while_it_runs(make_host: HostFactory, tmp_path: Path) -> None:
    """Events are batched with replies in a worker, but not held for a slow step."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    gate = os.open(fifo, os.O_RDWR)  # a writer from the start: the model's open never blocks
    host = make_host(checkpoint_every=None)
    sid = host.start_session(template(model=FifoModel(str(fifo))))
    waiter = watch_events(host, sid)
    with ThreadPoolExecutor(1) as pool:
        for turn in (1, 2):
            answer = pool.submit(host.send, sid, f"slow {turn}")
            try:
                started = waiter.wait_for("turn_started", count=turn)
                assert started.data == {"turn": turn, "text": f"slow {turn}"}
                assert not answer.done()
                assert waiter.count("model_response") == turn - 1
            finally:
                os.write(gate, b"x")  # let the model answer
            assert answer.result(WAIT).content == f"echo: slow {turn}"
    os.close(gate)
    assert waiter.types() == ["turn_started", "model_response", "turn_finished"] * 2


class CrashingModel(EchoModel):
    """``EchoModel`` whose session dies (``SystemExit``) on an unanswered ``!crash``."""

    model_string = "crashing-echo"

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        for message in reversed(messages):
            if message.role == "assistant":
                break
            if message.role == "user" and message.content == "!crash":
                raise SystemExit("the session process part died")
        return super().generate(messages, tools)


def test_steering_a_crashed_turn_took_reaches_the_next_incarnation(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(template(model=CrashingModel()))
    waiter = watch_events(host, sid)
    host.steer(sid, "remember X")

    with pytest.raises(SessionCrashed):
        host.send(sid, "!crash")  # the turn takes the steering, then dies
    waiter.wait_for("resumed")

    assert host.send(sid, "next").content == "echo: next"
    assert _contents(host.history(sid)) == ["remember X", "next", "echo: next"]


def test_steering_waiting_when_a_session_hibernates_reaches_it_on_reactivation(
    make_host: HostFactory,
) -> None:
    host = make_host()
    sid = host.start_session(template())
    host.steer(sid, "remember X")

    assert host.hibernate(sid)

    assert host.send(sid, "next").content == "echo: next"
    assert _contents(host.history(sid)) == ["remember X", "next", "echo: next"]


def test_steering_waiting_in_a_killed_worker_reaches_the_resumed_session() -> None:
    with AgentHost(MemoryCheckpointStore(), workers=1) as host:
        sid = host.start_session(template())
        host.send(sid, "first")
        waiter = watch_events(host, sid)
        host.steer(sid, "remember X")  # now in the worker's queue

        os.kill(worker_pid(host, sid), signal.SIGKILL)
        waiter.wait_for("resumed")

        assert host.send(sid, "next").content == "echo: next"
        assert _contents(host.history(sid)) == [
            "first",
            "echo: first",
            "remember X",
            "next",
            "echo: next",
        ]
