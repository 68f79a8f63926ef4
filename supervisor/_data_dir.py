"""One ``AgentHost`` per data directory: an exclusive lock its owner holds for life.

Two hosts on one directory would each resume and run the same sessions, and
whichever saved last would win: turns acknowledged by the other are lost
without a word. So a host that creates its own store first locks
``<data_dir>/host.lock`` with ``flock(LOCK_EX | LOCK_NB)`` on a descriptor it
keeps open until it has closed that store. The lock belongs to the open file
description, not to the process, so:

- the kernel drops it when the owner ends, however it ends (SIGKILL and
  out-of-memory kills included): a stale lock never blocks the next host, and
  there is no pid file to clean up;
- a second ``open`` of the file, even in the same process, conflicts with it;
- a child process could keep it alive after its parent died, by inheriting the
  descriptor. The descriptor is close-on-exec (as Python opens every file,
  PEP 446); worker processes come from a forkserver or spawn and never see it;
  and a child forked from the owner closes its copy at once
  (``os.register_at_fork``), without unlocking.

The owner writes one JSON line into the file (pid, host name, start time) for
the error a second host raises. The file itself stays: deleting a lock file
races with a host opening it.

Without ``fcntl`` (Windows) there is no lock: ``DataDirLock`` then only
creates the file, and keeping one host per directory is up to the operator.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import weakref
from datetime import UTC, datetime
from pathlib import Path

from supervisor._encryption_keys import EncryptionKeys
from supervisor._fingerprint_secret import fingerprint_secret
from supervisor.errors import DataDirLocked
from supervisor.sqlite_store import SQLiteCheckpointStore

if sys.platform != "win32":
    import fcntl

__all__ = ["LOCK_FILE", "DataDirLock", "OwnedStore"]

LOCK_FILE = "host.lock"
"""Name of the lock file inside a data directory."""

_OWNER_BYTES = 4096
"""Most bytes of the owner line read back for an error message."""

_held: weakref.WeakSet[DataDirLock] = weakref.WeakSet()
"""Every lock this process holds, for ``_drop_in_child`` (guarded by ``_held_lock``)."""
_held_lock = threading.Lock()


class DataDirLock:
    """Exclusive ownership of a data directory by one host, from construction to ``release``.

    Constructing one creates the directory if needed and takes the lock, or
    raises ``DataDirLocked`` naming the process that holds it. Dropping the
    object without ``release`` releases it when it is garbage collected (a
    host whose constructor failed half-way); otherwise it is held until the
    process has ended, not released early by ``atexit``.

    Thread-safe: ``release`` may be called from any thread, any number of times.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        """Lock ``directory`` (created with its parents if missing: the directory itself
        with mode 0700, for only its owner to read the conversations in it).

        Raises:
            DataDirLocked: another lock on the directory is held, by another
                process or by this one (another ``AgentHost`` still running).
            OSError: the directory or its lock file cannot be created or opened.
        """
        self.directory = Path(directory)
        # Private when made here (conversations live in it); an existing one keeps its mode.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = self.directory / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock_and_claim(fd, self.directory)
        except BaseException:
            os.close(fd)  # a failed flock holds nothing: closing unlocks nothing of another's
            raise
        self._fd = fd
        self._release = weakref.finalize(self, os.close, fd)
        self._release.atexit = False  # held to the very end: the kernel drops it after that
        with _held_lock:
            _held.add(self)

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock (False after ``release``)."""
        return self._release.alive

    def release(self) -> None:
        """Give the directory up (close the descriptor). Idempotent."""
        with _held_lock:
            _held.discard(self)
        self._release()

    def _drop_in_child(self) -> None:
        """In a forked child: close the inherited descriptor, leaving the parent's lock held."""
        if self._release.detach() is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"<DataDirLock {str(self.directory)!r} {state}>"


class OwnedStore:
    """A host's own SQLite store in its data directory, with the directory's lock.

    Opening takes the lock first (``DataDirLocked`` if another host holds it),
    then opens ``checkpoints.db`` (encrypted with ``encryption`` when given);
    ``close`` closes the store, then gives the directory up. Thread-safe as its
    parts are.
    """

    def __init__(self, directory: Path, encryption: EncryptionKeys | None = None) -> None:
        self.lock = DataDirLock(directory)
        try:
            self.fingerprint_secret = fingerprint_secret(directory)
            self.store = SQLiteCheckpointStore(directory / "checkpoints.db", encryption=encryption)
        except BaseException:
            self.lock.release()
            raise
        logging.getLogger("supervisor.host").info("checkpoints in %s", self.store.path)

    def close(self) -> None:
        """Close the store, then release the directory for the next host."""
        self.store.close()
        self.lock.release()


def _lock_and_claim(fd: int, directory: Path) -> None:
    """Take the exclusive lock on ``fd`` without waiting and write our owner line,
    or raise ``DataDirLocked`` naming the owner. Does nothing without ``fcntl``."""
    if sys.platform == "win32":
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid, hostname, started = _read_owner(fd)
        raise DataDirLocked(directory, pid, hostname, started) from None
    _write_owner(fd)


def _write_owner(fd: int) -> None:
    """Replace the file's content by this process's owner line (we hold the lock).

    Written from offset 0 and then trimmed, so a reader never sees an empty
    file in between: at worst the new line followed by the old one's tail,
    which ``_read_owner`` ignores after the first newline.
    """
    owner = {
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    line = (json.dumps(owner) + "\n").encode()
    os.pwrite(fd, line, 0)
    os.ftruncate(fd, len(line))


def _read_owner(fd: int) -> tuple[int | None, str | None, str | None]:
    """The owner's ``(pid, hostname, started)`` as written in the file; ``None`` where unknown
    (an owner that has not written its line yet, or a file that is not ours)."""
    try:
        first = os.pread(fd, _OWNER_BYTES, 0).split(b"\n", 1)[0]
        owner = json.loads(first)
    except (OSError, ValueError):
        return None, None, None
    if not isinstance(owner, dict):
        return None, None, None
    pid, hostname, started = owner.get("pid"), owner.get("hostname"), owner.get("started")
    return (
        pid if isinstance(pid, int) else None,
        hostname if isinstance(hostname, str) else None,
        started if isinstance(started, str) else None,
    )


def _drop_all_in_child() -> None:
    """After ``fork``, in the child: give up every inherited lock descriptor.

    Runs with only the forking thread alive, so ``_held_lock`` may be held by
    a thread that no longer exists: it is not taken here.
    """
    for held in list(_held):
        held._drop_in_child()
    _held.clear()


if sys.platform != "win32":
    os.register_at_fork(after_in_child=_drop_all_in_child)
