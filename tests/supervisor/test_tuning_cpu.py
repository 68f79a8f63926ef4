"""``pin_to_one_cpu``: every thread of the process on one CPU, and worker processes back
on every CPU the host's process had (``supervisor.tuning``)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence

import pytest

from actors import AgentTemplate, Message, ModelResponse, Tool, Usage
from supervisor import AgentHost, MemoryCheckpointStore, pin_to_one_cpu, tuning

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's (os.sched_getaffinity)"
)

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two = pytest.mark.skipif(
    len(ALLOWED) < 2, reason="one CPU: a pinned thread cannot be told from a free one"
)


def _cpus_of_every_thread() -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}


@pytest.fixture(autouse=True)
def _unpin() -> Iterator[None]:
    """Every thread back on the CPUs it had, and the module's record forgotten: the rest of
    the test process (and what it starts) must not run on one CPU."""
    before = frozenset(os.sched_getaffinity(0))
    yield
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.sched_setaffinity(int(thread), before)
    tuning._unpinned = None


class _Parked:
    """A thread that started before the pin and waits until told to report its CPUs."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.cpus: set[int] = set()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.go.wait(30)
        self.cpus = os.sched_getaffinity(0)

    def report(self) -> set[int]:
        self.go.set()
        self.thread.join(30)
        return self.cpus


@needs_two
def test_threads_running_before_and_started_after_share_the_one_cpu() -> None:
    parked = _Parked()
    cpu = ALLOWED[-1]
    assert pin_to_one_cpu(cpu) == cpu
    started: list[set[int]] = []
    later = threading.Thread(target=lambda: started.append(os.sched_getaffinity(0)))
    later.start()
    later.join(30)
    assert os.sched_getaffinity(0) == {cpu}
    assert parked.report() == {cpu}
    assert started == [{cpu}]
    assert _cpus_of_every_thread() == {frozenset({cpu})}
    assert tuning.unpinned_cpus() == frozenset(ALLOWED)


def test_by_default_it_keeps_the_cpu_the_caller_runs_on() -> None:
    cpu = pin_to_one_cpu()
    assert cpu in ALLOWED
    assert os.sched_getaffinity(0) == {cpu}


@needs_two
def test_a_pinned_process_may_move_to_another_of_its_first_cpus() -> None:
    """The CPUs to choose from stay the ones before the first pin, not the one pinned to."""
    pin_to_one_cpu(ALLOWED[0])
    assert pin_to_one_cpu(ALLOWED[-1]) == ALLOWED[-1]
    assert os.sched_getaffinity(0) == {ALLOWED[-1]}
    assert tuning.unpinned_cpus() == frozenset(ALLOWED)


@pytest.mark.parametrize("bad", [-1, 1_000_000, True, "0", 0.0])
def test_a_cpu_the_process_may_not_run_on_is_refused_and_nothing_changes(bad: object) -> None:
    with pytest.raises(ValueError, match=r"cpu must be one of the CPUs this process may run on, "
                       + rf"\[{', '.join(map(str, ALLOWED))}\]; got"):  # fmt: skip
        pin_to_one_cpu(bad)  # type: ignore[arg-type]
    assert sorted(os.sched_getaffinity(0)) == ALLOWED
    assert tuning.unpinned_cpus() is None


def test_where_threads_cannot_be_pinned_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_setaffinity")
    with pytest.raises(NotImplementedError, match="only Linux has"):
        pin_to_one_cpu()
    assert tuning.unpinned_cpus() is None


class CpusModel:
    """Answers with the CPUs of the thread it runs on: a session's, in a host's process or in
    a worker's."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        return ModelResponse(Message.assistant(repr(sorted(os.sched_getaffinity(0)))), Usage(1, 1))


@needs_two
@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "worker"])
def test_sessions_run_on_the_pinned_cpu_and_workers_on_every_cpu_before(
    workers: int | None,
) -> None:
    """A host's session threads inherit the CPU; a worker process, a GIL of its own, gets
    back every CPU the host's process had (it would otherwise share the host's one). Spawned:
    a forkserver that this test process started before the pin would hand on every CPU
    anyway."""
    cpu = pin_to_one_cpu(ALLOWED[-1])
    host = (
        AgentHost(MemoryCheckpointStore())
        if workers is None
        else AgentHost(MemoryCheckpointStore(), workers=workers, worker_start_method="spawn")
    )
    with host:
        sid = host.start_session(AgentTemplate(model=CpusModel()))
        answer = host.send(sid, "where?").content
    assert answer == repr([cpu] if workers is None else ALLOWED)
