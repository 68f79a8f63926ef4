"""``SQLiteCheckpointStore``: the embedded, durable default checkpoint store."""

from __future__ import annotations

import builtins
import functools
import hashlib
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from typing import Any, ClassVar

from actors import MigrationRegistry, Snapshot, SnapshotDecodeError
from supervisor._encryption_keys import EncryptionKeys
from supervisor._envelopes import Envelopes
from supervisor._group_commit import GroupCommit
from supervisor._log_chunks import LogUnreadable, log_rows, value_limit, write_log
from supervisor._message_log import (
    KnownLog,
    SplitSnapshot,
    assemble,
    check_identity,
    in_checkpoint,
    join,
    split,
)
from supervisor._row_codec import RowCodec, SealedRows
from supervisor._saved_at import from_micros
from supervisor._saves_together import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_UPSERT,
    QueuedSave,
    checkpoint_row,
    write_together,
)
from supervisor._sqlite_read_only import open_read_only, refuse
from supervisor._sqlite_schema import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    damaged,
    is_damage,
    is_too_big,
    lost_store,
    open_database,
    reporting_store_errors,
    stored_schema,
    too_long,
)
from supervisor._state_parts import checked, part_refs, read_refs
from supervisor._store_encryption import encrypt_rows, open_rows, reencrypt_rows, scrub
from supervisor.checkpoint_store import (
    DEFAULT_KEEP_LAST,
    CheckpointInfo,
    ClosingContext,
    check_keep_last,
    check_max_snapshot_bytes,
    encodable,
)
from supervisor.errors import CheckpointNotFound, SnapshotTooLarge, SupervisorError

__all__ = ["SQLiteCheckpointStore"]

logger = logging.getLogger("supervisor.store")

# Total bytes of message logs a store instance keeps in memory to speed up saves (see _LogCache).
_LOG_CACHE_BYTES = 64 * 1024 * 1024
_LOG_CACHE_SESSIONS = 1024
_ROW = "checkpoint_id, body, log_gen, log_bytes, log_count, log_digest, body_check, parts"


@dataclass(frozen=True, slots=True)
class _CachedLog:
    """What this instance last wrote as a session's message log.

    Valid only while the database's ``message_logs`` row still says
    ``(gen, length, digest)`` (``digest`` as stored: an envelope when the
    store is encrypted, so a rewrite by anyone else changes it): then the log
    in the file is ``known.data``, and ``hasher`` holds the SHA-256 state
    after those bytes.
    """

    gen: int
    length: int
    digest: bytes
    known: KnownLog
    hasher: Any


_PRUNE = (
    "DELETE FROM checkpoints WHERE session_id = ?1 AND checkpoint_id IN"
    " (SELECT checkpoint_id FROM checkpoints WHERE session_id = ?1"
    " ORDER BY checkpoint_id DESC LIMIT -1 OFFSET ?2)"
)
_LOG_STATE_TEMPLATE = (
    "SELECT log.gen, log.length, log.digest, log.chunks,"
    " (SELECT COALESCE(MAX(gen), -1) + 1 FROM message_chunks WHERE session_id = ?1){}"
    " FROM (SELECT 1) LEFT JOIN message_logs AS log ON log.session_id = ?1"
)
_LOG_STATE = _LOG_STATE_TEMPLATE.format("")
"""A save's first read: the session's log row (NULLs when it has none) and its next free
log generation, in one statement."""
_LOG_STATE_COUNTED = _LOG_STATE_TEMPLATE.format(
    ", (SELECT count(*) FROM checkpoints WHERE session_id = ?1)"
)
"""``_LOG_STATE`` and the session's checkpoint count (a store with ``keep_last``)."""
_SQLITE_INT_MAX = 2**63 - 1
"""SQLite's largest integer: a larger Python int cannot be bound to a statement."""
_NOT_FILES = ("", ":memory:")
"""Paths SQLite opens as temporary, in-memory databases rather than files."""
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
"""Whether this SQLite has ``DELETE ... RETURNING`` (a prune then says what it removed)."""


class _LogCache:
    """Per-session ``_CachedLog`` entries, least recently used dropped beyond a byte
    budget or ``_LOG_CACHE_SESSIONS`` sessions (a host may hold 100,000 sessions
    of which only the busy ones gain from a cached log).

    An optimisation only: a missing or stale entry just means a full save
    (every entry is checked against the database row before use). Thread-safe.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._bytes = 0
        self._entries: OrderedDict[str, _CachedLog] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sid: str) -> _CachedLog | None:
        with self._lock:
            entry = self._entries.get(sid)
            if entry is not None:
                self._entries.move_to_end(sid)
            return entry

    def put(self, sid: str, entry: _CachedLog) -> None:
        with self._lock:
            self.drop(sid, locked=True)
            if entry.length > self._budget:
                return
            self._entries[sid] = entry
            self._bytes += entry.length
            while self._bytes > self._budget or len(self._entries) > _LOG_CACHE_SESSIONS:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.length

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def drop(self, sid: str, *, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                self.drop(sid, locked=True)
            return
        old = self._entries.pop(sid, None)
        if old is not None:
            self._bytes -= old.length


class SQLiteCheckpointStore(ClosingContext):
    """A ``CheckpointStore`` in one SQLite file: durable, shared by threads and processes.

    Durability: WAL journal with ``synchronous=FULL`` by default, which fsyncs
    the WAL on every commit, so a ``save`` that returned survives ``kill -9``
    of the process *and* an OS crash or power cut. ``synchronous="NORMAL"``
    skips that fsync: still safe against a killed process (the data is in the
    OS cache), but the last saves may be lost on power failure; choose it only
    when checkpoints can be redone.

    Concurrency: thread-safe. The store holds one connection guarded by a
    lock: SQLite admits one writer at a time anyway, and a single connection
    lets ``close`` release every file handle deterministically (per-thread
    connections would linger in threads that never call close). Encoding and
    decoding run outside the lock. Several processes (or store instances) may
    open the same file: writes use ``BEGIN IMMEDIATE`` and wait up to
    ``busy_timeout`` seconds for each other (then ``StoreBusy``, nothing written);
    readers never block writers.
    Do not share one instance across ``fork``; open a new one in the child.

    Group commit: saves that arrive together (many sessions finishing a turn
    at once) share one transaction and so one fsync; each ``save`` still
    returns only once its own rows are committed. A save whose own writes fail
    fails alone; a batch whose transaction fails (a full disk) fails every save
    in it, and nothing of it is stored. ``commits`` counts the transactions.

    Speed: an instance remembers, per session, the message log it last wrote
    (64 MiB in all, least recently used first out). A snapshot of a running
    session brings its messages encoded (each once, by the session): when they
    extend the remembered log (the same session's list of encodings, see
    ``actors._history``) only the new messages' bytes are joined, hashed and
    written. Any other snapshot's messages are encoded in full (equal bytes are
    what prove the old messages unchanged, even if edited in place), but only
    the new ones have their dict keys walked and are hashed. The remembered log
    is used only while the database row still shows it, so saves by other
    processes or instances, and failed saves, just take the full path.

    Storage grows linearly with a conversation. Messages are kept once per
    session, in an append-only log (one chunk per save; chunks merge as the digits of
    a base-8 counter carry, so a save rewrites no more than a few of them on
    average, see ``_log_chunks``);
    a checkpoint stores only its snapshot without the messages (model, usage,
    plugin states...) plus "the first N bytes of the log" and their SHA-256.
    A save whose messages do not extend the log (the history was edited, or
    the session resumed from an older checkpoint) starts a new log generation
    holding its full message list; generations no retained checkpoint uses
    are deleted. Each plugin's state and the provider state of 4 KiB or more
    is kept once per session and content (``state_parts``, by SHA-256), shared
    by every checkpoint with the same bytes, and deleted once no retained
    checkpoint uses it: one 100 MB value that does not change is stored once,
    not once per checkpoint. On top of that ``keep_last``
    (default 100) bounds the per-checkpoint part. A session of 1,000 turns
    checkpointed every turn thus takes about one final snapshot plus 100
    small bodies: 1.2x the final snapshot's size once closed, 1.9x while open
    (WAL included), measured by ``benchmarks/bench_snapshot_store.py``.
    ``load`` reassembles, verifies the digest, and returns a snapshot equal
    to the one saved. SQLite stores no value over its length limit
    (``SQLITE_LIMIT_LENGTH``, 10**9 bytes by default): log chunks stay under it
    (``_log_chunks``), so a log may grow past it; a body or a state part over it
    fails that save alone with ``SnapshotTooLarge``, nothing of it stored.

    Integrity: each checkpoint row carries a BLAKE2b-128 checksum of its body
    and its log reference, verified on every ``load``: a damaged or edited
    row makes only that checkpoint raise ``SnapshotDecodeError`` (naming
    session and checkpoint); the others load. Damage inside the shared
    message log is detected by its SHA-256 digest and affects the checkpoints
    whose prefix covers the damaged bytes; damage to a shared state part, by
    its SHA-256, affects the checkpoints that use it. Damage SQLite itself finds
    in the file (``database disk image is malformed``) makes a load of what lies
    in the damaged pages raise ``SnapshotDecodeError`` as well, naming the file,
    and any other call that meets it ``StoreCorrupted``; a session whose save
    meets it in its message log or its old rows fails that one save, and its
    later saves go on without them (a new log; no pruning). ``AgentHost`` then
    falls back to the newest checkpoint that loads (``Checkpoints.latest``).

    Encryption (``encryption=EncryptionKeys...``): checkpoint bodies (the
    whole session state but its messages), the message log and the log
    digests are stored in AES-256-GCM envelopes, each bound to its row, so
    a copied or moved value is refused like a damaged one (the GCM tag is
    the row's MAC). Session ids, checkpoint ids, labels, times, sizes and
    log offsets stay in clear, so ``list`` and ``sessions`` need no key.
    Fails closed: an encrypted store will not open without its keys
    (``StoreEncrypted``) or with the wrong bytes under a key id
    (``EncryptionKeyError``); a plaintext value in it is refused on ``load``
    (``SnapshotDecodeError``), and a plaintext store with rows is encrypted
    only by ``encrypt_existing``. ``rotate_keys`` re-encrypts every row under
    the current key.

    Identity: the file is marked as a sessionvisor store (``PRAGMA
    application_id``) and a marker file ``<path>.sessionvisor`` is written
    beside it. An empty or missing file where the marker says a store was,
    another program's database, or a file that is not a database raise
    ``StoreCorrupted`` instead of becoming a new, empty store; a file that
    cannot be opened or created there (a read-only directory) raises
    ``StoreUnavailable``. Both name the path.

    Read-only (``read_only=True``): for tools that read a store beside a host
    that may be serving it. Opening never creates the file nor writes to it:
    no marker file, no schema creation or migration (``StoreReadOnly`` for a
    file without a store or with an older schema), no key recorded (every key
    the store records must be in the ring, which may have another current
    key; keys given for a plaintext store are not used), and closing leaves a
    ``-wal`` file there as it was (see ``_sqlite_read_only``). ``save``,
    ``delete``, ``prune`` and ``rotate_keys`` raise ``StoreReadOnly`` and
    change nothing; reads work as usual, thread-safe as above, and see what
    others commit.
    (``encrypt_existing`` is a class method on a path, outside any instance.)

    Args:
        path: Database file; created with its schema (and the marker file
            beside it) on first use.
        max_snapshot_bytes: Refuse (``SnapshotTooLarge``, nothing stored)
            snapshots whose ``serialize()`` size is larger; ``None``: no limit.
        keep_last: After each save keep the session's newest ``keep_last``
            checkpoints; ``None`` keeps all.
        synchronous: ``"FULL"`` (default), ``"EXTRA"`` or ``"NORMAL"``, see above.
        busy_timeout: Seconds to wait for another writer before failing.
        migrations: Upgrades checkpoints of older schema versions on ``load``;
            defaults to the shared ``SNAPSHOT_MIGRATIONS``.
        encryption: Encrypt at rest with these keys (AES-256-GCM, needs the
            ``cryptography`` package); see "Encryption" above. ``None``: the
            store must not be encrypted.
        read_only: Open an existing store to read only; see "Read-only" above.

    Raises:
        StoreEncrypted: the store is encrypted and ``encryption`` is None.
        StoreNotEncrypted: ``encryption`` is given, the store holds plaintext
            checkpoints: run ``encrypt_existing`` first.
        EncryptionKeyError: a key the store records is missing from the ring,
            or has other bytes there.
        EncryptionUnavailable: ``encryption`` is given without ``cryptography``.
        StoreCorrupted, StoreUnavailable: see "Identity" above (read-only: also
            ``StoreUnavailable`` when there is no file, nor a marker file).
        StoreReadOnly: (read-only) the file holds no store yet, or one of an older schema.
        StoreBusy: another connection kept the file locked past ``busy_timeout`` (as any
            method does then).
        ValueError: an argument is out of range, or ``path`` names no file (``""`` or
            ``":memory:"``, which SQLite takes for a database that vanishes on close).
    """

    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION
    """The schema version (``PRAGMA user_version``) this code writes; a store of an older
    version is migrated when a store opens it, one of a newer version is refused."""

    stored_schema = staticmethod(stored_schema)
    """``stored_schema(conn, path)``: the schema version of the store in the database a
    (read-only) connection ``conn`` has open at ``path``, ``None`` if the file holds no
    store yet; raises what opening it would (``StoreCorrupted``, ``SupervisorError``).
    For tools that inspect a data directory without writing to it."""

    is_damage = staticmethod(is_damage)
    """``is_damage(exc)``: whether an ``sqlite3.Error`` says the file is damaged (malformed
    pages, not a database), not locked, full or read-only. For tools that read the file
    with SQLite themselves."""

    lost_store = staticmethod(lost_store)
    """``lost_store(path)``: the ``StoreCorrupted`` opening ``path`` raises because the store
    there was deleted (its marker file is left), else ``None``; reads nothing but whether
    the two files exist. For tools that tell a new data directory from one that lost its
    store."""

    APPLICATION_ID: ClassVar[int] = APPLICATION_ID
    """The ``PRAGMA application_id`` that marks a SQLite file as a sessionvisor store."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_snapshot_bytes: int | None = None,
        keep_last: int | None = DEFAULT_KEEP_LAST,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        migrations: MigrationRegistry | None = None,
        encryption: EncryptionKeys | None = None,
        read_only: bool = False,
    ) -> None:
        check_max_snapshot_bytes(max_snapshot_bytes)
        if os.fspath(path) in _NOT_FILES:
            raise ValueError(
                f"SQLiteCheckpointStore needs a file to be durable; {os.fspath(path)!r} would "
                "be a temporary database that is gone once closed. Give a file path, or use "
                "MemoryCheckpointStore for checkpoints kept in memory"
            )
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0, got {busy_timeout}")
        if encryption is not None and not isinstance(encryption, EncryptionKeys):
            raise TypeError(
                f"encryption must be an EncryptionKeys, got {type(encryption).__name__}"
            )
        self.path = os.fspath(path)
        self.max_snapshot_bytes = max_snapshot_bytes
        self._migrations = migrations
        keep = check_keep_last(keep_last, allow_none=True)
        # no session holds more checkpoints than SQLite's largest integer, and SQLite binds
        # no larger int: a larger keep_last (keep them all) is that one
        self.keep_last = None if keep is None else min(keep, _SQLITE_INT_MAX)
        self.synchronous = synchronous.upper()
        self._lock = threading.Lock()
        self._logs = _LogCache(_LOG_CACHE_BYTES)
        # Where this instance's saves met damage in the file (see _log_unreadable, _cleaning);
        # used and changed by a batch's leader, with _lock held.
        self._damaged_logs: set[tuple[str, int]] = set()
        self._uncleanable: set[str] = set()
        self._read_only = bool(read_only)
        self._conn: sqlite3.Connection | None
        self._rows: RowCodec
        if self._read_only:
            self._conn, self._rows = open_read_only(
                self.path, busy_timeout=busy_timeout, keys=encryption
            )
        else:
            self._conn = open_database(
                path, synchronous=self.synchronous, busy_timeout=busy_timeout
            )
            try:
                with reporting_store_errors(self.path):
                    self._rows = open_rows(self._conn, self.path, encryption)
            except BaseException:
                self._conn.close()
                raise
        self._commits = GroupCommit(
            self._lock,
            self._open_connection,
            begin=self._before_writes,
            together=functools.partial(write_together, self),
        )

    @property
    def read_only(self) -> bool:
        """Whether this instance was opened ``read_only=True``: it refuses every write."""
        return self._read_only

    @property
    def encrypted(self) -> bool:
        """Whether this store encrypts what it stores (it was opened with keys)."""
        return self._rows.encrypted

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStore({self.path!r})"

    @property
    def commits(self) -> int:
        """Transactions this instance's saves committed: one fsync each with ``FULL``, so
        saves divided by commits is the batching group commit achieved. Thread-safe."""
        return self._commits.commits

    def _unfindable(self, *ids: object) -> bool:
        """Whether one of ``ids`` is text SQLite cannot bind (a lone surrogate), so that no
        save stored it: a read finds nothing (once the store is checked to be open)."""
        if all(not isinstance(one, str) or encodable(one) for one in ids):
            return False
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        return True

    def _open_connection(self) -> sqlite3.Connection:
        """The connection, with ``_lock`` held; ``ValueError`` once the store is closed."""
        if self._conn is None:
            raise ValueError(f"{self!r} is closed")
        return self._conn

    @contextmanager
    def _transaction(self, mode: str) -> Iterator[sqlite3.Connection]:
        """A transaction on the connection, ``_lock`` held; damage SQLite finds in the
        file is raised as ``StoreCorrupted`` naming it (see ``_sqlite_schema.damaged``)."""
        with self._lock, reporting_store_errors(self.path):
            conn = self._open_connection()
            conn.execute(f"BEGIN {mode}")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back already
                    conn.execute("ROLLBACK")
                raise

    # --- save -----------------------------------------------------------------------------

    def save(self, snapshot: Snapshot) -> CheckpointInfo:
        """Store ``snapshot``; durable when it returns (see ``CheckpointStore.save``)."""
        if self.read_only:
            raise refuse(self.path, "save()")
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"save() needs a Snapshot, got {type(snapshot).__name__}")
        sid = snapshot.session_id
        cached = self._logs.get(sid)
        cut = split(
            snapshot, None if cached is None else cached.known, parts=not self._rows.encrypted
        )
        if self.max_snapshot_bytes is not None and cut.size > self.max_snapshot_bytes:
            raise SnapshotTooLarge(sid, cut.size, self.max_snapshot_bytes)
        # CheckpointInfo times are UTC; a moment UTC cannot hold raises here, storing nothing
        saved_at = snapshot.saved_at.astimezone(UTC)
        refs = part_refs(cut.parts)
        try:
            with reporting_store_errors(self.path):
                self._commits.run(QueuedSave(self, snapshot, cut, cached, refs))
        except BaseException:
            self._logs.drop(sid)
            raise
        return CheckpointInfo(sid, snapshot.checkpoint_id, saved_at, snapshot.label, cut.size)

    def _write(
        self,
        snapshot: Snapshot,
        cut: SplitSnapshot,
        cached: _CachedLog | None,
        refs: bytes | None,
        db: sqlite3.Connection,
    ) -> None:
        """The rows of one save, inside the transaction of its batch (see ``GroupCommit``).

        Raises:
            SnapshotTooLarge: a value of it is longer than SQLite stores (``too_long``).
        """
        sid = snapshot.session_id
        log: tuple[Any, ...] = (None, None, None, None)
        before: int | None = None  # the session's checkpoints before this one, if counted
        try:
            if cut.messages is not None:
                gen, length, log_digest, before = self._append(db, sid, cut, cached)
                log = (gen, length, cut.count, log_digest)
            self._put_parts(db, sid, snapshot.checkpoint_id, cut)
            db.execute(
                f"INSERT INTO checkpoints {CHECKPOINT_COLUMNS} VALUES"
                f" (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?){CHECKPOINT_UPSERT}",
                checkpoint_row(self._rows, snapshot, cut, log, refs),
            )
        except sqlite3.DataError as exc:
            if not is_too_big(exc):
                raise
            raise too_long(sid, cut.size, db.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)) from exc
        if self.keep_last is not None and (before is None or before >= self.keep_last):
            with self._cleaning(sid) as clean:
                if clean:
                    saved_gen = log[0] if cut.messages is not None else None
                    self._prune(db, sid, self.keep_last, saved_gen)

    def _before_writes(self, db: sqlite3.Connection) -> None:
        """Once per batch of saves, first in its transaction: may this store still write?"""
        self._rows.before_write(db)

    @staticmethod
    def _put_parts(db: sqlite3.Connection, sid: str, cid: str, cut: SplitSnapshot) -> None:
        """Store each state part of the checkpoint unless the session has its bytes already.

        A part's ``newest`` is the newest checkpoint id that uses it: once every
        retained checkpoint is newer, none uses it (``_collect_parts``).
        """
        for part in cut.parts:
            known = db.execute(
                "UPDATE state_parts SET newest = max(newest, ?3) WHERE session_id = ?1"
                " AND digest = ?2",
                (sid, part.digest, cid),
            ).rowcount
            if not known:
                db.execute(
                    "INSERT INTO state_parts VALUES (?, ?, ?, ?)",
                    (sid, part.digest, cid, part.data),
                )

    def _append(
        self, db: sqlite3.Connection, sid: str, cut: SplitSnapshot, cached: _CachedLog | None
    ) -> tuple[int, int, bytes, int | None]:
        """Put the snapshot's messages in the log; returns (generation, length, digest,
        how many checkpoints the session had before this save, if ``keep_last`` is set).

        ``cached`` is what this instance last wrote for the session; it spares
        hashing the log again when the database row shows the log is still that
        one and ``split`` found the messages extend it. Any other case (another
        process or instance wrote since, the history was edited) takes the full
        path, which reads the truth from the row. The new state of the log is
        remembered for the next save; ``save`` forgets it if the commit fails.
        One statement reads the log's row, the next free generation and the
        checkpoint count (so that a save need not prune below ``keep_last``).
        """
        messages = cut.messages
        assert messages is not None
        size = messages.length
        rows = self._rows
        counted = self.keep_last is not None
        gen, length, stored_digest, appends, next_gen, *count = db.execute(
            _LOG_STATE_COUNTED if counted else _LOG_STATE, (sid,)
        ).fetchone()
        before: int | None = count[0] if counted else None
        largest = value_limit(db)
        if gen is not None:
            hasher: Any = None
            if (
                cached is not None
                and cut.extends
                and (cached.gen, cached.length, cached.digest) == (gen, length, stored_digest)
            ):
                hasher = cached.hasher.copy()  # the log is known.data, a prefix of messages
            elif length <= size:
                hasher = hashlib.sha256(messages.whole()[:length])
                rows.trust_keys(db, (stored_digest,))
                if hasher.digest() != rows.open_log_digest(sid, gen, length, stored_digest):
                    hasher = None
            if hasher is not None and (sid, gen) in self._damaged_logs:
                hasher = None  # a save met damage in it: the messages go to a new log
            if hasher is not None:  # the log is a prefix: append the rest
                planned = log_rows(rows, sid, messages, gen, length, appends, hasher, largest)
                try:
                    write_log(db, rows, planned, largest)
                except LogUnreadable as exc:
                    self._log_unreadable(sid, gen, exc)  # raises SQLite's damage
                else:
                    self._remember(sid, cut, gen, planned.log[3], hasher)
                    return gen, size, planned.digest, before
        # no log yet, or the messages do not extend it (or it is damaged): a new generation
        planned = log_rows(rows, sid, messages, next_gen, 0, 0, hashlib.sha256(), largest)
        write_log(db, rows, planned, largest)
        if next_gen:  # an older generation exists: it may be unused now
            with self._cleaning(sid) as clean:
                if clean:
                    self._collect(db, sid)
        self._remember(sid, cut, next_gen, planned.log[3], planned.hasher)
        return next_gen, size, planned.digest, before

    def _log_unreadable(self, sid: str, gen: int, exc: LogUnreadable) -> None:
        """Go on with a save whose message log ``gen`` met damage (``exc``) in a new
        generation: at once if the chunks decoded wrong, else (SQLite found the pages
        malformed: it then refuses the transaction's writes) by failing this save with
        SQLite's error and starting the session's next save in a new generation.

        Raises:
            sqlite3.DatabaseError: SQLite's damage error.
        """
        logger.warning("%s: %s; the session's saves go on in a new message log", self.path, exc)
        if exc.damage is not None:
            self._damaged_logs.add((sid, gen))
            raise exc.damage

    @contextmanager
    def _cleaning(self, sid: str) -> Iterator[bool]:
        """Run a save's clean-up of the session's old rows (pruning, unused logs), unless
        one met damage before; yields whether to run it.

        Deleting rows in damaged pages fails (SQLite cannot free them) and SQLite then
        refuses the transaction's other writes, so that save fails; the session's
        later saves skip the clean-up and succeed, its old rows staying until the file
        is repaired (``doctor`` reports the damage).
        """
        if sid in self._uncleanable:
            yield False
            return
        try:
            yield True
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                logger.warning(
                    "%s: damage met deleting old rows of session %r; its saves keep them "
                    "from now on: %s",
                    self.path,
                    sid,
                    exc,
                )
                self._uncleanable.add(sid)
            raise

    def _remember(
        self, sid: str, cut: SplitSnapshot, gen: int, stored_digest: bytes, hasher: Any
    ) -> None:
        messages = cut.messages
        assert messages is not None
        known = messages.known()  # split's bytes (immutable, no copy) or their lineage
        self._logs.put(sid, _CachedLog(gen, messages.length, stored_digest, known, hasher))

    @staticmethod
    def _collect(db: sqlite3.Connection, sid: str) -> None:
        """Delete the log generations no checkpoint uses, except the current one."""
        db.execute(
            "DELETE FROM message_chunks WHERE session_id = ?1"
            " AND gen <> (SELECT gen FROM message_logs WHERE session_id = ?1)"
            " AND gen NOT IN (SELECT log_gen FROM checkpoints"
            " WHERE session_id = ?1 AND log_gen IS NOT NULL)",
            (sid,),
        )

    @classmethod
    def _collect_after_delete(cls, db: sqlite3.Connection, sid: str) -> None:
        """As ``_collect``, and drop the state parts no retained checkpoint uses; drop the
        whole log and every part once the session has no checkpoint left."""
        if db.execute("SELECT 1 FROM checkpoints WHERE session_id = ?", (sid,)).fetchone() is None:
            db.execute("DELETE FROM message_chunks WHERE session_id = ?", (sid,))
            db.execute("DELETE FROM message_logs WHERE session_id = ?", (sid,))
            db.execute("DELETE FROM state_parts WHERE session_id = ?", (sid,))
        else:
            cls._collect(db, sid)
            db.execute(
                "DELETE FROM state_parts WHERE session_id = ?1 AND newest <"
                " (SELECT MIN(checkpoint_id) FROM checkpoints WHERE session_id = ?1)",
                (sid,),
            )

    # --- read -----------------------------------------------------------------------------

    def load(self, session_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The checkpoint, or the session's newest (see ``CheckpointStore.load``).

        A checkpoint whose rows SQLite finds damaged in the file (``database disk
        image is malformed``) raises ``SnapshotDecodeError`` like a row that fails
        its checksum, naming the file: it exists but cannot be read, and a host
        falls back to an older checkpoint that can (``Checkpoints.latest``).
        """
        if self._unfindable(session_id, checkpoint_id):
            raise CheckpointNotFound(session_id, checkpoint_id)
        with self._transaction("DEFERRED") as db:
            try:
                cid, stored, chunks, found_parts = self._read(db, session_id, checkpoint_id)
            except sqlite3.DatabaseError as exc:
                if not is_damage(exc):
                    raise
                which = "newest" if checkpoint_id is None else repr(checkpoint_id)
                raise SnapshotDecodeError(
                    f"session {session_id!r}: its {which} checkpoint lies in damaged pages: "
                    f"{damaged(self.path, exc)}"
                ) from exc
        gen, length, refs = stored[1], stored[2], stored[6]
        try:
            body, expected, vouched = self._rows.open_checkpoint(session_id, cid, tuple(stored))
            messages = None
            if gen is not None:
                if not isinstance(length, int) or not isinstance(expected, bytes):
                    raise SnapshotDecodeError("message log reference is damaged")
                opened = [
                    (start, self._rows.open_chunk(session_id, gen, start, data))
                    for start, data in chunks
                ]
                messages = assemble(opened, length, expected)
            parts = [
                (kind, name, checked(kind, name, digest, found_parts.get(digest)))
                for kind, name, digest in read_refs(refs)
            ]
            snapshot = join(body, messages, stored[3], self._migrations, parts, checked=vouched)
            check_identity(snapshot, session_id, cid)
        except SnapshotDecodeError as exc:
            raise in_checkpoint(exc, session_id, cid) from None
        return snapshot

    def _read(
        self, db: sqlite3.Connection, sid: str, checkpoint_id: str | None
    ) -> tuple[str, list[Any], list[Any], dict[bytes, object]]:
        """What ``load`` decodes, read in its transaction: the checkpoint's id, its stored
        columns, the message-log chunks its prefix covers and its state parts by digest.

        Raises:
            CheckpointNotFound: the session has no such checkpoint.
        """
        if checkpoint_id is None:
            row = db.execute(
                f"SELECT {_ROW} FROM checkpoints WHERE session_id = ?"
                " ORDER BY checkpoint_id DESC LIMIT 1",
                (sid,),
            ).fetchone()
        else:
            row = db.execute(
                f"SELECT {_ROW} FROM checkpoints WHERE session_id = ? AND checkpoint_id = ?",
                (sid, checkpoint_id),
            ).fetchone()
        if row is None:
            raise CheckpointNotFound(sid, checkpoint_id)
        cid, *stored = row
        gen, length, refs = stored[1], stored[2], stored[6]
        chunks = []
        if gen is not None:
            chunks = db.execute(
                "SELECT start, data FROM message_chunks"
                " WHERE session_id = ? AND gen = ? AND start < ? ORDER BY start",
                (sid, gen, length),
            ).fetchall()
        self._rows.trust_keys(db, (stored[0], *(data for _, data in chunks)))
        return cid, stored, chunks, self._read_parts(db, sid, refs)

    @staticmethod
    def _read_parts(db: sqlite3.Connection, sid: str, refs: object) -> dict[bytes, object]:
        """The stored state parts a checkpoint's ``refs`` name, by digest (checked later)."""
        try:
            wanted = [digest for _, _, digest in read_refs(refs)]
        except SnapshotDecodeError:
            return {}  # load reports it, after the seal check
        found: dict[bytes, object] = {}
        for digest in wanted:
            row = db.execute(
                "SELECT data FROM state_parts WHERE session_id = ? AND digest = ?", (sid, digest)
            ).fetchone()
            if row is not None:
                found[digest] = row[0]
        return found

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first (see ``CheckpointStore.list``)."""
        if self._unfindable(session_id):
            return []
        with self._transaction("DEFERRED") as db:
            rows = db.execute(
                "SELECT checkpoint_id, saved_at_us, label, size FROM checkpoints"
                " WHERE session_id = ? ORDER BY checkpoint_id DESC",
                (session_id,),
            ).fetchall()
        return [
            CheckpointInfo(session_id, cid, from_micros(us), label, size)
            for cid, us, label, size in rows
        ]

    def sessions(self) -> builtins.list[str]:
        """Sessions with at least one checkpoint, sorted."""
        with self._transaction("DEFERRED") as db:
            rows = db.execute(
                "SELECT DISTINCT session_id FROM checkpoints ORDER BY session_id"
            ).fetchall()
        return [sid for (sid,) in rows]

    # --- delete ---------------------------------------------------------------------------

    def delete(self, session_id: str, checkpoint_id: str | None = None) -> int:
        """Remove one or all of the session's checkpoints; returns how many."""
        if self.read_only:
            raise refuse(self.path, "delete()")
        if self._unfindable(session_id, checkpoint_id):
            return 0
        with self._transaction("IMMEDIATE") as db:
            if checkpoint_id is None:
                removed = db.execute(
                    "DELETE FROM checkpoints WHERE session_id = ?", (session_id,)
                ).rowcount
            else:
                removed = db.execute(
                    "DELETE FROM checkpoints WHERE session_id = ? AND checkpoint_id = ?",
                    (session_id, checkpoint_id),
                ).rowcount
            self._collect_after_delete(db, session_id)
        if checkpoint_id is None:
            self._logs.drop(session_id)  # memory only: a stale entry would not be used
        return removed

    def prune(self, session_id: str, keep_last: int) -> int:
        """Keep the ``keep_last`` newest checkpoints of the session; returns how many went."""
        if self.read_only:
            raise refuse(self.path, "prune()")
        keep = check_keep_last(keep_last, allow_none=False)
        assert keep is not None
        keep = min(keep, _SQLITE_INT_MAX)  # no session holds more; SQLite takes no larger
        if self._unfindable(session_id):
            return 0
        with self._transaction("IMMEDIATE") as db:
            return self._prune(db, session_id, keep)

    def _prune(
        self, db: sqlite3.Connection, sid: str, keep_last: int, saved_gen: int | None = None
    ) -> int:
        """Delete all but the session's ``keep_last`` newest checkpoints, then what only they
        used. ``saved_gen``: the log generation of the checkpoint just saved in this
        transaction (so the session has one, and that is its current log), if it has one.

        After a save, only what the removed rows name can have become unused: an older
        log generation, or state parts (a part's ``newest`` checkpoint uses it). So the
        usual prune of a save (one checkpoint of the current log, without parts) is one
        statement, not four.
        """
        if not _RETURNING:  # SQLite before 3.35: count, then collect in full
            count: int = db.execute(_PRUNE, (sid, keep_last)).rowcount
            if count:
                self._collect_after_delete(db, sid)
            return count
        removed = db.execute(f"{_PRUNE} RETURNING log_gen, parts", (sid, keep_last)).fetchall()
        if not removed:
            return 0
        if saved_gen is None:
            self._collect_after_delete(db, sid)
            return len(removed)
        if any(gen is not None and gen != saved_gen for gen, _ in removed):
            self._collect(db, sid)
        if any(parts is not None for _, parts in removed):
            db.execute(
                "DELETE FROM state_parts WHERE session_id = ?1 AND newest <"
                " (SELECT MIN(checkpoint_id) FROM checkpoints WHERE session_id = ?1)",
                (sid,),
            )
        return len(removed)

    # --- encryption -----------------------------------------------------------------------

    @classmethod
    def encrypt_existing(
        cls,
        path: str | os.PathLike[str],
        keys: EncryptionKeys,
        *,
        busy_timeout: float = 30.0,
    ) -> int:
        """Encrypt a plaintext store in place (the one-time migration); returns how many
        checkpoints it encrypted.

        Marks the store encrypted, encrypts every plaintext checkpoint, log chunk
        and log digest under ``keys.current_id`` in one transaction, then
        rewrites the file (``VACUUM``) and empties the WAL so that no old page
        keeps the plaintext. Idempotent: on an encrypted store it encrypts only
        plaintext rows (written by a process without keys), after checking the
        keys as opening does. A plaintext checkpoint whose checksum fails is
        encrypted as found but marked damaged (and logged): it stays unreadable,
        as it was, and is counted. Run it while no host or other process uses
        the store; afterwards open the store with ``encryption=keys``.

        Raises:
            FileNotFoundError: there is no store at ``path`` (none is created).
            EncryptionKeyError: the store is encrypted and ``keys`` lack one of its keys.
            EncryptionUnavailable: ``cryptography`` is not installed.
            StoreCorrupted, StoreUnavailable: as when opening; ``StoreCorrupted`` also when
                SQLite finds a damaged page on the way (nothing was encrypted).
        """
        name = os.fspath(path)
        if not os.path.exists(name):
            raise FileNotFoundError(
                f"no checkpoint store at {name!r} to encrypt; check the path (a new store is "
                "encrypted by opening it with encryption=keys)"
            )
        conn = open_database(name, synchronous="FULL", busy_timeout=busy_timeout)
        try:
            with reporting_store_errors(name):
                envelopes = Envelopes(keys, name)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    count = encrypt_rows(conn, name, envelopes)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                scrub(conn, name)
        finally:
            conn.close()
        return count

    def rotate_keys(self) -> int:
        """Re-encrypt everything under the ring's current key; returns how many checkpoints
        were re-encrypted.

        Afterwards the store records only the current key, so the ring may drop
        the others. Then the file is rewritten (``VACUUM``) and the WAL emptied,
        so that no old page keeps values under a retired key. Saves and loads
        of other threads wait meanwhile; run it while no other process writes
        the store (one still writing under a retired key records it again).

        Raises:
            SupervisorError: the store is not encrypted.
            StoreReadOnly: it was opened ``read_only=True``.
        """
        if self.read_only:
            raise refuse(self.path, "rotate_keys()")
        rows = self._rows
        if not isinstance(rows, SealedRows):
            raise SupervisorError(
                f"{self!r} is not encrypted, so it has no keys to rotate; encrypt it with "
                "SQLiteCheckpointStore.encrypt_existing(path, keys)"
            )
        with self._transaction("IMMEDIATE") as db:
            count = reencrypt_rows(db, rows)
        with self._lock, reporting_store_errors(self.path):
            scrub(self._open_connection(), self.path)
        self._logs.clear()
        return count

    def close(self) -> None:
        """Close the connection (checkpointing the WAL into the file, unless read-only).
        Idempotent."""
        with self._lock:
            conn, self._conn = self._conn, None
        self._logs.clear()
        if conn is not None:
            conn.close()


for _cls in (SQLiteCheckpointStore,):
    _cls.__module__ = "supervisor"
