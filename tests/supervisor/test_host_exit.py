"""A program that never shuts its ``AgentHost`` down still exits, and the host is shut down.

The first tests run a small program in a subprocess (from the repository root,
so it imports this checkout) and wait for it with a bound: before the fix such
a program printed its answer and then hung forever at interpreter exit, waiting
for the host's non-daemon actor threads. The others call the exit hook in this
process: what it holds, and how it meets an explicit ``shutdown`` under way.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

from actors import AgentTemplate, Snapshot
from supervisor import AgentHost, MemoryCheckpointStore, SQLiteCheckpointStore, _at_exit
from supervisor.checkpoint_store import CheckpointInfo
from tests.supervisor.host_helpers import WAIT, process_ended_within

ROOT = Path(__file__).resolve().parents[2]

EXIT_WAIT = 30.0
"""Seconds the program may take from start to exit (a few on an idle machine)."""

GONE_WAIT = 5.0
"""Seconds a worker pid may take to disappear once its parent has exited."""

# argv: the SQLite file, "thread" or "process", "forget" or "shutdown". With
# checkpoint_every=None nothing is saved by the turn itself: a checkpoint in the
# store afterwards can only come from the host's shutdown.
PROGRAM = """
import json
import sys

from actors import AgentTemplate
from supervisor import AgentHost, SQLiteCheckpointStore

if __name__ == "__main__":
    db, mode, ending = sys.argv[1:4]
    host = AgentHost(
        SQLiteCheckpointStore(db),
        workers=None if mode == "thread" else 1,
        checkpoint_every=None,
    )
    sid = host.start_session(AgentTemplate(), "forgetful")
    print("answer:", host.send(sid, "hi").content, flush=True)
    print("workers:", json.dumps([w.pid for w in host.workers()]), flush=True)
    if ending == "shutdown":
        host.shutdown()
"""

MODES = [pytest.param("thread", id="thread"), pytest.param("process", id="workers=1")]


def _run(db: Path, mode: str, ending: str) -> tuple[str, list[int]]:
    """Run ``PROGRAM``; return its output and the worker pids it printed.

    Fails the test (instead of leaking its workers) when it does not exit in time.
    """
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, str(db), mode, ending],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=EXIT_WAIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        for pid in _worker_pids(out):
            _kill_if_alive(pid)
        pytest.fail(f"the program did not exit within {EXIT_WAIT} s; its output: {out!r}")
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, _worker_pids(result.stdout)


def _worker_pids(output: str) -> list[int]:
    for line in output.splitlines():
        if line.startswith("workers: "):
            return [int(pid) for pid in json.loads(line.removeprefix("workers: "))]
    return []


def _kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _history_after(db: Path) -> list[tuple[str, str | None]]:
    """Resume the program's session on a fresh host here and read its conversation."""
    with AgentHost(SQLiteCheckpointStore(db)) as host:
        sid = host.resume("forgetful", AgentTemplate())
        return [(m.role, m.content) for m in host.history(sid)]


@pytest.mark.parametrize("mode", MODES)
def test_a_host_never_shut_down_is_shut_down_at_exit(mode: str, tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    out, pids = _run(db, mode, "forget")

    assert "answer: echo: hi" in out
    assert len(pids) == (0 if mode == "thread" else 1), out
    for pid in pids:
        assert process_ended_within(pid, GONE_WAIT), f"worker pid {pid} outlived its host's process"
    # The host's shutdown checkpointed the session (the turn itself saved nothing).
    assert _history_after(db) == [("user", "hi"), ("assistant", "echo: hi")]


@pytest.mark.parametrize("mode", MODES)
def test_an_explicit_shutdown_still_ends_the_program_as_before(mode: str, tmp_path: Path) -> None:
    db = tmp_path / "checkpoints.db"
    out, pids = _run(db, mode, "shutdown")

    assert "answer: echo: hi" in out
    for pid in pids:
        assert process_ended_within(pid, GONE_WAIT), f"worker pid {pid} outlived its host's process"
    assert _history_after(db) == [("user", "hi"), ("assistant", "echo: hi")]


# -- the hook, in this process ------------------------------------------------------------


class _Closer:
    """Records its at-exit shutdown in ``log``; raises if told to."""

    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail = fail

    def _shutdown_at_exit(self) -> None:
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} could not shut down")


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the hook an empty registry, so it never touches other tests' hosts."""
    monkeypatch.setattr(_at_exit, "_registered", weakref.WeakValueDictionary())


@pytest.mark.usefixtures("own_registry")
def test_the_hook_shuts_down_newest_first_and_goes_on_past_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    objs = [_Closer("first", log), _Closer("second", log, fail=True), _Closer("third", log)]
    for obj in objs:
        _at_exit.register(obj)

    _at_exit._shutdown_all()
    _at_exit._shutdown_all()  # each object once: the hook forgets what it shut down

    assert log == ["third", "second", "first"]
    assert "second could not shut down" in caplog.text


@pytest.mark.usefixtures("own_registry")
def test_a_registration_keeps_nothing_alive() -> None:
    log: list[str] = []
    obj = _Closer("dropped", log)
    _at_exit.register(obj)
    dropped = weakref.ref(obj)
    del obj
    gc.collect()

    assert dropped() is None
    _at_exit._shutdown_all()
    assert log == []


@pytest.mark.usefixtures("own_registry")
def test_an_explicit_shutdown_unregisters_the_host() -> None:
    host = AgentHost(MemoryCheckpointStore())
    assert list(_at_exit._registered.values()) == [host]

    host.shutdown()

    assert list(_at_exit._registered.values()) == []


class _GatedStore(MemoryCheckpointStore):
    """Its ``save`` waits for ``gate`` (bounded), so a shutdown can be held halfway."""

    def __init__(self) -> None:
        super().__init__()
        self.saving = threading.Event()
        self.gate = threading.Event()

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        self.saving.set()
        self.gate.wait(WAIT)
        return super().save(snapshot)


class _Waiting(logging.Handler):
    """Sets ``seen`` when the host logs that its exit hook waits for another shutdown."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("waiting for another thread's shutdown"):
            self.seen.set()


@pytest.mark.usefixtures("own_registry")
def test_the_exit_hook_waits_for_a_shutdown_already_under_way() -> None:
    store = _GatedStore()
    host = AgentHost(store, checkpoint_every=None)  # only the shutdown saves
    sid = host.start_session(AgentTemplate(), "busy")
    host.send(sid, "hi")
    explicit = threading.Thread(target=host.shutdown, name="explicit-shutdown")
    explicit.start()
    assert store.saving.wait(WAIT)  # the explicit shutdown is halfway, held in save

    waiting = _Waiting()
    host_logger = logging.getLogger("supervisor.host")
    level = host_logger.level
    host_logger.addHandler(waiting)
    host_logger.setLevel(logging.DEBUG)
    root_alive_after_hook: list[bool] = []

    def at_exit() -> None:
        host._shutdown_at_exit()
        root_alive_after_hook.append(host._root.is_alive())

    hook = threading.Thread(target=at_exit, name="exit-hook")
    try:
        hook.start()
        assert waiting.seen.wait(WAIT)
    finally:
        store.gate.set()
        hook.join(WAIT)
        explicit.join(WAIT)
        host_logger.removeHandler(waiting)
        host_logger.setLevel(level)

    assert not hook.is_alive()
    assert not explicit.is_alive()
    assert root_alive_after_hook == [False]  # it returned only once the shutdown was done
    assert len(store.list(sid)) == 1  # one shutdown ran: one final checkpoint
