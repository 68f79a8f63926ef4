"""``sessionvisor doctor``: check a data directory without changing it.

Reads the database through a read-only SQLite connection, so it runs beside a
serving host and repairs nothing: each problem is one line saying what to do.
"""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from cli import main
from cli._common import DB_NAME, data_dir_option, emit, fail, json_option
from supervisor import SQLiteCheckpointStore

__all__ = ["check", "doctor"]

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


def _permissions(data_dir: Path, problems: list[str]) -> None:
    for path in (data_dir, *sorted(data_dir.iterdir())):
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o002:
            problems.append(
                f"{path} is writable by every user (mode {mode:o}): run chmod o-w {path}"
            )


def check(data_dir: Path) -> dict[str, object]:
    """Every finding about ``data_dir``: ``problems`` (empty when healthy) and facts."""
    problems: list[str] = []
    _permissions(data_dir, problems)
    db = data_dir / DB_NAME
    size = sum(p.stat().st_size for p in data_dir.glob(DB_NAME + "*") if p.is_file())
    report: dict[str, object] = {"data_dir": str(data_dir), "bytes": size, "problems": problems}
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        problems.append(f"{db} cannot be opened ({exc}): check its owner and permissions")
        return report
    try:
        try:
            result = [r for (r,) in conn.execute("PRAGMA integrity_check").fetchall()]
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            problems.append(f"{db} is not a readable database ({exc}): restore it from a backup")
            return report
        report.update(integrity=result, schema_version=version)
        if result != ["ok"]:
            problems.append(
                f"{db} fails PRAGMA integrity_check ({'; '.join(result[:3])}): "
                "stop the host and restore the file from a backup"
            )
        if app != SQLiteCheckpointStore.APPLICATION_ID:
            problems.append(f"{db} is not a sessionvisor store: point --data-dir elsewhere")
            return report
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
    finally:
        conn.close()
    return report


@main.command()
@data_dir_option
@json_option
def doctor(data_dir: Path, as_json: bool) -> None:
    """Check permissions, integrity, schema version, orphaned rows and size."""
    if not data_dir.is_dir():
        fail(f"no data directory at {str(data_dir)!r}; give the right one with --data-dir")
    if not (data_dir / DB_NAME).exists():
        fail(f"{str(data_dir)!r} holds no {DB_NAME}: no host has written there yet")
    report = check(data_dir)
    problems = report["problems"]
    assert isinstance(problems, list)

    def text() -> str:
        facts = [f"{k}: {v}" for k, v in report.items() if k != "problems"]
        found = [f"PROBLEM: {p}" for p in problems] or ["no problems found"]
        return "\n".join([*facts, *found])

    emit(as_json, report, text)
    if problems:
        raise SystemExit(1)
