"""The key of a data directory's API-key fingerprints, kept in the directory.

A session registered with an API key keeps only an HMAC of it (``SessionStore``);
with a key made anew by every process, a host restarted on the same data
directory could not find a session by the key it was started with
(``list_by_api_key``). So a host that owns a data directory keeps the key in
``<data_dir>/fingerprint.key``: 32 random bytes, created once with mode 0600,
read by every later host. A new key is written whole to a temporary file and
then linked into place (a link fails if the name exists), so two processes
creating it at once agree on one, and one killed meanwhile leaves no empty or
partial key for every later host to refuse (at worst a stray temporary file).
Its sessions' checkpoints carry their fingerprint (``metadata["key_fingerprint"]``),
so a resume needs no API key to be found by one again. Pure functions over the
file; thread-safe as the file system is.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
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
    if not os.path.lexists(path):
        _create(path)
    return _read(path)


def _create(path: Path) -> None:
    """Put a new key at ``path`` unless another process puts one there first.

    The key is written and synced in a temporary file beside it (mode 0600),
    which is then linked to ``path``: the name appears with the whole key or
    not at all. The directory is synced too, so that a key that checkpoints'
    fingerprints already depend on survives a power cut.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{SECRET_FILE}.", dir=path.parent)
    try:
        try:
            os.write(fd, secrets.token_bytes(_SIZE))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another process was first: its key is the directory's
        _sync_directory(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _sync_directory(directory: Path) -> None:
    """Make the directory's entries durable (POSIX; elsewhere a no-op)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
