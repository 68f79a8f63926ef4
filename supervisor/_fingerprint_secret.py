"""The key of a data directory's API-key fingerprints, kept in the directory.

A session registered with an API key keeps only an HMAC of it (``SessionStore``);
with a key made anew by every process, a host restarted on the same data
directory could not find a session by the key it was started with
(``list_by_api_key``). So a host that owns a data directory keeps the key in
``<data_dir>/fingerprint.key``: 32 random bytes, created once with mode 0600
(exclusively: two processes creating it at once agree on one), read by every
later host. Its sessions' checkpoints carry their fingerprint
(``metadata["key_fingerprint"]``), so a resume needs no API key to be found by
one again. Pure functions over the file; thread-safe as the file system is.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from supervisor.errors import SupervisorError

__all__ = ["SECRET_FILE", "check_fingerprint_key", "fingerprint_secret"]

SECRET_FILE = "fingerprint.key"
"""Name of the fingerprint key's file inside a data directory."""
_SIZE = 32


def fingerprint_secret(directory: Path) -> bytes:
    """The data directory's fingerprint key, created on first use.

    Raises:
        SupervisorError: the file exists but is not a key this module wrote (wrong
            size), or others may read it (its mode allows group or other access).
        OSError: the directory cannot be written or the file read.
    """
    path = directory / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    try:
        os.write(fd, secrets.token_bytes(_SIZE))
        os.fsync(fd)
    finally:
        os.close(fd)
    return _read(path)


def check_fingerprint_key(path: Path) -> None:
    """Check, without changing anything, that a host would accept the fingerprint key at
    ``path`` (a data directory's ``fingerprint.key``), for tools that inspect a data
    directory.

    Raises:
        SupervisorError: a host would refuse it (its mode or size; the message says what
            to do).
        OSError: it cannot be read.
    """
    _read(path)


def _read(path: Path) -> bytes:
    mode = path.stat().st_mode
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SupervisorError(
            f"{path} may be read by other users (mode {stat.S_IMODE(mode):o}); it keys the "
            f"API-key fingerprints: run 'chmod 600 {path}'"
        )
    data = path.read_bytes()
    if len(data) != _SIZE:
        raise SupervisorError(
            f"{path} holds {len(data)} bytes, not a {_SIZE}-byte fingerprint key; restore it "
            "from a backup, or delete it to start a new key (sessions then cannot be found "
            "by the API keys they were started with until resumed with them)"
        )
    return data
