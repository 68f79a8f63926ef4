"""Hosts with workers run from a main file, as applications run them (in a subprocess).

- A worker that cannot start fails fast with ``WorkerStartError``, not a
  replacement loop. The common case is a main file without
  ``if __name__ == "__main__":`` that creates an ``AgentHost``: every worker
  re-imports the main file and dies in it. Before, the host replaced such
  workers until its worker restart intensity ran out, printing a traceback
  per worker, and ``start_session`` then failed with a ``WorkerCrashed`` that
  did not say why.
- Ctrl-C (SIGINT to the whole process group) ends the host's ``with`` block
  cleanly: the workers ignore it, so the final checkpoints are taken. So does
  SIGTERM to the host alone, with the README's handler.
- A host killed outright leaves no worker behind, and its workers end their
  sessions with the reason ``host_lost``, so plugins can tell that from a
  normal stop.
- A program read from standard input, which workers cannot import again, is
  refused before any worker starts; ``python -c`` works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.supervisor.host_helpers import WAIT, Journal, process_ended_within

ROOT = Path(__file__).resolve().parents[3]


def _run(
    script: Path | None = None,
    *,
    code: str = "",
    how: str = "file",
    start_new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a main file (workers re-import it), or ``code`` read from standard
    input (``how="stdin"``) or given with ``-c``; with the repo importable."""
    argv = [sys.executable, {"file": str(script), "stdin": "-", "-c": "-c"}[how]]
    if how == "-c":
        argv.append(code)
    return subprocess.run(
        argv,
        input=code if how == "stdin" else None,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=start_new_session,
    )


def test_an_unguarded_main_file_gets_a_clear_error_at_once(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            """
            from supervisor import AgentHost, MemoryCheckpointStore

            host = AgentHost(MemoryCheckpointStore(), workers=2)
            print("never reached")
            """
        )
    )

    done = _run(script)

    assert done.returncode == 1
    assert "never reached" not in done.stdout
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith("supervisor.WorkerStartError: worker process pid ")
    assert "could not start (exit code 1)" in last_line
    assert 'put that code under `if __name__ == "__main__":`' in last_line
    # No replacement loop: each of the two workers failed once, and only once.
    assert done.stderr.count("An attempt has been made to start a new process") <= 2


_SEND_ONCE = textwrap.dedent(
    """
    from actors import AgentTemplate
    from supervisor import AgentHost, MemoryCheckpointStore

    with AgentHost(MemoryCheckpointStore(), workers=1) as host:
        sid = host.start_session(AgentTemplate())
        print(host.send(sid, "hi").content)
    """
)


def test_a_program_from_standard_input_is_refused_before_any_worker_starts() -> None:
    done = _run(code=_SEND_ONCE, how="stdin")

    assert done.returncode == 1
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line == (
        "supervisor.WorkerStartError: worker processes cannot start (the main program "
        "'<stdin>' is not a file). Each worker imports the main program again from its "
        "file, as multiprocessing's forkserver and spawn do: save the program to a file "
        "(or run it with python -c or -m)"
    )
    assert "FileNotFoundError" not in done.stderr  # no worker tried to import '<stdin>'


def test_a_program_given_with_dash_c_runs_in_workers() -> None:
    done = _run(code=_SEND_ONCE, how="-c")

    assert done.returncode == 0, done.stderr
    assert done.stdout == "echo: hi\n"


def test_a_replacement_that_cannot_start_stops_replacements_and_says_why(
    tmp_path: Path,
) -> None:
    # A guarded main file whose re-import in a worker fails once a marker file
    # exists: the first worker starts, its replacement cannot.
    marker = tmp_path / "break-workers"
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal, threading
            if __name__ == "__mp_main__" and os.path.exists({str(marker)!r}):
                raise RuntimeError("this worker cannot start")

            from actors import AgentTemplate
            from supervisor import AgentHost, MemoryCheckpointStore, WorkerStartError

            if __name__ == "__main__":
                with AgentHost(MemoryCheckpointStore(), workers=1) as host:
                    sid = host.start_session(AgentTemplate())
                    print(host.send(sid, "hi").content)
                    # Its restarts run on their own supervisor: wait until they are over.
                    given_up = threading.Event()
                    host.subscribe(sid, lambda e: e.type == "given_up" and given_up.set())
                    open({str(marker)!r}, "w").close()
                    [worker] = host.workers()
                    os.kill(worker.pid, signal.SIGKILL)
                    print("session given up:", given_up.wait(30))
                    try:
                        host.start_session(AgentTemplate())
                    except WorkerStartError as exc:
                        print("start_session:", exc)
                    print("given up:", host.workers_given_up, host.workers())
            """
        )
    )

    done = _run(script)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["echo: hi", "session given up: True"]
    assert lines[2].startswith("start_session: worker process pid ")
    assert "could not start (exit code 1)" in lines[2]
    assert lines[3] == "given up: True []"
    # The worker's own traceback, once per replacement: three in a row that could
    # not start (one could have been transient), then no more.
    assert done.stderr.count("RuntimeError: this worker cannot start") == 3
    assert "no longer replacing workers" in done.stderr  # logged, with the same reason


STOPS = {
    # Ctrl-C in a terminal: SIGINT to the whole process group, workers included.
    "ctrl-c": ("pass", "os.killpg(os.getpgid(0), signal.SIGINT)", "KeyboardInterrupt"),
    # A service manager, with the README's recipe: SIGTERM to the host alone (docker
    # stop, Kubernetes, systemd with KillMode=mixed) ends the ``with`` block.
    "sigterm": (
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))",
        "os.kill(os.getpid(), signal.SIGTERM)",
        "SystemExit",
    ),
}


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_stop_signal_shuts_the_host_down_with_its_final_checkpoints(
    tmp_path: Path, stop: str
) -> None:
    setup, signal_it, raised = STOPS[stop]
    script = tmp_path / "app.py"
    db = tmp_path / "checkpoints.db"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal, sys, threading
            from actors import AgentTemplate
            from supervisor import AgentHost, SQLiteCheckpointStore

            if __name__ == "__main__":
                {setup}
                try:
                    # No checkpoint per turn: only the final one, at shutdown, saves the turn.
                    with AgentHost(
                        SQLiteCheckpointStore({str(db)!r}), workers=2, checkpoint_every=None
                    ) as host:
                        sid = host.start_session(AgentTemplate(), session_id="s1")
                        print(host.send(sid, "hi").content)
                        print("workers:", len(host.workers()))
                        {signal_it}
                        threading.Event().wait(30)  # interrupted at once
                        print("not interrupted")
                except (KeyboardInterrupt, SystemExit) as exc:
                    print("interrupted:", type(exc).__name__)
                saved = SQLiteCheckpointStore({str(db)!r}).load("s1").messages()
                print("saved:", [m.content for m in saved])
            """
        )
    )

    done = _run(script, start_new_session=True)  # its own process group, to signal

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "echo: hi",
        "workers: 2",
        f"interrupted: {raised}",
        "saved: ['hi', 'echo: hi']",
    ]
    assert "KeyboardInterrupt" not in done.stderr  # no worker died of it
    assert "died" not in done.stderr


def test_workers_exit_when_their_host_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal
            from actors import AgentTemplate
            from supervisor import AgentHost, MemoryCheckpointStore

            if __name__ == "__main__":
                host = AgentHost(MemoryCheckpointStore(), workers=2)
                host.start_session(AgentTemplate())
                print(*(w.pid for w in host.workers()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # no shutdown, no atexit
            """
        )
    )

    done = _run(script)

    assert done.returncode == -signal.SIGKILL
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        assert process_ended_within(pid, WAIT), f"worker pid {pid} outlived its killed host"


def test_a_killed_hosts_worker_ends_its_sessions_with_reason_host_lost(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal
            from pathlib import Path
            from supervisor import AgentHost, MemoryCheckpointStore
            from tests.supervisor.host_helpers import Journal, template

            if __name__ == "__main__":
                host = AgentHost(MemoryCheckpointStore(), workers=1)
                sid = host.start_session(template(Journal(Path({str(tmp_path)!r}))), "s1")
                print(host.send(sid, "hi").content)
                print(*(w.pid for w in host.workers()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # no shutdown: the worker sees EOF
            """
        )
    )

    done = _run(script)

    assert done.returncode == -signal.SIGKILL, done.stderr
    answer, pid = done.stdout.splitlines()
    assert answer == "echo: hi"
    assert process_ended_within(int(pid), WAIT), f"worker pid {pid} outlived its killed host"
    journal = Journal(tmp_path)  # reads what the worker's copy of the plugin recorded
    assert [start.pid for start in journal.of("s1")] == [int(pid)]
    assert journal.wait_ends("s1", 1) == ["host_lost"]
