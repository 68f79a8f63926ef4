"""The PostgreSQL checkpoint store's schema: its tables, its save function, its migrations.

Everything lives in one PostgreSQL schema (``sessionvisor`` unless the store
is told otherwise), so one database can hold several independent stores:

* ``checkpoints``: one row per checkpoint, as in the SQLite store (body,
  message-log reference, ``body_check`` seal), plus ``epoch``: the session's
  ownership epoch when it was written. "Newest" is ``(epoch, checkpoint_id)``
  descending: a checkpoint of a later owner is newer than any of an earlier
  one, whatever their clocks said.
* ``message_chunks`` / ``message_logs``: each session's messages, stored once
  in an append-only log (see ``_message_log``), whose chunks merge as a base-8
  counter of its appends (``message_logs.chunks``, version 4) carries
  (``merge_log_chunks``, see ``_log_chunks``). ``message_logs.saves``
  (version 3) is an upper bound on the session's checkpoints: every save that
  finds the row adds one (a save of an existing checkpoint too), deletes leave
  it, and a prune that finds nothing to delete sets it to the true count.
* ``nodes``: the cluster's nodes (``node_id``, ``incarnation``, ``address``,
  ``ttl``, ``heartbeat`` on the database clock; ``heartbeat`` NULL once drained;
  ``holder`` (version 6), the registering process's token, ``cluster._holder``).
* ``sessions``: who owns each session (``owner_node``, ``owner_incarnation``),
  its ``epoch`` (bumped by every claim) and its ``state`` (``active``,
  ``hibernated``, ``stopped``: what a sweeper may resume eagerly).
* ``event_marks`` (version 2): per session, ``event_seq``, the highest event
  sequence number any owner fanned out to other nodes
  (``cluster.ClusterEvents``), from which a new owner's numbering goes on. A
  table of its own, so that moving a mark takes the session's row only ``FOR
  SHARE``, as saves do, and never waits for them.
* ``meta``: ``schema_version``.

``checkpoints.checkpoint_id`` has the ``"C"`` collation (version 5), so checkpoints
order by code point, as Python sorts their ids, whatever the database's collation.

``save_checkpoint`` (PL/pgSQL) writes one checkpoint in one round trip: it
checks the fence (the session's owner and epoch, under a ``FOR SHARE`` lock
that a claim must wait for), checks that the message log is still the one the
client extends while it updates the log's row (else nothing is written and it
says so: status 2), appends to the log or starts a new generation, upserts the
checkpoint and prunes to ``keep_last`` when the session may hold more (its
``saves`` bound says so, or it has no log row). Status 1 means the fence
refused it; nothing was written.

Migrations: ``MIGRATIONS`` lists, per schema version, the statements that
bring the previous version to it. ``migrate`` runs the missing ones in one
transaction under a transaction-scoped advisory lock, so nodes starting
together apply each exactly once; a schema newer than this code is refused.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from supervisor.errors import SupervisorError

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_schema_name", "migrate", "qualify"]

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_V1 = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    "CREATE TABLE {s}.meta (name text PRIMARY KEY, value text NOT NULL)",
    """
    CREATE TABLE {s}.checkpoints (
        session_id text NOT NULL,
        checkpoint_id text NOT NULL,
        epoch bigint NOT NULL,
        saved_at_us bigint NOT NULL,
        label text,
        size integer NOT NULL,
        body bytea NOT NULL,
        log_gen integer,
        log_bytes integer,
        log_count integer,
        log_digest bytea,
        body_check bytea NOT NULL,
        PRIMARY KEY (session_id, checkpoint_id)
    )
    """,
    "CREATE INDEX checkpoints_newest"
    " ON {s}.checkpoints (session_id, epoch DESC, checkpoint_id DESC)",
    """
    CREATE TABLE {s}.message_chunks (
        session_id text NOT NULL,
        gen integer NOT NULL,
        start integer NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (session_id, gen, start)
    )
    """,
    """
    CREATE TABLE {s}.message_logs (
        session_id text PRIMARY KEY,
        gen integer NOT NULL,
        length integer NOT NULL,
        digest bytea NOT NULL,
        chunks integer NOT NULL
    )
    """,
    """
    CREATE TABLE {s}.nodes (
        node_id text PRIMARY KEY,
        incarnation bigint NOT NULL,
        address text NOT NULL,
        ttl interval NOT NULL,
        heartbeat timestamptz,
        started_at timestamptz NOT NULL
    )
    """,
    """
    CREATE TABLE {s}.sessions (
        session_id text PRIMARY KEY,
        owner_node text,
        owner_incarnation bigint,
        epoch bigint NOT NULL,
        state text NOT NULL CHECK (state IN ('active', 'hibernated', 'stopped')),
        claimed_at timestamptz NOT NULL
    )
    """,
    "CREATE INDEX sessions_owner ON {s}.sessions (owner_node, owner_incarnation)",
    """
    CREATE FUNCTION {s}.collect_logs(p_session text) RETURNS void
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM {s}.checkpoints k WHERE k.session_id = p_session) THEN
            DELETE FROM {s}.message_chunks c WHERE c.session_id = p_session;
            DELETE FROM {s}.message_logs l WHERE l.session_id = p_session;
        ELSE
            DELETE FROM {s}.message_chunks c
             WHERE c.session_id = p_session
               AND c.gen <> (SELECT l.gen FROM {s}.message_logs l WHERE l.session_id = p_session)
               AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints k
                                WHERE k.session_id = p_session AND k.log_gen = c.gen);
        END IF;
    END
    $$
    """,
    """
    CREATE FUNCTION {s}.save_checkpoint(
        p_session text, p_checkpoint text,
        p_node text, p_incarnation bigint, p_epoch bigint,
        p_saved_at_us bigint, p_label text, p_size integer, p_body bytea, p_check bytea,
        p_log_gen integer, p_log_bytes integer, p_log_count integer, p_log_digest bytea,
        p_expect_gen integer, p_expect_length integer, p_expect_digest bytea,
        p_append_at integer, p_append bytea, p_stored_digest bytea,
        p_keep_last integer,
        OUT out_status integer, OUT out_chunks integer, OUT out_epoch bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        v_owner text;
        v_log record;
        v_pruned integer;
    BEGIN
        out_chunks := NULL;
        IF p_node IS NOT NULL THEN
            SELECT s.epoch INTO out_epoch FROM {s}.sessions s
             WHERE s.session_id = p_session AND s.owner_node = p_node
               AND s.owner_incarnation = p_incarnation AND s.epoch = p_epoch
             FOR SHARE;
            IF NOT FOUND THEN
                out_status := 1;
                RETURN;
            END IF;
        ELSE
            SELECT s.epoch, s.owner_node INTO out_epoch, v_owner FROM {s}.sessions s
             WHERE s.session_id = p_session
             FOR SHARE;
            IF v_owner IS NOT NULL THEN
                out_status := 1;
                RETURN;
            END IF;
            out_epoch := COALESCE(out_epoch, 0);
        END IF;
        IF p_log_gen IS NOT NULL THEN
            SELECT l.gen, l.length, l.digest, l.chunks INTO v_log FROM {s}.message_logs l
             WHERE l.session_id = p_session
             FOR UPDATE;
            IF p_expect_gen IS NULL THEN
                IF FOUND THEN
                    out_status := 2;
                    RETURN;
                END IF;
            ELSIF NOT FOUND OR v_log.gen <> p_expect_gen OR v_log.length <> p_expect_length
                  OR v_log.digest <> p_expect_digest THEN
                out_status := 2;
                RETURN;
            END IF;
            IF p_log_gen = p_expect_gen THEN
                out_chunks := v_log.chunks;
                IF p_append_at = 0 THEN  -- rewritten whole, as one chunk
                    DELETE FROM {s}.message_chunks c
                     WHERE c.session_id = p_session AND c.gen = p_log_gen;
                    out_chunks := 0;
                END IF;
                IF length(p_append) > 0 THEN
                    INSERT INTO {s}.message_chunks AS c
                         VALUES (p_session, p_log_gen, p_append_at, p_append)
                        ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data;
                    out_chunks := out_chunks + 1;
                END IF;
                UPDATE {s}.message_logs l
                   SET length = p_log_bytes, digest = p_stored_digest, chunks = out_chunks
                 WHERE l.session_id = p_session;
            ELSE  -- a new generation
                out_chunks := CASE WHEN length(p_append) > 0 THEN 1 ELSE 0 END;
                IF p_expect_gen IS NULL THEN  -- the session's first log: unless one came first
                    INSERT INTO {s}.message_logs AS l
                         VALUES (p_session, p_log_gen, p_log_bytes, p_stored_digest, out_chunks)
                        ON CONFLICT (session_id) DO NOTHING;
                    GET DIAGNOSTICS v_pruned = ROW_COUNT;
                    IF v_pruned = 0 THEN
                        out_status := 2;
                        RETURN;
                    END IF;
                ELSE
                    UPDATE {s}.message_logs l
                       SET gen = p_log_gen, length = p_log_bytes, digest = p_stored_digest,
                           chunks = out_chunks
                     WHERE l.session_id = p_session;
                END IF;
                IF length(p_append) > 0 THEN
                    INSERT INTO {s}.message_chunks AS c VALUES (p_session, p_log_gen, 0, p_append)
                        ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data;
                END IF;
                DELETE FROM {s}.message_chunks c  -- generations no checkpoint uses any more
                 WHERE c.session_id = p_session AND c.gen <> p_log_gen
                   AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints k
                                    WHERE k.session_id = p_session AND k.log_gen = c.gen);
            END IF;
        END IF;
        INSERT INTO {s}.checkpoints AS k (session_id, checkpoint_id, epoch, saved_at_us, label,
                size, body, log_gen, log_bytes, log_count, log_digest, body_check)
             VALUES (p_session, p_checkpoint, out_epoch, p_saved_at_us, p_label, p_size, p_body,
                p_log_gen, p_log_bytes, p_log_count, p_log_digest, p_check)
            ON CONFLICT (session_id, checkpoint_id) DO UPDATE SET epoch = EXCLUDED.epoch,
                saved_at_us = EXCLUDED.saved_at_us, label = EXCLUDED.label,
                size = EXCLUDED.size, body = EXCLUDED.body, log_gen = EXCLUDED.log_gen,
                log_bytes = EXCLUDED.log_bytes, log_count = EXCLUDED.log_count,
                log_digest = EXCLUDED.log_digest, body_check = EXCLUDED.body_check;
        IF p_keep_last IS NOT NULL THEN
            DELETE FROM {s}.checkpoints k
             WHERE k.session_id = p_session AND k.checkpoint_id IN (
                   SELECT o.checkpoint_id FROM {s}.checkpoints o WHERE o.session_id = p_session
                    ORDER BY o.epoch DESC, o.checkpoint_id DESC OFFSET p_keep_last);
            GET DIAGNOSTICS v_pruned = ROW_COUNT;
            IF v_pruned > 0 THEN
                PERFORM {s}.collect_logs(p_session);
            END IF;
        END IF;
        out_status := 0;
    END
    $$
    """,
)

_V2 = (
    """
    CREATE TABLE {s}.event_marks (
        session_id text PRIMARY KEY,
        event_seq bigint NOT NULL
    )
    """,
)

_V3 = (
    # An upper bound on the session's checkpoints, so that a save prunes only when the
    # session may hold more than keep_last. Every save that writes the log adds one
    # (an idempotent re-save too: still a bound), deletes only lower the true count.
    "ALTER TABLE {s}.message_logs ADD COLUMN saves bigint",
    "UPDATE {s}.message_logs l SET saves ="
    " (SELECT count(*) FROM {s}.checkpoints k WHERE k.session_id = l.session_id)",
    "ALTER TABLE {s}.message_logs ALTER COLUMN saves SET NOT NULL",
    # The same signature as version 2's, so a node still running that code calls this one.
    """
    CREATE OR REPLACE FUNCTION {s}.save_checkpoint(
        p_session text, p_checkpoint text,
        p_node text, p_incarnation bigint, p_epoch bigint,
        p_saved_at_us bigint, p_label text, p_size integer, p_body bytea, p_check bytea,
        p_log_gen integer, p_log_bytes integer, p_log_count integer, p_log_digest bytea,
        p_expect_gen integer, p_expect_length integer, p_expect_digest bytea,
        p_append_at integer, p_append bytea, p_stored_digest bytea,
        p_keep_last integer,
        OUT out_status integer, OUT out_chunks integer, OUT out_epoch bigint)
    LANGUAGE plpgsql AS $$
    DECLARE
        v_owner text;
        v_incarnation bigint;
        v_saves bigint;
        v_count integer;
    BEGIN
        out_chunks := NULL;
        -- The fence: the session's row by its key alone (the owner's index would have the
        -- lookup walk every session of the node), locked even when it refuses the save.
        SELECT s.epoch, s.owner_node, s.owner_incarnation
          INTO out_epoch, v_owner, v_incarnation
          FROM {s}.sessions s WHERE s.session_id = p_session
           FOR SHARE;
        IF p_node IS NOT NULL THEN
            IF NOT FOUND OR v_owner IS DISTINCT FROM p_node
               OR v_incarnation IS DISTINCT FROM p_incarnation OR out_epoch <> p_epoch THEN
                out_status := 1;
                RETURN;
            END IF;
        ELSIF v_owner IS NOT NULL THEN
            out_status := 1;
            RETURN;
        ELSE
            out_epoch := COALESCE(out_epoch, 0);
        END IF;
        IF p_log_gen = p_expect_gen AND p_append_at > 0 THEN
            -- The usual save: it appends to the log it expects. One statement: the log's row
            -- (only if it is still that log), the appended chunk, the checkpoint.
            WITH l AS (
                UPDATE {s}.message_logs l
                   SET length = p_log_bytes, digest = p_stored_digest,
                       chunks = l.chunks + CASE WHEN length(p_append) > 0 THEN 1 ELSE 0 END,
                       saves = l.saves + 1
                 WHERE l.session_id = p_session AND l.gen = p_expect_gen
                   AND l.length = p_expect_length AND l.digest = p_expect_digest
                RETURNING l.chunks, l.saves
            ), c AS (
                INSERT INTO {s}.message_chunks AS c
                     SELECT p_session, p_log_gen, p_append_at, p_append FROM l
                      WHERE length(p_append) > 0
                    ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data
            ), k AS (
                INSERT INTO {s}.checkpoints AS k (session_id, checkpoint_id, epoch, saved_at_us,
                        label, size, body, log_gen, log_bytes, log_count, log_digest, body_check)
                     SELECT p_session, p_checkpoint, out_epoch, p_saved_at_us, p_label, p_size,
                        p_body, p_log_gen, p_log_bytes, p_log_count, p_log_digest, p_check FROM l
                    ON CONFLICT (session_id, checkpoint_id) DO UPDATE SET epoch = EXCLUDED.epoch,
                        saved_at_us = EXCLUDED.saved_at_us, label = EXCLUDED.label,
                        size = EXCLUDED.size, body = EXCLUDED.body, log_gen = EXCLUDED.log_gen,
                        log_bytes = EXCLUDED.log_bytes, log_count = EXCLUDED.log_count,
                        log_digest = EXCLUDED.log_digest, body_check = EXCLUDED.body_check
            )
            SELECT l.chunks, l.saves INTO out_chunks, v_saves FROM l;
            IF NOT FOUND THEN  -- not the log expected: nothing was written
                out_status := 2;
                RETURN;
            END IF;
        ELSE
            IF p_log_gen IS NULL THEN  -- no messages: count the checkpoint if the session has a log
                UPDATE {s}.message_logs l SET saves = l.saves + 1
                 WHERE l.session_id = p_session
                RETURNING l.saves INTO v_saves;
            ELSIF p_expect_gen IS NULL THEN  -- the session's first log: unless one came first
                out_chunks := CASE WHEN length(p_append) > 0 THEN 1 ELSE 0 END;
                INSERT INTO {s}.message_logs AS l (session_id, gen, length, digest, chunks, saves)
                     VALUES (p_session, p_log_gen, p_log_bytes, p_stored_digest, out_chunks,
                        (SELECT count(*) FROM {s}.checkpoints k WHERE k.session_id = p_session) + 1)
                    ON CONFLICT (session_id) DO NOTHING
                RETURNING l.saves INTO v_saves;
                IF NOT FOUND THEN
                    out_status := 2;
                    RETURN;
                END IF;
                IF out_chunks > 0 THEN
                    INSERT INTO {s}.message_chunks AS c VALUES (p_session, p_log_gen, 0, p_append)
                        ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data;
                END IF;
                DELETE FROM {s}.message_chunks c  -- generations no checkpoint uses any more
                 WHERE c.session_id = p_session AND c.gen <> p_log_gen
                   AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints k
                                    WHERE k.session_id = p_session AND k.log_gen = c.gen);
            ELSE  -- the log must still be the one the client extends: else nothing is written
                UPDATE {s}.message_logs l
                   SET gen = p_log_gen, length = p_log_bytes, digest = p_stored_digest,
                       chunks = CASE WHEN p_log_gen = p_expect_gen AND p_append_at > 0
                                     THEN l.chunks ELSE 0 END
                                + CASE WHEN length(p_append) > 0 THEN 1 ELSE 0 END,
                       saves = l.saves + 1
                 WHERE l.session_id = p_session AND l.gen = p_expect_gen
                   AND l.length = p_expect_length AND l.digest = p_expect_digest
                RETURNING l.chunks, l.saves INTO out_chunks, v_saves;
                IF NOT FOUND THEN
                    out_status := 2;
                    RETURN;
                END IF;
                IF p_log_gen = p_expect_gen THEN
                    IF p_append_at = 0 THEN  -- rewritten whole, as one chunk
                        DELETE FROM {s}.message_chunks c
                         WHERE c.session_id = p_session AND c.gen = p_log_gen;
                    END IF;
                    IF length(p_append) > 0 THEN
                        INSERT INTO {s}.message_chunks AS c
                             VALUES (p_session, p_log_gen, p_append_at, p_append)
                            ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data;
                    END IF;
                ELSE  -- a new generation
                    IF length(p_append) > 0 THEN
                        INSERT INTO {s}.message_chunks AS c
                             VALUES (p_session, p_log_gen, 0, p_append)
                            ON CONFLICT (session_id, gen, start) DO UPDATE SET data = EXCLUDED.data;
                    END IF;
                    DELETE FROM {s}.message_chunks c  -- generations no checkpoint uses any more
                     WHERE c.session_id = p_session AND c.gen <> p_log_gen
                       AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints k
                                        WHERE k.session_id = p_session AND k.log_gen = c.gen);
                END IF;
            END IF;
            INSERT INTO {s}.checkpoints AS k (session_id, checkpoint_id, epoch, saved_at_us, label,
                    size, body, log_gen, log_bytes, log_count, log_digest, body_check)
                 VALUES (p_session, p_checkpoint, out_epoch, p_saved_at_us, p_label, p_size, p_body,
                    p_log_gen, p_log_bytes, p_log_count, p_log_digest, p_check)
                ON CONFLICT (session_id, checkpoint_id) DO UPDATE SET epoch = EXCLUDED.epoch,
                    saved_at_us = EXCLUDED.saved_at_us, label = EXCLUDED.label,
                    size = EXCLUDED.size, body = EXCLUDED.body, log_gen = EXCLUDED.log_gen,
                    log_bytes = EXCLUDED.log_bytes, log_count = EXCLUDED.log_count,
                    log_digest = EXCLUDED.log_digest, body_check = EXCLUDED.body_check;
        END IF;
        -- Prune only when the session may hold more than keep_last checkpoints (no log row:
        -- no bound, always).
        IF p_keep_last IS NOT NULL AND (v_saves IS NULL OR v_saves > p_keep_last) THEN
            DELETE FROM {s}.checkpoints k
             WHERE k.session_id = p_session AND k.checkpoint_id IN (
                   SELECT o.checkpoint_id FROM {s}.checkpoints o WHERE o.session_id = p_session
                    ORDER BY o.epoch DESC, o.checkpoint_id DESC OFFSET p_keep_last);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            IF v_count > 0 THEN
                PERFORM {s}.collect_logs(p_session);
            ELSIF v_saves IS NOT NULL THEN  -- the bound was loose (deletes): make it exact
                UPDATE {s}.message_logs l
                   SET saves = (SELECT count(*) FROM {s}.checkpoints k
                                 WHERE k.session_id = p_session)
                 WHERE l.session_id = p_session;
            END IF;
        END IF;
        out_status := 0;
    END
    $$
    """,
)

_V4 = (
    # Chunks merge as a base-8 counter of the log's appends carries (``_log_chunks``): the
    # client asks after a save whose append carries; ``message_logs.chunks`` counts appends
    # from now on (it counted chunks: read as appends, merges start a little off, harmlessly).
    # A function of its own, so ``save_checkpoint`` and the nodes still calling it are as
    # they were; a merge only re-cuts bytes, so it may also run in a transaction of its own.
    """
    CREATE FUNCTION {s}.merge_log_chunks(
        p_session text, p_gen integer, p_length integer, p_count integer)
    RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
        v_first integer;
        v_bytes bigint;
        v_found integer;
        v_data bytea;
    BEGIN
        -- Only the log the caller just wrote: another writer may have moved it on since.
        PERFORM 1 FROM {s}.message_logs l
          WHERE l.session_id = p_session AND l.gen = p_gen AND l.length = p_length
            FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 0;
        END IF;
        SELECT min(t.start), sum(length(t.data)), count(*) INTO v_first, v_bytes, v_found
          FROM (SELECT c.start, c.data FROM {s}.message_chunks c
                 WHERE c.session_id = p_session AND c.gen = p_gen AND c.start < p_length
                 ORDER BY c.start DESC LIMIT p_count) t;
        IF v_found < 2 OR v_first + v_bytes <> p_length THEN  -- one chunk, or not contiguous
            RETURN 0;
        END IF;
        SELECT string_agg(c.data, ''::bytea ORDER BY c.start) INTO v_data
          FROM {s}.message_chunks c
         WHERE c.session_id = p_session AND c.gen = p_gen AND c.start >= v_first;
        DELETE FROM {s}.message_chunks c
         WHERE c.session_id = p_session AND c.gen = p_gen AND c.start >= v_first;
        INSERT INTO {s}.message_chunks VALUES (p_session, p_gen, v_first, v_data);
        RETURN v_found;
    END
    $$
    """,
)

_V5 = (
    # "Newest" is the greatest checkpoint id by code point, as Python and the other stores
    # compare them; the column had the database's collation, and under a linguistic one
    # (en_US.UTF-8) "B" sorted after "a", so ids other than the generated lowercase hex
    # ones ordered differently. Rebuilds the key and the newest-first index in "C" order.
    'ALTER TABLE {s}.checkpoints ALTER COLUMN checkpoint_id TYPE text COLLATE "C"',
)

_V6 = (
    # The process that registered the node (``cluster._holder``): a node restarted under
    # the same id takes its lease over at once when that process is provably gone.
    "ALTER TABLE {s}.nodes ADD COLUMN holder text",
)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, _V1),
    (2, _V2),
    (3, _V3),
    (4, _V4),
    (5, _V5),
    (6, _V6),
)
"""Per schema version, in order, the statements that bring the version before it to it
(``{s}`` is the quoted schema name)."""
SCHEMA_VERSION = MIGRATIONS[-1][0]


def check_schema_name(name: object) -> str:
    """Validate the PostgreSQL schema a store lives in.

    Raises:
        ValueError: not a lowercase identifier of at most 63 characters.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"schema must be a lowercase SQL identifier (letters, digits, '_'; at most 63), "
            f"got {name!r}"
        )
    return name


def qualify(text: str, schema: str) -> bytes:
    """``text`` with ``{s}`` replaced by the quoted ``schema`` (checked by
    ``check_schema_name``, so it holds no quote), as the bytes psycopg sends."""
    return text.replace("{s}", f'"{schema}"').encode()


def _lock_key(schema: str) -> int:
    """The advisory lock key of a schema's migrations (a signed 64-bit int)."""
    raw = hashlib.blake2b(f"sessionvisor.schema:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(raw, "big", signed=True)


def migrate(
    conn: psycopg.Connection[tuple[object, ...]],
    schema: str,
    migrations: tuple[tuple[int, tuple[str, ...]], ...] = MIGRATIONS,
) -> int:
    """Bring ``schema`` to the newest version of ``migrations``; returns the version found.

    Runs in one transaction holding ``pg_advisory_xact_lock`` for the schema,
    so concurrent callers apply each step exactly once (the others wait, then
    find it done). ``conn`` must be in autocommit mode.

    Raises:
        SupervisorError: the schema is newer than ``migrations`` know.
    """
    newest = migrations[-1][0]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        found = 0
        row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".meta',)).fetchone()
        if row is not None and row[0] is not None:
            value = conn.execute(
                qualify("SELECT value FROM {s}.meta WHERE name = 'schema_version'", schema)
            ).fetchone()
            found = int(str(value[0])) if value is not None else 0
        if found > newest:
            raise SupervisorError(
                f"PostgreSQL schema {schema!r} has checkpoint schema version {found}, newer "
                f"than the supported {newest}; upgrade sessionvisor to use it"
            )
        for version, statements in migrations:
            if version <= found:
                continue
            for statement in statements:
                conn.execute(qualify(statement, schema))
        if found < newest:
            conn.execute(
                qualify(
                    "INSERT INTO {s}.meta VALUES ('schema_version', %s)"
                    " ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                    schema,
                ),
                (str(newest),),
            )
    return found
