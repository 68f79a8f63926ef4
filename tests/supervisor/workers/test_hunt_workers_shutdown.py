"""Worker mode when sessions will not stop: a host's shutdown is bounded, and a worker
whose host is gone still exits."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

from actors import AgentTemplate
from supervisor import AgentHost, MemoryCheckpointStore
from supervisor.workers._worker_process import EXIT_GRACE
from supervisor.workers._worker_server import STOP_TIMEOUT
from tests.supervisor.host_helpers import WAIT, process_ended_within
from tests.supervisor.workers.worker_tools import HangingEnd

ROOT = Path(__file__).resolve().parents[3]


def _worker_children() -> list[BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "sessionvisor-worker"]


def test_workers_with_stuck_sessions_are_ended_together_at_shutdown() -> None:
    """Each worker hosts a session whose ``session_end`` hangs. The host gives each stop
    ``call_timeout``, then the workers together a few seconds to exit before it kills them:
    the shutdown must not wait again, in turn, for every worker (10 s each, before)."""
    host = AgentHost(MemoryCheckpointStore(), workers=2, call_timeout=1)
    template = AgentTemplate(model="echo", plugins=[HangingEnd()])
    sessions = [host.start_session(template) for _ in range(2)]
    for sid in sessions:
        assert host.send(sid, "hello").content == "echo: hello"
    assert all(len(worker.sessions) == 1 for worker in host.workers())  # one on each

    started = time.monotonic()
    host.shutdown()
    took = time.monotonic() - started

    # 2 stops of call_timeout, then 5 s for both workers: about 8 s; 22-24 s before
    # (2 x (5 s + 5 s)). The bound sits between the two, with room for a loaded machine.
    assert took < 16, f"the shutdown took {took:.1f} s"
    assert _worker_children() == []  # killed and reaped: no worker outlives its host
    assert host.workers() == []


def test_a_killed_hosts_worker_exits_though_its_sessions_will_not_stop(tmp_path: Path) -> None:
    """A worker whose host is gone stops its sessions and exits, even when their
    ``session_end`` never returns: before, multiprocessing joined the stuck session
    threads, so the worker (and the forkserver it kept open) stayed for ever."""
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal
            from actors import AgentTemplate
            from supervisor import AgentHost, MemoryCheckpointStore
            from tests.supervisor.workers.worker_tools import HangingEnd

            if __name__ == "__main__":
                host = AgentHost(MemoryCheckpointStore(), workers=1)
                template = AgentTemplate(plugins=[HangingEnd()])
                for _ in range(2):
                    print(host.send(host.start_session(template), "hi").content)
                print(*(w.pid for w in host.workers()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # no shutdown: the worker sees EOF
            """
        )
    )
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: the worker inherits them
        done = subprocess.run(
            [sys.executable, str(script)],
            check=False,
            stdout=stdout,
            stderr=stderr,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    assert done.returncode == -signal.SIGKILL, err.read_text()
    *answers, pid_text = out.read_text().splitlines()
    assert answers == ["echo: hi", "echo: hi"]
    pid = int(pid_text)
    try:
        # Both stops are waited for together (STOP_TIMEOUT), then the threads briefly.
        bound = STOP_TIMEOUT + EXIT_GRACE + WAIT
        assert process_ended_within(pid, bound), f"worker pid {pid} outlived its killed host"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # never leave it behind, whatever the outcome
