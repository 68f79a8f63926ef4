"""One host per data directory: a second one is refused, a dead one never blocks the next.

Before the lock, two hosts on one directory both ran ``resume_all`` and both
served the same sessions; the last checkpoint written won and turns the other
had acknowledged were lost without a word. Hosts of other processes run as
small programs in subprocesses (from the repository root, so they import
this checkout); every wait on them is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from actors import AgentTemplate
from supervisor import AgentHost, DataDirLocked, SQLiteCheckpointStore
from tests.supervisor.host_helpers import (
    MODES,
    WAIT,
    assert_threads_back,
    host_options,
    pairs,
    process_ended_within,
)

ROOT = Path(__file__).resolve().parents[2]

START_WAIT = 30.0
"""Seconds a program may take to start a host (a fresh interpreter, workers) and answer."""

# argv: the data directory, the host's options as JSON. Prints one JSON line:
# what refused it, or which sessions it resumed from the directory.
SECOND_HOST = """
import json
import sys

from actors import AgentTemplate
from supervisor import AgentHost, DataDirLocked

if __name__ == "__main__":
    try:
        host = AgentHost(data_dir=sys.argv[1], **json.loads(sys.argv[2]))
    except DataDirLocked as exc:
        print(json.dumps({"refused": str(exc), "pid": exc.pid, "directory": exc.directory}))
    else:
        with host:
            print(json.dumps({"resumed": sorted(host.resume_all(AgentTemplate()))}))
"""

# argv: the data directory, the host's options as JSON, "fork" or "no-fork". Starts
# session "kept", sends one turn (checkpointed before send returns), optionally forks
# a child that outlives it, prints one JSON line, then waits for the test to kill it.
HOLDER = """
import json
import os
import signal
import sys

from actors import AgentTemplate
from supervisor import AgentHost

if __name__ == "__main__":
    host = AgentHost(data_dir=sys.argv[1], **json.loads(sys.argv[2]))
    sid = host.start_session(AgentTemplate(), "kept")
    answer = host.send(sid, "before the kill").content
    started, running = os.pipe()
    child = os.fork() if sys.argv[3] == "fork" else None
    if child == 0:  # a child of the host's process that lives on after it: until SIGKILL
        os.write(running, b"x")  # its at-fork handlers have run by now
        while True:
            signal.pause()
    if child is not None:
        os.read(started, 1)
    workers = [worker.pid for worker in host.workers()]
    print(json.dumps({"answer": answer, "workers": workers, "child": child}), flush=True)
    sys.stdin.read()  # until the test kills this process
"""

# argv: the SQLite file, a session id. Reads what a running host saved, as a tool would.
READER = """
import json
import sys

from supervisor import SQLiteCheckpointStore

with SQLiteCheckpointStore(sys.argv[1]) as store:
    print(json.dumps({
        "sessions": store.sessions(),
        "checkpoints": len(store.list(sys.argv[2])),
        "messages": [m.content for m in store.load(sys.argv[2]).messages()],
    }))
"""


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Where the hosts run their sessions (see ``host_helpers.MODES``)."""
    return str(request.param)


def _run(program: str, *args: str) -> dict[str, Any]:
    """Run ``program`` to its end (bounded); return the JSON line it printed."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", program, *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_WAIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the program did not end within {START_WAIT} s: {exc.stderr!r}")
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Holder:
    """A host in another process (``HOLDER``): started, it has answered one turn and
    holds the data directory until ``kill``."""

    def __init__(
        self, data_dir: Path, options: dict[str, Any], errors: IO[str], *, fork: bool
    ) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOLDER,
                str(data_dir),
                json.dumps(options),
                "fork" if fork else "no-fork",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        self.errors = errors
        self.others: list[int] = []  # its workers and its child: SIGKILLed at the end too
        try:
            started = self._ready()
        except BaseException:
            self.kill()
            raise
        self.answer: str = started["answer"]
        self.workers: list[int] = started["workers"]
        self.child: int | None = started["child"]
        self.others = [*self.workers, *([] if self.child is None else [self.child])]

    def _ready(self) -> dict[str, Any]:
        """The line the host prints once it has answered its turn (bounded wait)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_WAIT)
        line = self.proc.stdout.readline() if ready else ""
        assert line, f"the host process was not ready within {START_WAIT} s: {self._stderr()}"
        started: dict[str, Any] = json.loads(line)
        return started

    def _stderr(self) -> str:
        self.errors.flush()
        return Path(self.errors.name).read_text(encoding="utf-8")

    def kill(self) -> None:
        """SIGKILL the host's process (no shutdown) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def cleanup(self) -> None:
        self.kill()
        for pid in self.others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            assert process_ended_within(pid, WAIT), f"pid {pid} outlived SIGKILL"


@pytest.fixture
def holder_errors(tmp_path: Path) -> Iterator[IO[str]]:
    """Where a ``Holder`` writes its stderr (shown when it fails to start)."""
    with (tmp_path / "holder.err").open("w", encoding="utf-8") as errors:
        yield errors


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in {"Z", "X"}


def test_a_second_host_in_another_process_is_refused_until_the_first_shuts_down(
    tmp_path: Path, mode: str
) -> None:
    data_dir = tmp_path / "data"
    options = json.dumps(host_options(mode))
    first = AgentHost(data_dir=data_dir, **host_options(mode))
    try:
        first.start_session(AgentTemplate(), "s")

        refused = _run(SECOND_HOST, str(data_dir), options)

        assert refused["pid"] == os.getpid()
        assert refused["directory"] == str(data_dir.resolve())
        message = refused["refused"]
        assert repr(str(data_dir.resolve())) in message
        assert f"pid {os.getpid()}" in message
        assert "stop that host" in message
        assert "use another data_dir" in message
    finally:
        first.shutdown()

    assert _run(SECOND_HOST, str(data_dir), options) == {"resumed": ["s"]}


def test_a_second_host_in_the_same_process_is_refused(tmp_path: Path, mode: str) -> None:
    with AgentHost(data_dir=tmp_path, **host_options(mode)) as first:
        first.start_session(AgentTemplate(), "s")
        first.send("s", "hello")
        before = set(threading.enumerate())

        with pytest.raises(DataDirLocked, match="this same process") as refused:
            AgentHost(data_dir=tmp_path, **host_options(mode))

        assert refused.value.pid == os.getpid()
        assert f"pid {os.getpid()}" in str(refused.value)
        assert_threads_back(before)  # the refused host stopped what it had started
        assert first.send("s", "still mine").content == "echo: still mine"

    with AgentHost(data_dir=tmp_path, **host_options(mode)) as second:
        assert second.resume_all(AgentTemplate()) == ["s"]
        assert pairs(second.history("s")) == [
            ("hello", "echo: hello"),
            ("still mine", "echo: still mine"),
        ]


def test_the_refusal_names_a_host_of_another_process(
    tmp_path: Path, holder_errors: IO[str]
) -> None:
    holder = Holder(tmp_path / "data", {}, holder_errors, fork=False)
    try:
        with pytest.raises(DataDirLocked) as refused:
            AgentHost(data_dir=tmp_path / "data")

        assert refused.value.pid == holder.proc.pid
        assert f"pid {holder.proc.pid} on host " in str(refused.value)
        assert "this same process" not in str(refused.value)
    finally:
        holder.cleanup()


def test_a_new_host_starts_at_once_after_the_owner_was_sigkilled(
    tmp_path: Path, mode: str, holder_errors: IO[str]
) -> None:
    """Its worker processes may outlive it for a moment (they exit when they see its
    pipe close); here they are stopped so they outlive it for sure: the lock is not
    theirs, so the directory is free the moment the host's own process is gone."""
    holder = Holder(tmp_path / "data", host_options(mode), holder_errors, fork=False)
    try:
        assert holder.answer == "echo: before the kill"
        assert len(holder.workers) == host_options(mode).get("workers", 0)
        for pid in holder.workers:
            os.kill(pid, signal.SIGSTOP)

        holder.kill()

        assert holder.proc.returncode == -signal.SIGKILL
        assert all(_alive(pid) for pid in holder.workers)
        with AgentHost(data_dir=tmp_path / "data", **host_options(mode)) as host:
            assert host.resume_all(AgentTemplate()) == ["kept"]
            assert pairs(host.history("kept")) == [("before the kill", "echo: before the kill")]
            assert host.send("kept", "after").content == "echo: after"
    finally:
        holder.cleanup()


def test_a_child_forked_by_the_owner_does_not_keep_the_directory(
    tmp_path: Path, holder_errors: IO[str]
) -> None:
    """A forked child shares the lock's open file description: unless it closes its
    copy, it holds the lock after the host has died (for as long as it lives)."""
    holder = Holder(tmp_path / "data", {}, holder_errors, fork=True)
    try:
        assert holder.child is not None

        holder.kill()

        assert holder.proc.returncode == -signal.SIGKILL
        assert _alive(holder.child)
        with AgentHost(data_dir=tmp_path / "data") as host:
            assert host.resume_all(AgentTemplate()) == ["kept"]
    finally:
        holder.cleanup()


def test_a_tool_may_read_the_store_while_the_host_runs(tmp_path: Path, mode: str) -> None:
    with AgentHost(data_dir=tmp_path, **host_options(mode)) as host:
        sid = host.start_session(AgentTemplate(), "s")
        host.send(sid, "one")
        host.send(sid, "two")

        seen = _run(READER, str(tmp_path / "checkpoints.db"), sid)

        assert seen == {
            "sessions": ["s"],
            "checkpoints": 2,
            "messages": ["one", "echo: one", "two", "echo: two"],
        }
        assert host.send(sid, "three").content == "echo: three"  # the host never noticed


def test_a_host_given_its_store_takes_no_lock(tmp_path: Path, mode: str) -> None:
    with SQLiteCheckpointStore(tmp_path / "checkpoints.db") as store:
        with AgentHost(store=store, **host_options(mode)) as host:
            host.start_session(AgentTemplate(), "s")

            assert not (tmp_path / "host.lock").exists()
            AgentHost(data_dir=tmp_path).shutdown()  # the directory was free


def test_a_data_directory_the_host_makes_is_private_and_an_existing_one_keeps_its_mode(
    tmp_path: Path,
) -> None:
    made = tmp_path / "parent" / "data"
    with AgentHost(data_dir=made) as host:
        host.send(host.start_session(AgentTemplate()), "hi")
    assert made.stat().st_mode & 0o777 == 0o700  # conversations: for the owner only
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with AgentHost(data_dir=shared):
        pass
    assert shared.stat().st_mode & 0o777 == 0o755  # the user's choice stands
