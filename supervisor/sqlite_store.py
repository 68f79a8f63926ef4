"""``SQLiteCheckpointStore``: the embedded, durable default checkpoint store.

The store's parts: ``_sqlite_opening`` (its options, its one connection),
``_sqlite_writes`` (a save's rows on the full path; ``_saves_together`` writes the
usual saves of a batch together), ``_log_cache`` (the message logs an
instance remembers), ``_sqlite_reads`` (a checkpoint read back and decoded),
``_sqlite_cleanup`` (deleting, pruning, and what only the removed rows used),
``_sqlite_encryption`` (encrypting a file in place, key rotation), over
``_sqlite_schema`` (opening, tables), ``_message_log``, ``_log_chunks``,
``_state_parts`` and ``_row_codec``.
"""

from __future__ import annotations

import builtins
import functools
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import ClassVar

from actors import MigrationRegistry, Snapshot
from supervisor._encryption_keys import EncryptionKeys
from supervisor._group_commit import GroupCommit
from supervisor._log_cache import LogCache
from supervisor._message_log import split
from supervisor._row_codec import RowCodec
from supervisor._saved_at import from_micros
from supervisor._saves_together import QueuedSave, write_together
from supervisor._sqlite_cleanup import delete_rows, prune_rows
from supervisor._sqlite_encryption import encrypt_file, rotate
from supervisor._sqlite_opening import check_options, open_connection
from supervisor._sqlite_read_only import refuse
from supervisor._sqlite_reads import checkpoint_rows, decode, read, session_ids
from supervisor._sqlite_schema import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    is_damage,
    lost_store,
    reporting_store_errors,
    store_error,
    stored_schema,
)
from supervisor._sqlite_writes import cleaning, remember, write
from supervisor._state_parts import part_refs
from supervisor.checkpoint_store import (
    DEFAULT_KEEP_LAST,
    CheckpointInfo,
    ClosingContext,
    SaveDone,
    check_keep_last,
    check_max_snapshot_bytes,
    encodable,
)
from supervisor.errors import CheckpointNotFound, SnapshotTooLarge

__all__ = ["SQLiteCheckpointStore"]

# Total bytes of message logs a store instance keeps in memory to speed up saves (see LogCache).
_LOG_CACHE_BYTES = 64 * 1024 * 1024
_SQLITE_INT_MAX = 2**63 - 1
"""SQLite's largest integer: a larger Python int cannot be bound to a statement."""


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
        check_options(path, synchronous, busy_timeout, encryption)
        self.path = os.fspath(path)
        self.max_snapshot_bytes = max_snapshot_bytes
        self._migrations = migrations
        keep = check_keep_last(keep_last, allow_none=True)
        # no session holds more checkpoints than SQLite's largest integer, and SQLite binds
        # no larger int: a larger keep_last (keep them all) is that one
        self.keep_last = None if keep is None else min(keep, _SQLITE_INT_MAX)
        self.synchronous = synchronous.upper()
        self._lock = threading.Lock()
        self._logs = LogCache(_LOG_CACHE_BYTES)
        # Where this instance's saves met damage in the file (see _sqlite_writes); used
        # and changed by a batch's leader, with _lock held.
        self._damaged_logs: set[tuple[str, int]] = set()
        self._uncleanable: set[str] = set()
        self._read_only = bool(read_only)
        self._conn: sqlite3.Connection | None
        self._rows: RowCodec
        self._conn, self._rows = open_connection(
            path,
            read_only=self._read_only,
            synchronous=self.synchronous,
            busy_timeout=busy_timeout,
            encryption=encryption,
        )
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
        queued, info = self._prepared(snapshot, "save()")
        try:
            with reporting_store_errors(self.path):
                self._commits.run(queued)
        except BaseException:
            self._logs.drop(info.session_id)
            raise
        return info

    def save_later(self, snapshot: Snapshot, on_done: SaveDone) -> None:
        """``save`` without waiting for the commit: ``on_done(info, None)`` once
        ``snapshot`` is durable, or ``on_done(None, error)`` with the error ``save`` would
        raise, once, on the thread that committed it (this one if no batch was under
        way; see ``GroupCommit.submit``). ``on_done`` must be quick and must not block.

        For a caller that need not wait on its thread (a session whose answer is handed
        over by ``on_done``): a thread that waits for its batch and is woken costs a
        hand-over of the interpreter lock.

        Raises:
            What ``save`` raises before it writes (a read-only store, a snapshot that is
            not one, too large, or one a checkpoint cannot hold); ``on_done`` is then not
            called.
        """
        queued, info = self._prepared(snapshot, "save_later()")

        def done(_: object, error: BaseException | None) -> None:
            if error is None:
                on_done(info, None)
                return
            self._logs.drop(info.session_id)
            reported = store_error(self.path, error)
            if reported is not error:
                reported.__cause__ = error
            on_done(None, reported)

        self._commits.submit(queued, done)

    def _prepared(self, snapshot: Snapshot, call: str) -> tuple[QueuedSave, CheckpointInfo]:
        """The write of ``snapshot`` for a batch, and what the store says once it is saved.

        Raises:
            StoreReadOnly, TypeError, SnapshotTooLarge, SnapshotEncodeError: see ``save``.
        """
        if self.read_only:
            raise refuse(self.path, call)
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"{call[:-2]}() needs a Snapshot, got {type(snapshot).__name__}")
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
        info = CheckpointInfo(sid, snapshot.checkpoint_id, saved_at, snapshot.label, cut.size)
        return QueuedSave(self, snapshot, cut, cached, refs), info

    # The full path of one save and what ``_saves_together`` calls back, as methods.
    _write = write
    _cleaning = cleaning
    _remember = remember
    _prune = staticmethod(prune_rows)

    def _before_writes(self, db: sqlite3.Connection) -> None:
        """Once per batch of saves, first in its transaction: may this store still write?"""
        self._rows.before_write(db)

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
            found = read(db, self._rows, self.path, session_id, checkpoint_id)
        return decode(self._rows, session_id, found, self._migrations)

    def list(self, session_id: str) -> builtins.list[CheckpointInfo]:
        """The session's checkpoints, newest first (see ``CheckpointStore.list``)."""
        if self._unfindable(session_id):
            return []
        with self._transaction("DEFERRED") as db:
            rows = checkpoint_rows(db, session_id)
        return [
            CheckpointInfo(session_id, cid, from_micros(us), label, size)
            for cid, us, label, size in rows
        ]

    def sessions(self) -> builtins.list[str]:
        """Sessions with at least one checkpoint, sorted."""
        with self._transaction("DEFERRED") as db:
            return session_ids(db)

    # --- delete ---------------------------------------------------------------------------

    def delete(self, session_id: str, checkpoint_id: str | None = None) -> int:
        """Remove one or all of the session's checkpoints; returns how many."""
        if self.read_only:
            raise refuse(self.path, "delete()")
        if self._unfindable(session_id, checkpoint_id):
            return 0
        with self._transaction("IMMEDIATE") as db:
            removed = delete_rows(db, session_id, checkpoint_id)
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
        return encrypt_file(path, keys, busy_timeout)

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
        return rotate(self)

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
