"""A private PostgreSQL server for one test: started, restarted and stopped at will.

The shared server of ``tests/pg_server.py`` serves every other test and
process on the machine, so a test that restarts or crashes a server gets one
of its own: ``initdb`` into a fresh temporary directory, listening on
``127.0.0.1`` on a free port (its unix socket in that directory too, never in
``/var/run/postgresql``), trust authentication. ``private_server()`` yields a
``PrivateServer`` (its ``dsn``, ``restart``, ``stop``, ``start``) and on exit
stops it, ``immediate`` if ``fast`` does not end it, and removes the
directory: no process of it is left behind.

``fsync`` is off. A ``restart -m immediate`` is a crash of PostgreSQL's
processes, not of the machine: the WAL it had written is in the kernel's page
cache, so crash recovery replays every committed transaction with or without
``fsync`` (``synchronous_commit`` stays on, so a commit still waits for its
WAL to be written). What ``fsync`` adds protects against power loss, which no
test here simulates; without it ``initdb`` and each shutdown checkpoint are
faster.

The binaries are the newest ``/usr/lib/postgresql/<version>/bin`` (or the
directory ``SESSIONVISOR_PG_BIN`` names). PostgreSQL refuses to run as root,
so as root (as the tests run in CI) they run as the ``postgres`` OS user via
``runuser``. Where this cannot work, ``private_server_problem()`` says why
and what to install.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

__all__ = [
    "INSTALL_HINT",
    "PrivateServer",
    "ShutdownMode",
    "find_binaries",
    "private_server",
    "private_server_problem",
]

ShutdownMode = Literal["smart", "fast", "immediate"]

INSTALL_HINT = (
    "install the PostgreSQL server binaries (Debian/Ubuntu: apt-get install postgresql, "
    "which provides /usr/lib/postgresql/<version>/bin/initdb, pg_ctl and postgres), or point "
    "SESSIONVISOR_PG_BIN at a directory holding them"
)
_PROGRAMS = ("initdb", "pg_ctl", "postgres")
_OS_USER = "postgres"
_WAIT_SECONDS = 60  # pg_ctl's bound on a start or a stop (-t)
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",  # see the module docstring
    "max_connections": "40",
    "shared_buffers": "16MB",
    "log_min_messages": "warning",
    "log_connections": "off",
}


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``."""
    override = os.environ.get("SESSIONVISOR_PG_BIN")
    if override:
        candidates = [Path(override)]
    else:

        def version(path: Path) -> tuple[int, ...]:
            name = path.parent.name
            return tuple(int(p) for p in name.split(".")) if name.replace(".", "").isdigit() else ()

        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in _PROGRAMS):
            return directory
    return None


def _run_as() -> list[str]:
    """The prefix that runs a command as the OS user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", _OS_USER, "--"]


def private_server_problem() -> str | None:
    """Why no private server can be started here (with what to install), or ``None``."""
    if find_binaries() is None:
        where = os.environ.get("SESSIONVISOR_PG_BIN") or "/usr/lib/postgresql/<version>/bin"
        return f"no initdb, pg_ctl and postgres in {where}; {INSTALL_HINT}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_OS_USER)
        except KeyError:
            return (
                f"running as root, and PostgreSQL refuses root, but there is no {_OS_USER!r} "
                f"OS user to run it as; {INSTALL_HINT}"
            )
        if shutil.which("runuser") is None:
            return "running as root and runuser (util-linux) is missing; install util-linux"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class PrivateServer:
    """One PostgreSQL server in its own directory, driven with ``pg_ctl``.

    Not thread-safe: one thread starts, stops and restarts it (any thread may use
    ``dsn``). Each method returns once ``pg_ctl`` did (``-w``: a start returns when
    the server accepts connections), or raises ``subprocess.CalledProcessError``
    with ``pg_ctl``'s output.

    Attributes:
        directory: The temporary directory (owned by the server's OS user).
        data_dir: Its data directory (``directory / "data"``), in every process's
            command line: ``pgrep -f`` finds the server's processes by it.
        port: The TCP port on 127.0.0.1.
        dsn: A libpq connection string for user and database ``postgres``.
    """

    def __init__(self, bin_dir: Path, directory: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.directory = directory
        self.data_dir = directory / "data"
        self.log_file = directory / "server.log"
        self.port = port
        self.dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

    def _pg(self, program: str, *args: str, timeout: float = _WAIT_SECONDS + 30) -> str:
        command = [*_run_as(), str(self.bin_dir / program), *args]
        done = subprocess.run(
            command,
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, command, done.stdout, f"{done.stderr}\n{self.log_tail()}"
            )
        return done.stdout

    def _ctl(self, *args: str) -> None:
        self._pg("pg_ctl", *args, "-D", str(self.data_dir), "-w", "-t", str(_WAIT_SECONDS))

    def init(self) -> None:
        """``initdb`` the data directory and write the server's settings."""
        self._pg(
            "initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        settings = {
            **_SETTINGS,
            "port": str(self.port),
            "unix_socket_directories": f"'{self.directory}'",
        }
        with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# tests/pg_private.py\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        """Start the server; returns once it accepts connections."""
        self._ctl("start", "-l", str(self.log_file))

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server: ``fast`` ends sessions and checkpoints; ``immediate`` kills
        every process without a checkpoint (a crash: the next start recovers)."""
        self._ctl("stop", "-m", mode)

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """Stop (as ``stop(mode)``) and start again; returns once it accepts connections."""
        self._ctl("restart", "-m", mode, "-l", str(self.log_file))

    def running(self) -> bool:
        """Whether the postmaster of ``postmaster.pid`` is alive."""
        pid = self._postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log (for failure messages)."""
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def close(self) -> None:
        """Stop the server (``fast``; ``immediate`` if that fails; SIGKILL to the
        postmaster's process group as the last resort) and remove its directory.
        Idempotent."""
        try:
            if self.running():
                modes: tuple[ShutdownMode, ...] = ("fast", "immediate")
                for mode in modes:
                    try:
                        self.stop(mode)
                        break
                    except (subprocess.SubprocessError, OSError):
                        continue
                pid = self._postmaster_pid()
                if pid is not None and self.running():
                    try:  # pg_ctl starts the postmaster in a process group of its own
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        os.kill(pid, signal.SIGKILL)
                    deadline = time.monotonic() + 10
                    while self.running() and time.monotonic() < deadline:
                        time.sleep(0.05)  # bounded: waits for the kill to take effect
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A started private server (see the module docstring); stopped and removed on exit.

    Raises:
        RuntimeError: ``private_server_problem()`` is not ``None`` (its message).
        subprocess.CalledProcessError: ``initdb`` or the first start failed.
    """
    problem = private_server_problem()
    if problem is not None:
        raise RuntimeError(problem)
    bin_dir = find_binaries()
    assert bin_dir is not None
    directory = Path(tempfile.mkdtemp(prefix="sv-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam(_OS_USER)
        os.chown(directory, user.pw_uid, user.pw_gid)
    server = PrivateServer(bin_dir, directory, _free_port())
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.close()
