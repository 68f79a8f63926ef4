"""``sessionvisor doctor``: check a data directory without changing it.

Reads the databases through connections that cannot write them (``_reader``), so
it runs beside a serving host and repairs nothing: each problem is one line saying what to do.
A store's identity (empty, truncated, another program's, too new) is judged by
the store's own rule (``supervisor._sqlite_schema``), so ``doctor`` says what
opening the store would say.

Beyond SQLite's pages, every checkpoint is loaded (``checkpoints``): one whose row
fails its checksum, or whose message log or state part fails its digest, is a
problem naming it, as ``sessions show`` would find it damaged. The bodies of an
encrypted store can be checked only with its keys (``SESSIONVISOR_KEYS``): without
them, or with keys that cannot read it, they are not verified, and a warning says
so; that is no problem of the store, so it alone does not fail ``doctor``. A plaintext
store needs no keys: a malformed ``SESSIONVISOR_KEYS`` is ignored for it, with a warning.

A data directory without ``checkpoints.db`` but with the files a host or the gateway keeps
beside it (``keys create`` makes the key database and its secret before any host ran; a
``serve --postgres`` node keeps only ``gateway.secret`` there) is checked for what is
there; the missing store is a warning, not a problem: nothing there is wrong, no session
was saved yet. One holding none of them is an error, as for the other commands: most
likely the wrong ``--data-dir``.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from actors import SnapshotDecodeError
from cli import main
from cli._common import (
    DB_NAME,
    data_dir_errors,
    data_dir_option,
    emit,
    ignored_keys,
    json_option,
    keys_or_error,
    read_only,
    render,
    render_fields,
    require_data_dir,
    require_store,
)
from cli._doctor_files import check_files, side_files
from supervisor import (
    CheckpointNotFound,
    EncryptionKeyError,
    EncryptionKeys,
    EncryptionUnavailable,
    SQLiteCheckpointStore,
    StoreEncrypted,
    SupervisorError,
)

__all__ = ["check", "doctor"]

KEYS_DB = "gateway.sqlite3"
"""The gateway's key store (``gateway.keys.DB_FILE``), checked for damage when present."""

_ORPHANS = {
    "message chunks of no current log and no checkpoint": (
        "SELECT COUNT(*) FROM message_chunks c WHERE NOT EXISTS"
        " (SELECT 1 FROM message_logs l WHERE l.session_id = c.session_id AND l.gen = c.gen)"
        " AND NOT EXISTS (SELECT 1 FROM checkpoints k"
        " WHERE k.session_id = c.session_id AND k.log_gen = c.gen)"
    ),
    "message logs of sessions without checkpoints": (
        "SELECT COUNT(*) FROM message_logs l WHERE NOT EXISTS"
        " (SELECT 1 FROM checkpoints k WHERE k.session_id = l.session_id)"
    ),
    "state parts of sessions without checkpoints": (
        "SELECT COUNT(*) FROM state_parts p WHERE NOT EXISTS"
        " (SELECT 1 FROM checkpoints k WHERE k.session_id = p.session_id)"
    ),
}


def _reader(db: Path) -> sqlite3.Connection:
    """A connection to ``db`` that writes nothing there, and leaves no file behind.

    A read-only connection to a store in WAL mode makes the ``-wal`` and ``-shm``
    files when they are missing, and cannot remove them when it closes: ``doctor``
    would leave two files in a directory it only checks (and count them in the
    next report's ``bytes``). So when the ``-wal`` file is missing (no connection
    has the file open, nor left anything to recover) and no rollback journal is
    there either, the connection may write but refuses to (``query_only``): SQLite
    then removes the files on closing, if no other connection opened the file
    meanwhile. Otherwise it is read only, as before: the files are there already.
    """
    idle = not any(db.with_name(db.name + end).exists() for end in ("-wal", "-journal"))
    if not idle:
        return read_only(db)
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True)  # never creates
    try:
        conn.execute("PRAGMA query_only=ON")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _integrity(conn: sqlite3.Connection, db: Path, problems: list[str]) -> list[str]:
    """``PRAGMA integrity_check``'s lines; a problem unless it says ``ok``."""
    result = [r for (r,) in conn.execute("PRAGMA integrity_check").fetchall()]
    if result != ["ok"]:
        problems.append(
            f"{db} fails PRAGMA integrity_check ({'; '.join(result[:3])}): "
            "stop the host and restore the file from a backup"
        )
    return result


def _keys_db(data_dir: Path, problems: list[str]) -> None:
    """The gateway's key store, if there is one, for damage only (something else than a
    file under its name too: the keys commands and serve cannot open it)."""
    db = data_dir / KEYS_DB
    if not db.exists():
        return
    if not db.is_file():
        problems.append(f"{db} is not a file: restore the key store from a backup")
        return
    try:
        with closing(_reader(db)) as conn:
            _integrity(conn, db, problems)
    except sqlite3.Error as exc:
        problems.append(f"{db} is not a readable database ({exc}): restore it from a backup")


def check(data_dir: Path) -> dict[str, object]:
    """Every finding about ``data_dir``: ``problems`` (empty when healthy) and facts.

    Raises:
        OSError: the directory cannot be listed.
    """
    problems: list[str] = []
    check_files(data_dir, problems)
    _keys_db(data_dir, problems)
    db = data_dir / DB_NAME
    size = sum(p.stat().st_size for p in data_dir.glob(DB_NAME + "*") if p.is_file())
    warnings: list[str] = []
    report: dict[str, object] = {
        "data_dir": str(data_dir),
        "bytes": size,
        "problems": problems,
        "warnings": warnings,
    }
    lost = SQLiteCheckpointStore.lost_store(db)
    if lost is not None:  # what a host opening it says; read_only would say "cannot open"
        problems.append(str(lost))
        return report
    if not os.path.lexists(db):  # keys made, no session saved yet (see the module docstring)
        warnings.append(
            f"{db} does not exist: no host has saved a session here yet (or its sessions are "
            "in PostgreSQL: serve --postgres), so there are no checkpoints to check; if one "
            "did, restore the store and its marker file from a backup"
        )
        return report
    if not db.is_file():  # SQLite would say "disk I/O error" (or wait on a named pipe)
        problems.append(f"{db} is not a file: restore the store's file there from a backup")
        return report
    try:
        conn = _reader(db)
    except sqlite3.Error as exc:
        problems.append(f"{db} cannot be opened ({exc}): check its owner and permissions")
        return report
    verify = False
    try:
        try:
            version = SQLiteCheckpointStore.stored_schema(conn, str(db))
            if version is None:
                problems.append(f"{db} holds no store yet: no host has written there")
                return report
            result = _integrity(conn, db, problems)
        except SupervisorError as exc:  # the store's own verdict: truncated, foreign, newer
            problems.append(str(exc))
            return report
        except sqlite3.DatabaseError as exc:
            problems.append(f"{db} is not a readable database ({exc}): restore it from a backup")
            return report
        report.update(integrity=result, schema_version=version)
        writes = SQLiteCheckpointStore.SCHEMA_VERSION
        if version != writes:
            problems.append(
                f"{db} has schema version {version}, this sessionvisor writes "
                f"{writes}: start a host of the matching version on it to migrate"
            )
            return report
        report["sessions"] = conn.execute(
            "SELECT COUNT(DISTINCT session_id) FROM checkpoints"
        ).fetchone()[0]
        report["checkpoints"] = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
        orphans = {name: conn.execute(sql).fetchone()[0] for name, sql in _ORPHANS.items()}
        report["orphans"] = orphans
        problems.extend(
            f"{count} orphaned {name}: run 'sessionvisor checkpoints prune --keep N' "
            "(a save or prune of the session removes them)"
            for name, count in orphans.items()
            if count
        )
        verify = True
    finally:
        conn.close()
    if verify:  # through the store, once this connection no longer holds the file
        report.update(_checkpoints(db, problems, warnings))
    return report


def _checkpoints(db: Path, problems: list[str], warnings: list[str]) -> dict[str, object]:
    """Load every checkpoint of the store ``db`` (see the module docstring), one at a time
    through the store opened ``read_only=True``; the facts for the report:
    ``checkpoints_verified`` and ``damaged_checkpoints`` (session, checkpoint, reason).

    A problem per damaged checkpoint, or if the store fails on the way; a warning
    if the bodies could not be verified for want of keys. A checkpoint the host
    prunes meanwhile is skipped.
    """
    damaged: list[dict[str, str]] = []
    unverified = {"checkpoints_verified": False, "damaged_checkpoints": damaged}
    keys, malformed = keys_or_error()
    try:
        with closing(
            SQLiteCheckpointStore(db, keep_last=None, encryption=keys, read_only=True)
        ) as store:
            if malformed is not None:  # opened without keys: a plaintext store
                warnings.append(ignored_keys(db, malformed))
            for sid in store.sessions():
                for info in store.list(sid):
                    try:
                        store.load(sid, info.checkpoint_id)
                    except CheckpointNotFound:
                        continue
                    except SnapshotDecodeError as exc:
                        damaged.append(_damaged(sid, info.checkpoint_id, exc))
    except StoreEncrypted:
        warnings.append(
            f"the checkpoints in {db} were not verified: the store is encrypted; set "
            f"{EncryptionKeys.VARIABLE} as the host has it to verify them"
            if malformed is None
            else f"the checkpoints in {db} were not verified: the store is encrypted, and "
            f"{EncryptionKeys.VARIABLE} cannot give its keys: {malformed}"
        )
        return unverified
    except (EncryptionKeyError, EncryptionUnavailable) as exc:
        warnings.append(f"the checkpoints in {db} were not verified: {exc}")
        return unverified
    except SupervisorError as exc:  # damage SQLite found on the way (reported above too)
        problems.append(f"the checkpoints in {db} could not all be read: {exc}")
        return {**unverified, "damaged_checkpoints": damaged}
    problems.extend(
        f"checkpoint {d['checkpoint_id']!r} of session {d['session_id']!r} cannot be read "
        f"({d['reason']}): a host resumes the session from its newest checkpoint that "
        "loads; restore the store from a backup to get this one back"
        for d in damaged
    )
    return {"checkpoints_verified": True, "damaged_checkpoints": damaged}


def _damaged(sid: str, cid: str, exc: SnapshotDecodeError) -> dict[str, str]:
    """The report entry of checkpoint ``cid`` of ``sid``, which failed to load with ``exc``:
    its reason on one line, without the ids the store puts in front."""
    reason = exc.reason.removeprefix(f"checkpoint {cid!r} of session {sid!r}: ")
    return {"session_id": sid, "checkpoint_id": cid, "reason": " ".join(reason.splitlines())}


def _text(report: dict[str, object]) -> str:
    """The report for people: facts as ``name: value`` lines, then each problem."""
    facts = {k: v for k, v in report.items() if k not in ("problems", "warnings")}
    orphans = facts.get("orphans")
    if isinstance(orphans, dict):
        facts["orphans"] = render([f"{n} {name}" for name, n in orphans.items() if n])
    damaged = facts.get("damaged_checkpoints")
    if isinstance(damaged, list):  # each is a problem line below
        facts["damaged_checkpoints"] = len(damaged)
    problems, warnings = report["problems"], report["warnings"]
    assert isinstance(problems, list)
    assert isinstance(warnings, list)
    found = [f"PROBLEM: {p}" for p in problems] or ["no problems found"]
    return "\n".join([render_fields(facts), *(f"WARNING: {w}" for w in warnings), *found])


def _anything_to_check(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a store to check (or a lost one: a finding), or, without
    one, the files a host or the gateway keeps beside it. A link to nothing in the store's
    place is none: ``require_store`` says so, as the other commands do."""
    db = data_dir / DB_NAME
    if db.exists() or SQLiteCheckpointStore.lost_store(db) is not None:
        return True
    return not db.is_symlink() and bool(side_files(data_dir))


@main.command()
@data_dir_option
@json_option
def doctor(data_dir: Path, as_json: bool) -> None:
    """Check permissions, secrets, integrity, schema version, orphaned rows and size."""
    require_data_dir(data_dir)
    if not _anything_to_check(data_dir):
        require_store(data_dir)
    with data_dir_errors(data_dir):
        report = check(data_dir)
    emit(as_json, report, lambda: _text(report))
    if report["problems"]:
        raise SystemExit(1)
