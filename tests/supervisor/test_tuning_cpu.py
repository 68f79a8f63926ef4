"""``pin_to_one_cpu``: every thread of the process on one CPU, scheduled as batch work, and
worker processes back on every CPU, scheduled as the host's process was
(``supervisor.tuning``)."""

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


POLICY = os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else 0


def _every_thread() -> set[tuple[frozenset[int], int]]:
    """The CPUs and the scheduling policy of each thread of this process, as a set."""
    return {
        (frozenset(os.sched_getaffinity(int(t))), os.sched_getscheduler(int(t)))
        for t in os.listdir("/proc/self/task")
    }


def _mine() -> tuple[set[int], int]:
    return os.sched_getaffinity(0), os.sched_getscheduler(0)


@pytest.fixture(autouse=True)
def _unpin() -> Iterator[None]:
    """Every thread back as it ran, and the module's record forgotten: the rest of the
    test process (and what it starts) must not run on one CPU."""
    before = frozenset(os.sched_getaffinity(0))
    yield
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.sched_setaffinity(int(thread), before)
            os.sched_setscheduler(int(thread), POLICY, os.sched_param(0))
    tuning._before = None


class _Parked:
    """A thread that started before the pin and waits until told to report how it runs."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.found: tuple[set[int], int] | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.go.wait(30)
        self.found = _mine()

    def report(self) -> tuple[set[int], int] | None:
        self.go.set()
        self.thread.join(30)
        return self.found


@needs_two
def test_threads_running_before_and_started_after_share_the_one_cpu_as_batch_work() -> None:
    parked = _Parked()
    cpu = ALLOWED[-1]
    assert pin_to_one_cpu(cpu) == cpu
    started: list[tuple[set[int], int]] = []
    later = threading.Thread(target=lambda: started.append(_mine()))
    later.start()
    later.join(30)
    pinned = ({cpu}, os.SCHED_BATCH)
    assert _mine() == pinned
    assert parked.report() == pinned
    assert started == [pinned]
    assert _every_thread() == {(frozenset({cpu}), os.SCHED_BATCH)}
    assert tuning.scheduling_before_pin() == tuning.Scheduling(frozenset(ALLOWED), POLICY)


def test_by_default_it_keeps_the_cpu_the_caller_runs_on() -> None:
    cpu = pin_to_one_cpu()
    assert cpu in ALLOWED
    assert _mine() == ({cpu}, os.SCHED_BATCH)


def test_without_batch_the_threads_keep_their_scheduling_policy() -> None:
    cpu = pin_to_one_cpu(batch=False)
    assert _mine() == ({cpu}, POLICY)


@needs_two
def test_a_pinned_process_may_move_to_another_of_its_first_cpus() -> None:
    """The CPUs to choose from stay the ones before the first pin, not the one pinned to,
    and so does the policy that workers get back."""
    pin_to_one_cpu(ALLOWED[0])
    assert pin_to_one_cpu(ALLOWED[-1], batch=False) == ALLOWED[-1]
    assert _mine() == ({ALLOWED[-1]}, POLICY)
    assert tuning.scheduling_before_pin() == tuning.Scheduling(frozenset(ALLOWED), POLICY)


@pytest.mark.parametrize("bad", [-1, 1_000_000, True, "0", 0.0])
def test_a_cpu_the_process_may_not_run_on_is_refused_and_nothing_changes(bad: object) -> None:
    with pytest.raises(ValueError, match=r"cpu must be one of the CPUs this process may run on, "
                       + rf"\[{', '.join(map(str, ALLOWED))}\]; got"):  # fmt: skip
        pin_to_one_cpu(bad)  # type: ignore[arg-type]
    assert _mine() == (set(ALLOWED), POLICY)
    assert tuning.scheduling_before_pin() is None


def test_where_threads_cannot_be_pinned_it_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_setaffinity")
    with pytest.raises(NotImplementedError, match="only Linux has"):
        pin_to_one_cpu()
    assert tuning.scheduling_before_pin() is None


class CpusModel:
    """Answers with the CPUs and the scheduling policy of the thread it runs on: a session's,
    in a host's process or in a worker's."""

    def generate(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelResponse:
        found = (sorted(os.sched_getaffinity(0)), os.sched_getscheduler(0))
        return ModelResponse(Message.assistant(repr(found)), Usage(1, 1))


@needs_two
@pytest.mark.parametrize("workers", [None, 1], ids=["threads", "worker"])
def test_sessions_run_as_pinned_and_workers_as_the_process_ran_before(
    workers: int | None,
) -> None:
    """A host's session threads inherit the CPU and the policy; a worker process, a GIL of
    its own, gets back every CPU the host's process had (it would otherwise share the
    host's one) and its policy. Spawned:
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
    assert answer == repr(([cpu], os.SCHED_BATCH) if workers is None else (ALLOWED, POLICY))
