"""``AgentHost()``'s settings are checked before it starts anything, and a constructor that
fails later releases what it had started.

Before the fix ``call_timeout`` was checked by the root supervisor's handle, after the
store, the supervisor's actor thread and the worker processes had started: the error
did not name ``call_timeout``, and the leaked non-daemon thread kept the interpreter
from ever exiting. ``call_timeout=inf``, ``max_steps=0``, a negative or NaN
``restart_wait`` and a ``worker_call_timeout`` of 0 were accepted, each breaking every
session later (or the shutdown).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from actors import AgentTemplate
from supervisor import AgentHost
from supervisor._ownership import SoleOwnership
from supervisor.workers import WorkerPool
from tests.supervisor.host_helpers import assert_threads_back

ROOT = Path(__file__).resolve().parents[2]

EXIT_WAIT = 30.0
"""Seconds the subprocess below may take from start to exit (a few on an idle machine)."""


def _worker_children() -> set[int]:
    """Pids of the worker processes multiprocessing knows as children of this one."""
    return {
        p.pid
        for p in multiprocessing.active_children()
        if p.name == "sessionvisor-worker" and p.pid is not None
    }


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Baseline:
    """What the process runs before a constructor call: its threads, worker children and
    open file descriptors, to compare with afterwards."""

    def __init__(self) -> None:
        self.threads = set(threading.enumerate())
        self.workers = _worker_children()
        self.fds = _open_fds() if os.path.isdir("/proc/self/fd") else None

    def assert_nothing_started(self) -> None:
        """Nothing was started at all (no joins needed: a leak shows at once)."""
        new = [t.name for t in threading.enumerate() if t not in self.threads]
        assert new == [], f"threads started by a refused constructor: {new}"
        assert _worker_children() == self.workers
        if self.fds is not None:
            assert _open_fds() <= self.fds

    def assert_released(self) -> None:
        """What was started has ended (bounded joins)."""
        assert_threads_back(self.threads)
        assert _worker_children() == self.workers


@pytest.fixture
def baseline() -> Baseline:
    return Baseline()


# -- each setting, checked before anything starts ------------------------------------------

CALL_TIMEOUT = "call_timeout must be a positive, finite number of seconds, got"
MAX_STEPS = "max_steps must be a positive integer (the most model calls in one turn), got"
RESTART_WAIT = (
    "restart_wait must be a finite number of seconds >= 0 (0: a call does not wait for a "
    "restart), got"
)
WORKER_CALL_TIMEOUT = (
    "worker_call_timeout must be a positive, finite number of seconds, or None for no limit, got"
)

BAD_SETTINGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"call_timeout": 0}, ValueError, f"{CALL_TIMEOUT} 0"),
    ({"call_timeout": -5}, ValueError, f"{CALL_TIMEOUT} -5"),
    ({"call_timeout": math.inf}, ValueError, f"{CALL_TIMEOUT} inf"),
    ({"call_timeout": math.nan}, ValueError, f"{CALL_TIMEOUT} nan"),
    ({"call_timeout": "10"}, TypeError, f"{CALL_TIMEOUT} str '10'"),
    ({"call_timeout": True}, TypeError, f"{CALL_TIMEOUT} bool True"),
    (
        {"call_timeout": 1e10},
        ValueError,
        "call_timeout must be at most 86400 seconds (a day): it also bounds each session's "
        "stop at shutdown; give send() a longer timeout= for a longer turn, got 10000000000.0",
    ),
    ({"max_steps": 0}, ValueError, f"{MAX_STEPS} 0"),
    ({"max_steps": -1}, ValueError, f"{MAX_STEPS} -1"),
    ({"max_steps": 2.0}, TypeError, "max_steps must be an int, got float 2.0"),
    ({"max_steps": True}, TypeError, "max_steps must be an int, got bool True"),
    ({"restart_wait": -1}, ValueError, f"{RESTART_WAIT} -1"),
    ({"restart_wait": math.nan}, ValueError, f"{RESTART_WAIT} nan"),
    ({"restart_wait": math.inf}, ValueError, f"{RESTART_WAIT} inf"),
    ({"restart_wait": None}, TypeError, f"{RESTART_WAIT} NoneType None"),
    (
        {"restart_wait": 2 * 86_400},
        ValueError,
        "restart_wait must be at most 86400 seconds (a day), got 172800",
    ),
]


BAD_WORKER_SETTINGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"call_timeout": 0}, ValueError, f"{CALL_TIMEOUT} 0"),
    ({"worker_call_timeout": 0}, ValueError, f"{WORKER_CALL_TIMEOUT} 0"),
    ({"worker_call_timeout": -1}, ValueError, f"{WORKER_CALL_TIMEOUT} -1"),
    ({"worker_call_timeout": math.inf}, ValueError, f"{WORKER_CALL_TIMEOUT} inf"),
    ({"worker_call_timeout": "5"}, TypeError, f"{WORKER_CALL_TIMEOUT} str '5'"),
    (
        {"worker_call_timeout": 1e6},
        ValueError,
        "worker_call_timeout must be at most 86400 seconds (a day); pass None for no limit, "
        "got 1000000.0",
    ),
]


@pytest.mark.parametrize(
    ("workers", "settings", "error", "message"),
    [(None, *case) for case in BAD_SETTINGS] + [(2, *case) for case in BAD_WORKER_SETTINGS],
)
def test_a_bad_setting_is_refused_by_name_before_anything_starts(  # noqa: PLR0917 (the cases)
    tmp_path: Path,
    baseline: Baseline,
    workers: int | None,
    settings: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    data_dir = tmp_path / "data"
    with pytest.raises(error) as caught:
        AgentHost(data_dir=data_dir, workers=workers, **settings)
    assert str(caught.value) == message
    baseline.assert_nothing_started()  # no thread, worker process or file descriptor
    assert not data_dir.exists()  # the store was never opened
    with AgentHost(data_dir=data_dir) as host:  # and the directory is free
        assert host.send(host.start_session(AgentTemplate()), "hi").content == "echo: hi"


@pytest.mark.parametrize(
    ("workers", "error", "message"),
    [
        (0, ValueError, "workers must be a positive int or None, got 0"),
        (-2, ValueError, "workers must be a positive int or None, got -2"),
        (True, TypeError, "workers must be a positive int or None, got bool True"),
        ("2", TypeError, "workers must be a positive int or None, got str '2'"),
    ],
)
def test_a_bad_worker_count_is_refused_before_the_data_dir_is_made(
    tmp_path: Path, baseline: Baseline, workers: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        AgentHost(data_dir=tmp_path / "data", workers=workers)  # type: ignore[arg-type]
    assert str(caught.value) == message
    baseline.assert_nothing_started()
    assert not (tmp_path / "data").exists()


def test_worker_pool_refuses_a_bad_call_timeout_before_a_worker_starts(
    baseline: Baseline,
) -> None:
    with pytest.raises(ValueError, match="worker_call_timeout must be a positive, finite"):
        WorkerPool(1, call_timeout=0)
    baseline.assert_nothing_started()


def test_good_settings_at_their_limits_are_taken(tmp_path: Path) -> None:
    with AgentHost(
        data_dir=tmp_path / "data",
        call_timeout=86_400,
        restart_wait=0,
        max_steps=1,
    ) as host:
        assert (host.call_timeout, host.restart_wait, host.max_steps) == (86_400, 0, 1)
        assert host.send(host.start_session(AgentTemplate()), "hi").content == "echo: hi"


def test_worker_options_without_workers_are_named_with_the_right_grammar(
    tmp_path: Path, baseline: Baseline
) -> None:
    with pytest.raises(ValueError) as one:
        AgentHost(data_dir=tmp_path / "a", worker_call_timeout=5.0)
    assert str(one.value) == (
        "worker_call_timeout only applies to worker processes; pass workers=N to run "
        "sessions in worker processes, or drop them"
    )
    with pytest.raises(ValueError) as two:
        AgentHost(data_dir=tmp_path / "b", worker_io="portable", worker_max_restarts=5)
    assert str(two.value).startswith("worker_io, worker_max_restarts only apply to worker")
    unknown: dict[str, Any] = {"worker_memory": 1 << 30}  # a misspelt worker_memory_limit
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'worker_memory'"):
        AgentHost(data_dir=tmp_path / "c", **unknown)
    baseline.assert_nothing_started()
    assert list(tmp_path.iterdir()) == []  # no store was opened for any of them


PROGRAM = """
import sys

from supervisor import AgentHost

if __name__ == "__main__":
    for workers in (None, 2):
        try:
            AgentHost(data_dir=sys.argv[1], workers=workers, call_timeout=0)
        except ValueError as exc:
            print(exc, flush=True)
"""


def test_a_program_whose_host_was_refused_exits(tmp_path: Path) -> None:
    """Before the fix, the refused host's supervisor thread kept this program from ever
    exiting (and, with workers, its worker processes ran on)."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, str(tmp_path / "data")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=EXIT_WAIT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the program did not exit within {EXIT_WAIT} s")
    assert result.returncode == 0, result.stderr
    message = "call_timeout must be a positive, finite number of seconds, got 0"
    assert result.stdout.splitlines() == [message, message]


# -- a failure later in the constructor releases what was started ---------------------------


class Boom(Exception):
    """What the patched step raises."""


@pytest.fixture(params=[None, 2], ids=["thread", "workers=2"])
def workers(request: pytest.FixtureRequest) -> int | None:
    value: int | None = request.param
    return value


def test_a_failure_after_the_supervisor_started_releases_everything(
    tmp_path: Path, baseline: Baseline, monkeypatch: pytest.MonkeyPatch, workers: int | None
) -> None:
    """The step before the shutdown exists: the store, the root supervisor, the workers
    and the hibernation sweeper were started, and are released in reverse."""

    def fail(*args: object, **kwargs: object) -> None:
        raise Boom("HostShutdown failed")

    monkeypatch.setattr("supervisor.host.HostShutdown", fail)
    data_dir = tmp_path / "data"
    with pytest.raises(Boom, match="HostShutdown failed"):
        AgentHost(data_dir=data_dir, workers=workers, hibernate_after_ms=60_000)
    baseline.assert_released()
    monkeypatch.undo()
    with AgentHost(data_dir=data_dir) as host:  # the data directory's lock was released
        assert host.send(host.start_session(AgentTemplate()), "hi").content == "echo: hi"


def test_a_failure_in_the_last_step_shuts_the_host_down(
    tmp_path: Path, baseline: Baseline, monkeypatch: pytest.MonkeyPatch, workers: int | None
) -> None:
    def fail(self: SoleOwnership, *args: object) -> None:
        raise Boom("ownership could not start")

    monkeypatch.setattr(SoleOwnership, "start", fail)
    data_dir = tmp_path / "data"
    with pytest.raises(Boom, match="ownership could not start"):
        AgentHost(data_dir=data_dir, workers=workers, hibernate_after_ms=60_000)
    baseline.assert_released()
    monkeypatch.undo()
    with AgentHost(data_dir=data_dir) as host:
        assert host.send(host.start_session(AgentTemplate()), "hi").content == "echo: hi"
