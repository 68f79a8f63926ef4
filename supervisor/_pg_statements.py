"""The SQL the PostgreSQL store sends, with its schema filled in once (``Statements``).

The texts name the store's tables as ``{s}.table``; ``Statements.in_schema`` turns
each into the bytes psycopg sends for one schema (``_pg_schema.qualify``), when the
store opens. The tables and the save function they call are ``_pg_schema``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor._pg_schema import qualify

__all__ = ["Statements"]

_SAVE = (
    "SELECT out_status, out_chunks, out_epoch FROM {s}.save_checkpoint("
    "%s::text, %s::text, %s::text, %s::bigint, %s::bigint, %s::bigint, %s::text, %s::integer,"
    " %b::bytea, %b::bytea, %s::integer, %s::integer, %s::integer, %b::bytea,"
    " %s::integer, %s::integer, %b::bytea, %s::integer, %b::bytea, %b::bytea, %s::integer)"
)
_LOG_ROW = "SELECT gen, length, digest FROM {s}.message_logs WHERE session_id = %s FOR UPDATE"
_MERGE = "SELECT {s}.merge_log_chunks(%s::text, %s::integer, %s::integer, %s::integer)"
_LOAD = (
    "SELECT c.checkpoint_id, c.body, c.log_gen, c.log_bytes, c.log_count, c.log_digest,"
    " c.body_check, m.starts, m.datas"
    " FROM (SELECT * FROM {s}.checkpoints WHERE session_id = %s{where}"
    " ORDER BY epoch DESC, checkpoint_id DESC LIMIT 1) c"
    " LEFT JOIN LATERAL (SELECT array_agg(start ORDER BY start) AS starts,"
    " array_agg(data ORDER BY start) AS datas FROM {s}.message_chunks"
    " WHERE session_id = c.session_id AND gen = c.log_gen AND start < c.log_bytes) m ON true"
)
_LIST = (
    "SELECT checkpoint_id, saved_at_us, label, size FROM {s}.checkpoints"
    " WHERE session_id = %s ORDER BY epoch DESC, checkpoint_id DESC"
)
_SESSIONS = (
    'SELECT session_id FROM {s}.checkpoints GROUP BY session_id ORDER BY session_id COLLATE "C"'
)
"""Sorted by code point (bytes), as ``sorted`` and the other stores do, whatever the
database's collation (``en_US.UTF-8`` would put ``"a"`` before ``"B"``)."""
_DELETE_ALL = (
    "WITH mark AS (DELETE FROM {s}.event_marks WHERE session_id = %s)"
    " DELETE FROM {s}.checkpoints WHERE session_id = %s"
)
"""Every checkpoint of the session, and its event mark (see ``PostgresCheckpointStore.delete``)."""
_DELETE_ONE = "DELETE FROM {s}.checkpoints WHERE session_id = %s AND checkpoint_id = %s"
_PRUNE = (
    "DELETE FROM {s}.checkpoints WHERE session_id = %s AND checkpoint_id IN"
    " (SELECT checkpoint_id FROM {s}.checkpoints WHERE session_id = %s"
    " ORDER BY epoch DESC, checkpoint_id DESC OFFSET %s)"
)
_COLLECT = "SELECT {s}.collect_logs(%s)"
_LOCK_LOG = "SELECT 1 FROM {s}.message_logs WHERE session_id = %s FOR UPDATE"
"""First in a delete or prune (``_pg_writes.remove``): lock the session's message-log row."""


@dataclass(frozen=True, slots=True)
class Statements:
    """The store's statements in one schema, as the bytes psycopg sends. Immutable."""

    save: bytes
    """A save: the save function (fence check, log append, upsert, prune), one round trip."""
    merge: bytes
    """Merge the log's last chunks when an append carries (``_log_chunks.merges``)."""
    log_row: bytes
    """The session's message-log row, locked until the commit."""
    latest: bytes
    """The session's newest checkpoint with the log chunks its prefix covers."""
    one: bytes
    """As ``latest``, for one checkpoint id."""
    listing: bytes
    sessions: bytes
    delete_all: bytes
    delete_one: bytes
    prune: bytes
    collect: bytes
    """Delete the message-log rows no checkpoint uses any more."""
    lock_log: bytes

    @classmethod
    def in_schema(cls, schema: str) -> Statements:
        """The statements on the tables of ``schema`` (checked by ``check_schema_name``)."""
        return cls(
            save=qualify(_SAVE, schema),
            merge=qualify(_MERGE, schema),
            log_row=qualify(_LOG_ROW, schema),
            latest=qualify(_LOAD.replace("{where}", ""), schema),
            one=qualify(_LOAD.replace("{where}", " AND checkpoint_id = %s"), schema),
            listing=qualify(_LIST, schema),
            sessions=qualify(_SESSIONS, schema),
            delete_all=qualify(_DELETE_ALL, schema),
            delete_one=qualify(_DELETE_ONE, schema),
            prune=qualify(_PRUNE, schema),
            collect=qualify(_COLLECT, schema),
            lock_log=qualify(_LOCK_LOG, schema),
        )
