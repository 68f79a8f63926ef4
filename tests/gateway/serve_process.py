"""``sessionvisor serve`` as a real process: the installed console script, started on an
ephemeral port (``--port 0``; the port is read from the ``serving on http://...``
line it prints), and the process tree it leaves behind, read from ``/proc``."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "sessionvisor"
PREFIX = "serving on "


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``sessionvisor ARGS`` to completion (60 s at most)."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT
    )


def create_key(data_dir: Path, tenant: str) -> str:
    """A new API key of ``tenant``, made by ``sessionvisor keys create``."""
    done = cli("keys", "create", "--data-dir", str(data_dir), "--tenant", tenant)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (children, their children, ...)."""
    tree = _children()
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found and alive(child):
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait up to ``timeout`` s for every process of ``pids`` to end; the ones still alive."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # polls a condition with a deadline; no event tells of a stranger's end
        left = {p for p in left if alive(p)}
    return left


class ServeProcess:
    """``sessionvisor serve --port 0`` on ``data_dir``, started and waited for: ``url`` is
    where it listens. Its stderr (the logs) goes to ``log``. Not thread-safe."""

    def __init__(
        self,
        data_dir: Path,
        templates: list[str],
        log: Path,
        *,
        workers: int | None = None,
        options: Sequence[str] = (),
        cwd: Path | None = None,
    ) -> None:
        args = [str(SCRIPT), "serve", "--data-dir", str(data_dir), "--port", "0", *options]
        for template in templates:
            args += ["--template", template]
        if workers is not None:
            args += ["--workers", str(workers)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = log
        self._stderr: IO[Any] = log.open("ab")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._stderr, env=env, cwd=cwd
        )
        self.url = self._read_url(timeout=60)

    def _read_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        got = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in got:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.kill()
                    raise AssertionError(f"serve printed no address: {self.log.read_text()}")
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.wait(5)
                    raise AssertionError(f"serve exited: {self.log.read_text()}")
                got += chunk
        line = got.decode().splitlines()[0]
        assert line.startswith(PREFIX), line
        return line.removeprefix(PREFIX)

    def descendants(self) -> set[int]:
        """The processes the server started (workers, the forkserver) that still run."""
        return descendants(self.proc.pid)

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit status (``-N``: killed by signal N), once exited; closes the pipes."""
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.returncode is not None:
                self._close()

    def kill(self) -> None:
        """SIGKILL, and reap."""
        self.proc.kill()
        self.wait(30)

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


def frames(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` frames of an SSE body, as they arrive."""
    kind, data = "message", ""
    for line in lines:
        if not line:
            if data:
                yield kind, json.loads(data)
            kind, data = "message", ""
        elif line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
