"""``doctor``'s checks of the data directory's files: modes, dangling links, secrets.

Each check appends one line per problem, saying what to do, to ``problems``;
none changes anything. The secrets are checked by the rules the programs that
read them apply, so ``doctor`` never passes a directory ``serve`` refuses.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from contextlib import closing
from pathlib import Path

from supervisor import FINGERPRINT_KEY_FILE, SupervisorError, check_fingerprint_key

__all__ = ["SIDE_FILES", "check_files", "side_files"]

GATEWAY_SECRET = "gateway.secret"
"""The gateway's key-fingerprint secret (``gateway.keys.SECRET_FILE``; not imported, so
that ``doctor`` runs without the ``server`` extra)."""
GATEWAY_KEYS_DB = "gateway.sqlite3"
"""The gateway's key database (``gateway.keys.DB_FILE``)."""
SIDE_FILES = (FINGERPRINT_KEY_FILE, GATEWAY_SECRET, GATEWAY_KEYS_DB)
"""What a host or the gateway keeps in a data directory beside the store (``keys create``
makes the last two before any host ran): one of them there makes it a data directory to
check, with a store or without."""
_GATEWAY_SECRET_BYTES = 32
"""The fewest bytes ``gateway.keys.read_or_create_secret`` accepts."""
_PRIVATE = stat.S_IRWXG | stat.S_IRWXO
"""Mode bits a secret file must not have (``supervisor._fingerprint_secret``'s rule)."""


def check_files(data_dir: Path, problems: list[str]) -> None:
    """Every file-level problem of ``data_dir``: modes, dangling links, secrets."""
    _permissions(data_dir, problems)
    _secrets(data_dir, problems)


def side_files(data_dir: Path) -> list[str]:
    """The ``SIDE_FILES`` in ``data_dir`` (a link to nothing counted: it is a finding)."""
    return [name for name in SIDE_FILES if os.path.lexists(data_dir / name)]


def _permissions(data_dir: Path, problems: list[str]) -> None:
    """World-writable entries, and symbolic links to nothing (``stat`` fails on them)."""
    for path in (data_dir, *sorted(data_dir.iterdir())):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            if path.is_symlink():
                problems.append(
                    f"{path} is a symbolic link to {os.readlink(path)!r}, which does not "
                    f"exist: remove it (rm {path}) or restore what it points to"
                )
            continue  # else removed meanwhile (a host's -wal or -shm file)
        except OSError as exc:
            problems.append(f"{path} cannot be examined ({exc.strerror}): check its owner")
            continue
        if mode & 0o002:
            problems.append(
                f"{path} is writable by every user (mode {mode:o}): run chmod o-w {path}"
            )


def _lost_secret(data_dir: Path, secret: Path, problems: list[str]) -> None:
    """A missing ``gateway.secret`` beside a key database holding API keys, which serve
    refuses (``gateway.keys.SecretUnusable``): the keys were made under the lost secret.
    Read through a connection that neither creates the database nor leaves a file."""
    db = data_dir / GATEWAY_KEYS_DB
    if not db.is_file():
        return
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True)) as conn:
            conn.execute("PRAGMA query_only=ON")
            found = conn.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone()
    except sqlite3.Error:  # no key table (a damaged database is a problem found elsewhere)
        return
    if found is not None:
        problems.append(
            f"{secret} is missing, but {db} holds API keys made under it: restore it from "
            f"the backup of this directory; or, to start anew, remove {db} and create new "
            "keys (every client then needs one)"
        )


def _secrets(data_dir: Path, problems: list[str]) -> None:
    """``fingerprint.key`` as a host reads it (mode and size; a host refuses to start
    otherwise), and ``gateway.secret`` by the same mode rule and the size the gateway
    needs. A missing secret is no problem (the first host or server creates it), but for
    a ``gateway.secret`` the key database's API keys were made under (``_lost_secret``)."""
    key = data_dir / FINGERPRINT_KEY_FILE
    if key.exists():  # read only if there: the library's reader never creates one
        try:
            check_fingerprint_key(key)
        except SupervisorError as exc:
            problems.append(str(exc))
        except OSError as exc:
            problems.append(f"{key} cannot be read ({exc.strerror}): check its owner")
    secret = data_dir / GATEWAY_SECRET
    if not secret.exists():
        _lost_secret(data_dir, secret, problems)
        return
    found = secret.stat()
    if not stat.S_ISREG(found.st_mode):  # a directory, say: serve cannot read it
        problems.append(
            f"{secret} is not a file: serve refuses it; restore the file from a backup, or "
            "remove it and create every API key anew"
        )
        return
    if os.name == "posix" and found.st_mode & _PRIVATE:
        problems.append(
            f"{secret} may be read by other users (mode {stat.S_IMODE(found.st_mode):o}); it "
            f"keys the gateway's API-key fingerprints: run 'chmod 600 {secret}'"
        )
    if found.st_size < _GATEWAY_SECRET_BYTES:
        problems.append(
            f"{secret} is damaged (fewer than {_GATEWAY_SECRET_BYTES} bytes): serve refuses "
            "it; restore it from a backup, or delete it and create every API key anew"
        )
