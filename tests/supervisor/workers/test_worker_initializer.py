"""``worker_initializer``: set-up code each worker process runs before it hosts a session.

What the initializer sets up is read back by a tool running in the worker, so
each test sees the worker's own state through the answer of a turn.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable

import pytest

from actors import AgentTemplate, tool
from supervisor import AgentHost, MemoryCheckpointStore, WorkerStartError
from tests.supervisor.workers.worker_tools import fds, watch_events, worker_pid

SETTING = "SESSIONVISOR_TEST_SETTING"


@tool
def setting() -> str:
    """The worker's value of the test setting, and its pid."""
    return f"{os.environ.get(SETTING)} in {os.getpid()}"


def _set_setting(name: str, value: str) -> None:
    os.environ[name] = value


def _fail_to_set_up() -> None:
    raise RuntimeError("no license server")


def _ask_setting(host: AgentHost, session_id: str) -> tuple[str, int]:
    answer = host.send(session_id, "/setting {}").content or ""
    value, _, pid = answer.removeprefix("setting returned: ").partition(" in ")
    return value, int(pid)


def _worker_children() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "sessionvisor-worker"]


def test_every_worker_runs_the_initializer_with_its_arguments() -> None:
    with AgentHost(
        MemoryCheckpointStore(),
        workers=2,
        worker_initializer=_set_setting,
        worker_initargs=(SETTING, "configured"),
    ) as host:
        sids = [host.start_session(AgentTemplate(tools=(setting,))) for _ in range(2)]
        answers = [_ask_setting(host, sid) for sid in sids]

        assert [value for value, _ in answers] == ["configured", "configured"]
        assert {pid for _, pid in answers} == {w.pid for w in host.workers()}  # both workers
        assert SETTING not in os.environ  # it ran there, not here


def test_spawned_workers_run_it_too() -> None:
    with AgentHost(
        MemoryCheckpointStore(),
        workers=1,
        worker_start_method="spawn",
        worker_initializer=_set_setting,
        worker_initargs=(SETTING, "spawned"),
    ) as host:
        sid = host.start_session(AgentTemplate(tools=(setting,)))

        assert _ask_setting(host, sid) == ("spawned", host.workers()[0].pid)


def test_a_closure_initializer_travels_by_value_and_reaches_replacements() -> None:
    value = f"closure-{os.getpid()}"
    initializer: Callable[[], None] = lambda: _set_setting(SETTING, value)  # noqa: E731
    with AgentHost(MemoryCheckpointStore(), workers=1, worker_initializer=initializer) as host:
        sid = host.start_session(AgentTemplate(tools=(setting,)))
        first_value, first_pid = _ask_setting(host, sid)
        resumed = watch_events(host, sid)

        os.kill(worker_pid(host, sid), signal.SIGKILL)
        resumed.wait_for("resumed")

        second_value, second_pid = _ask_setting(host, sid)
        assert first_value == second_value == value
        assert second_pid != first_pid  # a replacement worker ran it too


def test_an_initializer_that_raises_fails_the_host_with_a_clear_error() -> None:
    AgentHost(MemoryCheckpointStore(), workers=1).shutdown()  # the forkserver and its fds stay
    threads_before = threading.active_count()
    fds_before = fds()

    with pytest.raises(WorkerStartError) as caught:
        AgentHost(MemoryCheckpointStore(), workers=2, worker_initializer=_fail_to_set_up)

    message = str(caught.value)
    assert caught.value.exit_status == "exit code 1"
    assert "could not start (exit code 1)" in message
    assert "the worker_initializer raised" in message
    assert _worker_children() == []  # both workers joined: the one that failed and the other
    assert threading.active_count() == threads_before
    assert fds() == fds_before  # no pipe left open


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"worker_initializer": "setup"}, TypeError, "worker_initializer must be callable"),
        (
            {"worker_initializer": _set_setting, "worker_initargs": [SETTING, "x"]},
            TypeError,
            "worker_initargs must be a tuple, got list",
        ),
        (
            {"worker_initargs": (SETTING, "x")},
            TypeError,
            "worker_initargs given without a worker_initializer",
        ),
        (
            {"worker_initializer": _set_setting, "worker_initargs": (threading.Lock(),)},
            TypeError,
            "sent to each worker with cloudpickle, which refused them",
        ),
    ],
)
def test_bad_initializer_options_are_refused_before_any_worker_starts(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AgentHost(MemoryCheckpointStore(), workers=1, **options)  # type: ignore[arg-type]
    assert _worker_children() == []


@pytest.mark.parametrize(
    "options",
    [
        {"worker_initializer": _set_setting, "worker_initargs": (SETTING, "x")},
        {"worker_memory_limit": 1 << 30},
        {"worker_call_timeout": 5.0},
        {"worker_start_method": "spawn"},
    ],
)
def test_worker_options_without_workers_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"only appl(y|ies) to worker processes; pass workers=N"):
        AgentHost(MemoryCheckpointStore(), **options)  # type: ignore[arg-type]
