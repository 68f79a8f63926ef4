"""``KeyStore``: the gateway's API keys, each belonging to one tenant.

A key (``sv_<random>``) is shown once, when it is created; the store keeps only
its HMAC-SHA256 fingerprint under a secret created once in the data directory
(``gateway.secret``, mode 0600), so a stolen database cannot be used to log in,
and the fingerprints still match after a restart. The rows live in a small
SQLite file of their own (``gateway.sqlite3``) in WAL mode, so the ``keys``
commands may change them while a server reads them.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import hmac
import os
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from supervisor import check_tenant_id

__all__ = [
    "KEY_PREFIX",
    "ApiKey",
    "ApiKeys",
    "KeyNotFound",
    "KeyStore",
    "NewKey",
    "RememberedSession",
    "Reservation",
    "SecretUnusable",
    "holds_keys",
    "lost_secret",
]

KEY_PREFIX: Final = "sv_"
"""Every key starts with it, so a leaked one is easy to recognise (secret scanners)."""

SECRET_FILE: Final = "gateway.secret"
DB_FILE: Final = "gateway.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS gateway_sessions (
    session_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    template TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS gateway_sessions_tenant ON gateway_sessions (tenant_id);
"""


class SecretUnusable(ValueError):
    """The data directory's ``gateway.secret`` cannot key the API-key fingerprints: it is
    damaged, others may read it, or it is missing while the key database holds keys made
    under it. The message says what to do (``sessionvisor serve`` and the ``keys``
    commands print it as their one error line)."""


class KeyNotFound(LookupError):
    """``revoke`` was given a key id the store does not have."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"no API key with id {key_id!r}; `sessionvisor keys list` shows them")
        self.key_id = key_id


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One stored key, without the key itself. Immutable, thread-safe.

    Attributes:
        key_id: Its public id (``key_<hex>``), for listing and revoking.
        tenant_id: The tenant whose sessions it may use.
        created_at: Milliseconds since the Unix epoch.
        revoked_at: When it was revoked, or ``None`` while it is valid.
    """

    key_id: str
    tenant_id: str
    created_at: int
    revoked_at: int | None


@dataclass(frozen=True, slots=True)
class NewKey:
    """What ``KeyStore.create`` returns: the key, to show once, and its row.

    Immutable and thread-safe.
    """

    key: str
    info: ApiKey


@dataclass(frozen=True, slots=True)
class Reservation:
    """What ``reserve_session`` decided. Immutable, thread-safe.

    Attributes:
        count: The tenant's other recorded sessions when it was decided.
        admitted: False when ``count`` had reached the limit (nothing was written).
        new: A record was written for the id, so the caller forgets it if the start
            fails. False when the id was recorded already (a session that exists, or
            the stale record of one that does not): the start decides, and the caller
            records the session again if it succeeds.
    """

    count: int
    admitted: bool
    new: bool


@dataclass(frozen=True, slots=True)
class RememberedSession:
    """One gateway session as the key store records it. Immutable, thread-safe.

    Attributes:
        session_id: The host's id (``<tenant>/<id>``).
        tenant_id: Its tenant.
        template: The template name it was created from.
        metadata_json: The user's metadata, as JSON.
        created_at: When it was recorded, ms since the Unix epoch.
    """

    session_id: str
    tenant_id: str
    template: str
    metadata_json: str
    created_at: int


class ApiKeys(Protocol):
    """What the gateway asks of its key store: ``KeyStore`` (one node, SQLite) or
    ``gateway.keys_pg.PostgresKeyStore`` (a cluster's nodes, sharing PostgreSQL).
    Implementations are thread-safe."""

    def create(self, tenant_id: str) -> NewKey:
        """A new key for ``tenant_id`` (shown once)."""
        ...

    def authenticate(self, key: str) -> ApiKey | None:
        """The valid key ``key`` is, or ``None``."""
        ...

    def list(self, tenant_id: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant_id``), oldest first."""
        ...

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); ``KeyNotFound`` for an unknown id."""
        ...

    def remember_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str
    ) -> None:
        """Record which template (and user metadata) a gateway session was created with."""
        ...

    def reserve_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str, limit: int
    ) -> Reservation:
        """Count the tenant's recorded sessions other than ``session_id`` and, below
        ``limit``, record this one unless it is recorded already: one atomic step against
        every other ``reserve_session`` of the tenant (every node's, in a cluster)."""
        ...

    def tenant_sessions(self, tenant_id: str) -> builtins.list[RememberedSession]:
        """Every recorded session of ``tenant_id``, oldest first."""
        ...

    def session_row(self, session_id: str) -> RememberedSession | None:
        """The record of a session, or ``None``."""
        ...

    def forget_session(self, session_id: str) -> None:
        """Drop a deleted session's record."""
        ...

    def close(self) -> None:
        """Release what the store holds. Idempotent."""
        ...


def key_fingerprint(secret: bytes, key: str) -> str:
    """HMAC-SHA256 of ``key`` under ``secret``, hex: what a key store keeps of a key."""
    return hmac.new(secret, key.encode("utf-8"), hashlib.sha256).hexdigest()


def mint_key(tenant_id: str, secret: bytes) -> tuple[NewKey, str]:
    """A new random key of ``tenant_id`` with its row, and its fingerprint under ``secret``
    (store the row and the fingerprint, never the key).

    Raises:
        TypeError, ValueError: ``tenant_id`` is not one sessions can run under (empty,
            only whitespace: ``supervisor.check_tenant_id``).
    """
    check_tenant_id(tenant_id)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    info = ApiKey(f"key_{secrets.token_hex(6)}", tenant_id, now_ms(), None)
    return NewKey(key, info), key_fingerprint(secret, key)


def read_or_create_secret(path: Path, *, create: bool = True) -> bytes:
    """The fingerprint secret: created once with 0600 (never widened), read ever after.

    Args:
        path: The secret file (``SECRET_FILE`` in a data directory).
        create: False to only read it: a missing file is then an error, not made.

    Raises:
        FileNotFoundError: ``create`` is false and there is no file.
        SecretUnusable: the file is damaged, or others may read it (with it and the key
            database, API keys of any tenant could be made): the message says what to do.
    """
    if create:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # read below, outside this handler: its errors are not "while creating"
        else:
            secret = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as out:
                out.write(secret)
                out.flush()
                os.fsync(out.fileno())
            return secret
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    """The existing secret file ``path``, checked (see ``read_or_create_secret``)."""
    secret = path.read_bytes()
    mode = path.stat().st_mode
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretUnusable(
            f"{path} may be read by other users (mode {stat.S_IMODE(mode):o}); it keys "
            f"the API-key fingerprints: run 'chmod 600 {path}'"
        )
    if len(secret) < 32:
        msg = f"{path} is damaged (fewer than 32 bytes); every key must be created anew"
        raise SecretUnusable(msg)
    return secret


def holds_keys(db: Path) -> bool:
    """Whether the key database ``db`` holds any API key (revoked ones too); read without
    writing anything (no database: ``False``, and none is made)."""
    try:
        # mode=rw, never creating it, and query_only: a read-only connection would leave
        # the -wal and -shm files it makes behind (it cannot remove them on closing)
        with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True)) as c:
            c.execute("PRAGMA query_only=ON")
            found = c.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone()
    except sqlite3.Error:  # no table yet (or no database): no key
        return False
    return found is not None


def _refuse_lost_secret(db: Path, secret: Path) -> None:
    """Refuse a missing ``secret`` beside a key database ``db`` that holds keys: they were
    fingerprinted under the lost secret, and a new one would make every one of them
    unknown (401) without a word (a data directory restored without its secret file).

    Raises:
        SecretUnusable: ``db`` holds API keys.
    """
    if holds_keys(db):
        raise lost_secret(
            secret,
            str(db),
            f"restore it from the backup of this directory; or, to start anew, remove {db} "
            "and create new keys (every client then needs one)",
        )


def lost_secret(secret: Path, where: str, remedy: str) -> SecretUnusable:
    """The error for a missing ``secret`` while ``where`` (a key database) holds keys made
    under it; ``remedy`` says what to do."""
    return SecretUnusable(
        f"{secret} is missing, but {where} holds API keys made under it: {remedy}"
    )


_CACHE_MAX = 10_000
"""Valid keys ``authenticate`` remembers at most (past it, it forgets them all)."""


class KeyStore:
    """API keys of one data directory. Thread-safe (one connection behind a lock).

    Also records which template each gateway session was created from, so a
    restarted server resumes every session on its own template.

    ``authenticate`` runs on every request, on the server's event loop; a
    database read there waits for the GIL behind the sessions' threads (about
    0.5 ms a request under load). So a valid key is remembered for
    ``cache_seconds``: a key revoked through this store stops working at once,
    one revoked by another process (``sessionvisor keys revoke`` beside a running
    server) within ``cache_seconds``. Unknown and revoked keys are never
    remembered: they are looked up every time.

    Args:
        data_dir: The directory the host serves; created if missing.
        cache_seconds: How long a valid key is remembered (0: never).
        clock: Monotonic seconds (injectable for tests).

    Raises:
        ValueError: ``cache_seconds`` is negative.
        SecretUnusable: the data directory's secret file is damaged or readable by others,
            or missing while the key database there holds keys.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        cache_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cache_seconds < 0:
            raise ValueError(f"cache_seconds must be >= 0, got {cache_seconds!r}")
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[str, tuple[ApiKey, float]] = {}  # fingerprint -> (key, until)
        directory = Path(data_dir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # private when made here
        self.path = directory / DB_FILE
        secret = directory / SECRET_FILE
        if not secret.exists() and self.path.exists():
            _refuse_lost_secret(self.path, secret)
        self._secret = read_or_create_secret(secret)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)

    def fingerprint(self, key: str) -> str:
        """HMAC-SHA256 of ``key`` under the data directory's secret, hex."""
        return key_fingerprint(self._secret, key)

    def create(self, tenant_id: str) -> NewKey:
        """A new key for ``tenant_id``; the key itself is not stored, so show it now.

        Raises:
            ValueError: ``tenant_id`` is empty.
        """
        made, fingerprint = mint_key(tenant_id, self._secret)
        info = made.info
        with self._lock:
            self._db.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, NULL)",
                (info.key_id, fingerprint, tenant_id, info.created_at),
            )
        return made

    def authenticate(self, key: str) -> ApiKey | None:
        """The valid (not revoked) key ``key`` is, or ``None``."""
        if not key.startswith(KEY_PREFIX):
            return None
        fingerprint = self.fingerprint(key)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(fingerprint)
            if hit is not None and now < hit[1]:
                return hit[0]
            row = self._db.execute(
                "SELECT key_id, tenant_id, created_at, revoked_at FROM api_keys "
                "WHERE fingerprint = ? AND revoked_at IS NULL",
                (fingerprint,),
            ).fetchone()
            if row is None:
                self._cache.pop(fingerprint, None)
                return None
            found = ApiKey(*row)
            if self._cache_seconds > 0:
                if len(self._cache) >= _CACHE_MAX:
                    self._cache.clear()
                self._cache[fingerprint] = (found, now + self._cache_seconds)
        return found

    def list(self, tenant_id: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant_id``, if given), oldest first, revoked ones included."""
        query = "SELECT key_id, tenant_id, created_at, revoked_at FROM api_keys"
        args: tuple[str, ...] = ()
        if tenant_id is not None:
            query += " WHERE tenant_id = ?"
            args = (tenant_id,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created_at, key_id", args).fetchall()
        return [ApiKey(*row) for row in rows]

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key at once (idempotent); returns its row.

        Raises:
            KeyNotFound: no such key id.
        """
        with self._lock:
            self._cache.clear()  # it is not keyed by key id; revocations are rare
            self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
                (now_ms(), key_id),
            )
            row = self._db.execute(
                "SELECT key_id, tenant_id, created_at, revoked_at FROM api_keys WHERE key_id = ?",
                (key_id,),
            ).fetchone()
        if row is None:
            raise KeyNotFound(key_id)
        return ApiKey(*row)

    # -- which template each gateway session runs on --------------------------------

    def remember_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str
    ) -> None:
        """Record a session the gateway created (its template name and user metadata)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO gateway_sessions VALUES (?, ?, ?, ?, ?)",
                (session_id, tenant_id, template, metadata_json, now_ms()),
            )

    def reserve_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str, limit: int
    ) -> Reservation:
        """Admit a new session of ``tenant_id`` under ``limit`` and record it (see
        ``ApiKeys.reserve_session``): one write transaction, so it holds against the
        other processes on this file too."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (count,) = self._db.execute(
                    "SELECT COUNT(*) FROM gateway_sessions WHERE tenant_id = ? AND session_id <> ?",
                    (tenant_id, session_id),
                ).fetchone()
                if count >= limit:
                    self._db.execute("ROLLBACK")
                    return Reservation(count, admitted=False, new=False)
                cursor = self._db.execute(
                    "INSERT OR IGNORE INTO gateway_sessions VALUES (?, ?, ?, ?, ?)",
                    (session_id, tenant_id, template, metadata_json, now_ms()),
                )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        return Reservation(count, admitted=True, new=cursor.rowcount == 1)

    def tenant_sessions(self, tenant_id: str) -> builtins.list[RememberedSession]:
        """Every recorded session of ``tenant_id``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id, tenant_id, template, metadata, created_at"
                " FROM gateway_sessions WHERE tenant_id = ? ORDER BY created_at, session_id",
                (tenant_id,),
            ).fetchall()
        return [RememberedSession(*row) for row in rows]

    def session_row(self, session_id: str) -> RememberedSession | None:
        """The record of a session, or ``None``."""
        with self._lock:
            row = self._db.execute(
                "SELECT session_id, tenant_id, template, metadata, created_at"
                " FROM gateway_sessions WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return None if row is None else RememberedSession(*row)

    def forget_session(self, session_id: str) -> None:
        """Drop a deleted session's record."""
        with self._lock:
            self._db.execute("DELETE FROM gateway_sessions WHERE session_id = ?", (session_id,))

    def close(self) -> None:
        """Close the database connection. Idempotent."""
        with self._lock:
            self._db.close()


def now_ms() -> int:
    """Milliseconds since the Unix epoch (the keys' timestamps)."""
    return time.time_ns() // 1_000_000
