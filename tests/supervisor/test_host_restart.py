"""Whole-process restart: a host process is SIGKILLed mid-conversation; a new host resumes all.

The worker (``tests/supervisor/host_worker.py``) prints a line for every turn
whose ``send`` returned; the durability promise is that each of those is in
the history a new host on the same data directory resumes, whether that new
host runs its sessions in threads or in worker processes.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from supervisor import AgentHost
from tests.supervisor.host_helpers import MODES, WAIT, Journal, host_options, pairs, template
from tests.supervisor.host_worker import session_ids

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 3
ACKS = 40
START_WAIT = 30.0  # a fresh interpreter importing the packages, on a loaded machine


class Worker:
    """The host subprocess and a reader thread turning its stdout into a queue of lines."""

    def __init__(self, data_dir: Path, errors: IO[bytes]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.supervisor.host_worker", str(data_dir), str(SESSIONS)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, name="host-worker-reader")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, timeout: float) -> bytes:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"the worker exited with {self.proc.wait(WAIT)} before acking"
        return line

    def rest(self) -> list[bytes]:
        """Every line left once the process has exited (call after ``kill``)."""
        lines = []
        while (line := self.lines.get(timeout=WAIT)) is not None:
            lines.append(line)
        return lines

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(WAIT)
        self.reader.join(WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    with (tmp_path / "worker.err").open("wb") as errors:
        started = Worker(tmp_path / "data", errors)
        try:
            yield started
        finally:
            started.kill()


@pytest.mark.parametrize("mode", MODES)
def test_a_new_host_resumes_every_session_of_a_killed_one(
    tmp_path: Path, worker: Worker, mode: str
) -> None:
    acked: dict[str, list[tuple[str, str]]] = {sid: [] for sid in session_ids(SESSIONS)}
    first = json.loads(worker.next_line(START_WAIT))
    acked[first["session"]].append((first["text"], first["answer"]))
    for _ in range(ACKS - 1):
        line = json.loads(worker.next_line(WAIT))
        acked[line["session"]].append((line["text"], line["answer"]))

    worker.kill()  # SIGKILL: no shutdown, no final checkpoint
    assert worker.proc.returncode == -signal.SIGKILL
    for raw in worker.rest():  # acknowledged while we were killing it
        line = json.loads(raw)
        acked[line["session"]].append((line["text"], line["answer"]))

    journal = Journal(tmp_path)  # process-safe: it reports back from worker processes
    with AgentHost(data_dir=tmp_path / "data", **host_options(mode)) as host:
        assert sorted(host.resume_all(template(journal))) == session_ids(SESSIONS)

        for sid, turns in acked.items():
            history = pairs(host.history(sid))
            # Every acknowledged turn, in order; at most one more that was saved
            # but whose acknowledgement the kill cut short.
            assert history[: len(turns)] == turns
            assert len(history) - len(turns) in (0, 1)
            assert all(answer == f"echo: {text}" for text, answer in history)
        assert {(s.tenant_id, s.status) for s in host.list_sessions()} == {("worker", "active")}
        assert all(
            [(s.resumed, s.stripped) for s in journal.of(sid)] == [(True, ("handle",))]
            for sid in acked
        )
        for sid in acked:
            assert host.send(sid, "after the restart").content == "echo: after the restart"
            assert pairs(host.history(sid))[-1] == ("after the restart", "echo: after the restart")
