"""What a worker-mode host keeps of the templates its sessions ran on.

A long-running host may start each session on a template of its own (per-user
instructions, say): once those sessions are gone and the program dropped the
template, the host must not keep it, as a thread-mode host does not.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, MemoryCheckpointStore
from tests.supervisor.host_helpers import MODES, host_options
from tests.supervisor.workers.worker_tools import LoadCounter


@pytest.fixture(params=MODES)
def host(request: pytest.FixtureRequest) -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), **host_options(str(request.param)))
    try:
        yield host
    finally:
        host.shutdown()


def test_a_stopped_sessions_template_is_not_kept_by_the_host(host: AgentHost) -> None:
    template = AgentTemplate(model="echo", instructions="for user 1 only")
    sid = host.start_session(template)
    assert host.send(sid, "hello").content == "echo: hello"
    host.stop_session(sid)
    dropped = weakref.ref(template)
    del template
    gc.collect()

    assert dropped() is None  # the host held neither it nor (process mode) its pickled bytes


def test_a_template_in_use_is_pickled_once_and_still_serves_new_sessions(
    host: AgentHost,
) -> None:
    template = AgentTemplate(model="echo", instructions="shared")
    first = host.start_session(template)
    host.stop_session(first)
    gc.collect()  # the template lives on (held here): its cached bytes must stay valid
    second = host.start_session(template)

    assert host.send(second, "again").content == "echo: again"
    assert [m.content for m in host.history(second)] == ["again", "echo: again"]


@pytest.fixture
def one_worker() -> Iterator[AgentHost]:
    host = AgentHost(MemoryCheckpointStore(), workers=1)
    try:
        yield host
    finally:
        host.shutdown()


def test_a_worker_keeps_only_the_templates_of_its_sessions(
    one_worker: AgentHost, tmp_path: Path
) -> None:
    """A worker drops a template once no session of its own uses it, and loads it again
    for the next one: a worker serving days of per-user templates does not keep them all."""
    counter = LoadCounter(tmp_path / "loads")
    template = AgentTemplate(model="echo", plugins=[counter])
    first, second = one_worker.start_session(template), one_worker.start_session(template)
    assert len(counter.loads()) == 1  # shared by the sessions of one worker: shipped once
    one_worker.stop_session(first)
    assert one_worker.send(second, "still here").content == "echo: still here"
    one_worker.stop_session(second)  # the last user: the worker drops the template
    third = one_worker.start_session(template)

    assert one_worker.send(third, "back").content == "echo: back"
    [worker] = one_worker.workers()
    assert counter.loads() == [worker.pid, worker.pid]  # shipped again, to the same worker
