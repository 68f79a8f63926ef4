"""``PostgresKeyStore``: the API keys of a cluster's gateways, in the cluster's PostgreSQL.

Every node of a cluster must accept every key, and must know which template a
session was created from (to take it over when its owner dies). So the rows
that ``KeyStore`` keeps in a node's ``gateway.sqlite3`` live here in two
tables of the checkpoint store's schema, ``gateway_api_keys`` and
``gateway_sessions``, reached through the store's connection pool.

The fingerprint secret stays a file (``gateway.secret`` in ``--data-dir``,
0600), never in the database: a stolen database then holds only HMACs under a
key it does not have. Every node needs the same file; copy it when adding a
node (``sessionvisor serve`` creates it on the first node).
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.keys import (
    KEY_PREFIX,
    SECRET_FILE,
    ApiKey,
    KeyNotFound,
    NewKey,
    RememberedSession,
    Reservation,
    key_fingerprint,
    lost_secret,
    mint_key,
    now_ms,
    read_or_create_secret,
)

if TYPE_CHECKING:
    import psycopg

    from supervisor import PostgresCheckpointStore

__all__ = ["PostgresKeyStore"]

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('sessionvisor.gateway:' || %s))"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS {s}.gateway_api_keys ("
    " key_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL UNIQUE, tenant_id TEXT NOT NULL,"
    " created_at BIGINT NOT NULL, revoked_at BIGINT)",
    "CREATE TABLE IF NOT EXISTS {s}.gateway_sessions ("
    " session_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, template TEXT NOT NULL,"
    " metadata TEXT NOT NULL, created_at BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS gateway_sessions_tenant ON {s}.gateway_sessions (tenant_id)",
)
_TENANT_LOCK = "SELECT pg_advisory_xact_lock(hashtext('sessionvisor.tenant:' || %s || ':' || %s))"
"""Taken by ``reserve_session``: its count and insert, one tenant's at a time cluster-wide."""
_COLUMNS = "key_id, tenant_id, created_at, revoked_at"
_UNOWNED = (
    " AND NOT EXISTS (SELECT 1 FROM {s}.sessions s JOIN {s}.nodes n"
    " ON n.node_id = s.owner_node AND n.incarnation = s.owner_incarnation"
    " WHERE s.session_id = g.session_id"
    " AND n.heartbeat IS NOT NULL AND n.heartbeat >= clock_timestamp() - n.ttl"
    " AND (s.owner_node, s.owner_incarnation) IS DISTINCT FROM (%s::text, %s::bigint))"
)
"""``forget_session``'s guard: no live node other than this store's own (``member``) owns
the session. Such a node runs it: it was created there anew, after this node's delete
stopped it, or this node's create lost the race to claim the id to that node's."""


class PostgresKeyStore:
    """API keys shared by every node of a cluster. Thread-safe (pooled connections).

    Args:
        store: The cluster's checkpoint store; the tables go in its schema and
            its pool runs the statements (each retried once on a broken
            connection, as the cluster's own statements are).
        data_dir: Where the fingerprint secret (``gateway.secret``) is, or is
            created; the same file on every node.
        create_secret: False to create neither ``data_dir`` nor its secret, and to
            read the secret only when a key is first made or checked (then a missing
            one raises ``FileNotFoundError``): for a caller that only lists and
            revokes keys (``sessionvisor keys list|revoke``), which need no secret and
            so write no file (a node's directory before its secret is copied in).

    Raises:
        StoreUnreachable: the database cannot be reached.
        SecretUnusable: (a ``ValueError``) with ``create_secret``, the secret file is
            damaged or readable by others, or missing while the database holds keys (made
            under the cluster's secret: copy it in); without ``create_secret``, a damaged
            file is raised when the secret is first needed.
    """

    def __init__(
        self,
        store: PostgresCheckpointStore,
        data_dir: str | os.PathLike[str],
        *,
        create_secret: bool = True,
    ) -> None:
        directory = Path(data_dir)
        self._secret_path = directory / SECRET_FILE
        self._secret: bytes | None = None
        self._store = store
        self._sql = {
            name: store.in_schema(text)
            for name, text in {
                "insert_key": "INSERT INTO {s}.gateway_api_keys VALUES (%s, %s, %s, %s, NULL)"
                " ON CONFLICT (key_id) DO NOTHING",
                "authenticate": f"SELECT {_COLUMNS} FROM {{s}}.gateway_api_keys"
                " WHERE fingerprint = %s AND revoked_at IS NULL",
                "list": f"SELECT {_COLUMNS} FROM {{s}}.gateway_api_keys",
                "any_key": "SELECT 1 FROM {s}.gateway_api_keys LIMIT 1",
                "revoke": "UPDATE {s}.gateway_api_keys SET revoked_at = %s"
                " WHERE key_id = %s AND revoked_at IS NULL",
                "key": f"SELECT {_COLUMNS} FROM {{s}}.gateway_api_keys WHERE key_id = %s",
                "remember": "INSERT INTO {s}.gateway_sessions VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (session_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id,"
                " template = EXCLUDED.template, metadata = EXCLUDED.metadata,"
                " created_at = EXCLUDED.created_at",
                "count": "SELECT count(*) FROM {s}.gateway_sessions g"
                " LEFT JOIN {s}.sessions s ON s.session_id = g.session_id"
                " WHERE g.tenant_id = %s AND g.session_id <> %s"
                " AND s.state IS DISTINCT FROM 'stopped'",
                "reserve": "INSERT INTO {s}.gateway_sessions VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (session_id) DO NOTHING",
                "tenant": "SELECT session_id, tenant_id, template, metadata, created_at"
                " FROM {s}.gateway_sessions WHERE tenant_id = %s"
                " ORDER BY created_at, session_id",
                "session": "SELECT session_id, tenant_id, template, metadata, created_at"
                " FROM {s}.gateway_sessions WHERE session_id = %s",
                "forget": f"DELETE FROM {{s}}.gateway_sessions g WHERE g.session_id = %s{_UNOWNED}",
            }.items()
        }

        def create_tables(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.transaction():  # nodes starting together: one creates, the others wait
                conn.execute(_LOCK, (store.schema,))
                for statement in _SCHEMA:
                    conn.execute(store.in_schema(statement))

        store.run("creating the gateway's tables", create_tables)
        if create_secret:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # private when made here
            self._secret = self._open_secret()

    def _open_secret(self) -> bytes:
        """The secret file, created if missing, unless the cluster's database holds keys
        already: they were made under the cluster's secret, which a new one would not
        match, so every key would be unknown (401) on this node without a word (a node
        whose ``gateway.secret`` was not copied in).

        Raises:
            SecretUnusable: the file is missing while the database holds keys, or it is
                damaged or readable by others.
        """
        path = self._secret_path
        if not path.exists() and self._rows("reading API keys", "any_key", ()):
            raise lost_secret(
                path,
                f"the cluster's database (schema {self._store.schema!r})",
                f"copy gateway.secret from another node of the cluster into {path.parent} "
                "(mode 0600; the same file on every node)",
            )
        return read_or_create_secret(path)

    def _rows(self, action: str, name: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        statement = self._sql[name]

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

        return self._store.run(action, work)

    def _key_secret(self) -> bytes:
        """The cluster's secret; read now if ``__init__`` did not (``create_secret``).

        Raises:
            FileNotFoundError: there is no secret file (see ``__init__``).
            ValueError: the secret file is damaged.
        """
        if self._secret is None:  # threads racing here read the same bytes
            self._secret = read_or_create_secret(self._secret_path, create=False)
        return self._secret

    def fingerprint(self, key: str) -> str:
        """HMAC-SHA256 of ``key`` under the cluster's secret, hex."""
        return key_fingerprint(self._key_secret(), key)

    def create(self, tenant_id: str) -> NewKey:
        """A new key for ``tenant_id``; the key itself is not stored, so show it now.

        Raises:
            ValueError: ``tenant_id`` is empty.
        """
        made, fingerprint = mint_key(tenant_id, self._key_secret())
        params = (made.info.key_id, fingerprint, tenant_id, made.info.created_at)
        self._rows("creating an API key", "insert_key", params)
        return made

    def authenticate(self, key: str) -> ApiKey | None:
        """The valid (not revoked) key ``key`` is, or ``None``."""
        if not key.startswith(KEY_PREFIX):
            return None
        rows = self._rows("checking an API key", "authenticate", (self.fingerprint(key),))
        return ApiKey(*rows[0]) if rows else None

    def list(self, tenant_id: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant_id``, if given), oldest first, revoked ones included."""
        rows = self._rows("listing API keys", "list", ())
        keys = sorted((ApiKey(*row) for row in rows), key=lambda k: (k.created_at, k.key_id))
        return [k for k in keys if tenant_id is None or k.tenant_id == tenant_id]

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key at once, on every node (idempotent); returns its row.

        Raises:
            KeyNotFound: no such key id.
        """
        self._rows("revoking an API key", "revoke", (now_ms(), key_id))
        rows = self._rows("reading an API key", "key", (key_id,))
        if not rows:
            raise KeyNotFound(key_id)
        return ApiKey(*rows[0])

    def remember_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str
    ) -> None:
        """Record a session the gateway created (its template name and user metadata)."""
        params = (session_id, tenant_id, template, metadata_json, now_ms())
        self._rows("recording a session's template", "remember", params)

    def reserve_session(
        self, session_id: str, tenant_id: str, template: str, metadata_json: str, limit: int
    ) -> Reservation:
        """Admit a new session of ``tenant_id`` under ``limit`` and record it (see
        ``ApiKeys.reserve_session``), on every node at once: one transaction holding a
        per-tenant advisory lock, so two nodes creating at the limit cannot both pass.

        The count leaves out sessions the cluster marked stopped (a node died before
        their first checkpoint; a delete cut short), and counts those recorded but not
        claimed yet (a create in flight on another node).
        """
        count_sql, insert_sql = self._sql["count"], self._sql["reserve"]
        schema = self._store.schema

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> Reservation:
            with conn.transaction():
                conn.execute(_TENANT_LOCK, (schema, tenant_id))
                # a statement of its own after the lock: it sees every reservation
                # committed before the lock was granted (READ COMMITTED)
                row = conn.execute(count_sql, (tenant_id, session_id)).fetchone()
                count = 0 if row is None else int(row[0])
                if count >= limit:
                    return Reservation(count, admitted=False, new=False)
                params = (session_id, tenant_id, template, metadata_json, now_ms())
                inserted = conn.execute(insert_sql, params).rowcount == 1
            return Reservation(count, admitted=True, new=inserted)

        return self._store.run("reserving a session", work)

    def tenant_sessions(self, tenant_id: str) -> builtins.list[RememberedSession]:
        """Every recorded session of ``tenant_id`` in the cluster, oldest first."""
        rows = self._rows("listing a tenant's sessions", "tenant", (tenant_id,))
        return [_remembered(row) for row in rows]

    def session_row(self, session_id: str) -> RememberedSession | None:
        """The record of a session, or ``None``.

        ``None`` for an id holding a NUL, without asking: PostgreSQL text cannot hold
        one, so no such session was recorded, and the query would fail (a request
        naming ``/v1/sessions/%00`` answered 500 instead of 404).
        """
        if _NUL in session_id:
            return None
        rows = self._rows("reading a session's template", "session", (session_id,))
        return _remembered(rows[0]) if rows else None

    def forget_session(self, session_id: str) -> None:
        """Drop a deleted session's record (none for an id holding a NUL: see
        ``session_row``), unless a live node other than this store's own node runs the
        session now: in a cluster, two nodes' requests for one id are not ordered by their
        gateways' per-id locks, so this node's failed create (its claim lost to another
        node's create of the id) or delete (the id created anew on another node once this
        one stopped it) would otherwise drop the record of the session that runs, its
        template with it: listed without it, and taken over by no node when its owner
        dies. The claim in the database decided which session runs; its record stays."""
        if _NUL in session_id:
            return
        node_id, incarnation = self._store.member or (None, None)
        self._rows("forgetting a session", "forget", (session_id, node_id, incarnation))

    def close(self) -> None:
        """Nothing to release: the connections are the store's (its owner closes it)."""


_NUL = "\x00"
"""The one character PostgreSQL text cannot hold."""


def _remembered(row: tuple[Any, ...]) -> RememberedSession:
    sid, tenant, template, metadata, created = row
    return RememberedSession(str(sid), str(tenant), str(template), str(metadata), int(created))
