"""What every data-directory command shares: options, opening the store, output, errors.

Commands open the store beside a host that may be serving it: they never take
``host.lock``, never create a missing store (a typo in ``--data-dir`` is an
error, not a new empty directory), and never change a store's schema: before
the store is opened, a read-only connection checks that the file holds a store
of the schema this sessionvisor writes (opening one of an older schema would
migrate it under the host serving it). SQLite lets several processes use one
file; readers do not block the host's writes. Not thread-safe: one command per
process.

Every failure a user can cause or meet (a wrong path, a damaged file, a locked
directory) ends in one ``error: ...`` line on stderr and exit status 1, never a
traceback: ``data_dir_errors`` turns the library's, the OS's and SQLite's
exceptions into that line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from datetime import date
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from actors import SnapshotDecodeError
from supervisor import EncryptionKeys, SQLiteCheckpointStore, SupervisorError
from supervisor.errors import StoreEncrypted
from supervisor.host import DEFAULT_DATA_DIR

__all__ = [
    "DB_NAME",
    "data_dir_errors",
    "data_dir_option",
    "emit",
    "fail",
    "json_option",
    "make_data_dir",
    "open_store",
    "read_only",
    "render",
    "render_fields",
    "require_data_dir",
    "require_store",
    "table",
]

DB_NAME = "checkpoints.db"
"""The store's file name inside a data directory (as ``AgentHost`` creates it)."""

F = TypeVar("F", bound=Callable[..., Any])


def data_dir_option(func: F) -> F:
    """``--data-dir`` (default the library's ``DEFAULT_DATA_DIR``)."""
    option = click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_DATA_DIR,
        show_default=True,
        help="The host's data directory.",
    )
    return option(func)


def json_option(func: F) -> F:
    """``--json``: print one JSON document instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")(func)


def fail(message: str) -> NoReturn:
    """Print ``message`` on stderr and exit with status 1."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(1)


def require_data_dir(data_dir: Path) -> None:
    """Exit 1 unless ``data_dir`` is a directory: a typo must not become a new, empty one."""
    if not data_dir.is_dir():
        fail(f"no data directory at {str(data_dir)!r}; give the right one with --data-dir")


def make_data_dir(data_dir: Path) -> None:
    """Create a missing ``data_dir``, but only inside a directory that exists.

    A fresh data directory is made by the first command that writes there
    (``keys create`` or ``serve``, in either order); a missing parent is far more
    likely a typo than a wish for a new tree of directories, so it is an error.
    """
    if data_dir.is_dir():
        return
    parent = data_dir.parent
    if not parent.is_dir():
        fail(
            f"no data directory at {str(data_dir)!r}, and no directory {str(parent)!r} to "
            "create it in; give the right one with --data-dir"
        )
    try:
        data_dir.mkdir(mode=0o700)  # private: conversations and secrets live in it
    except OSError as exc:
        fail(f"cannot create the data directory {str(data_dir)!r}: {exc.strerror}")


@contextmanager
def data_dir_errors(data_dir: Path, database: str = "a database") -> Iterator[None]:
    """Exit 1 with one line for what the library, the OS or SQLite raise on ``data_dir``.

    ``database`` names the file SQLite errors come from, for the message. A
    checkpoint that cannot be read (``SnapshotDecodeError``) is one line too;
    damage SQLite found in the file, whichever error the store raised for it,
    is the same line as SQLite's own error.
    Exceptions of other kinds (programming errors) pass unchanged.
    """
    try:
        yield
    except (SupervisorError, SnapshotDecodeError) as exc:  # before OSError: some are both
        cause = exc.__cause__
        if isinstance(cause, sqlite3.Error) and SQLiteCheckpointStore.is_damage(cause):
            _damaged(data_dir, database, cause)
        fail(str(exc))
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename is not None else ""
        fail(f"cannot use the data directory {str(data_dir)!r} ({where}{exc.strerror or exc})")
    except sqlite3.Error as exc:
        if not SQLiteCheckpointStore.is_damage(exc):
            fail(f"{database} in {str(data_dir)!r} cannot be used ({exc})")
        _damaged(data_dir, database, exc)


def _damaged(data_dir: Path, database: str, exc: sqlite3.Error) -> NoReturn:
    """Exit 1 saying that SQLite found ``database`` in ``data_dir`` damaged (``exc``)."""
    fail(
        f"{database} in {str(data_dir)!r} is damaged ({exc}): run 'sessionvisor doctor "
        f"--data-dir {data_dir}' to see what is wrong, then stop the host and restore the "
        "file (and its -wal file) from a backup"
    )


@contextmanager
def open_store(data_dir: Path) -> Iterator[SQLiteCheckpointStore]:
    """The data directory's store, opened beside any running host; closed on exit.

    Keys for an encrypted store come from ``SESSIONVISOR_KEYS`` (as
    ``EncryptionKeys.from_env`` reads them). Every failure exits 1 with a message.
    """
    require_data_dir(data_dir)
    path = data_dir / DB_NAME
    require_store(data_dir)
    with data_dir_errors(data_dir, f"the store {DB_NAME}"):
        _check_schema(data_dir, path)
        try:
            keys = EncryptionKeys.from_env() if os.environ.get(EncryptionKeys.VARIABLE) else None
            store = SQLiteCheckpointStore(path, keep_last=None, encryption=keys)
        except StoreEncrypted:
            fail(
                f"the store {str(path)!r} is encrypted, give keys: set {EncryptionKeys.VARIABLE} "
                "as the host has it (key_id:base64key,...)"
            )
        try:
            yield store
        finally:
            store.close()


def require_store(data_dir: Path) -> None:
    """Exit 1 unless ``data_dir`` holds a store file: saying it was lost when its marker
    file is left (as a host would refuse it), else that no host has written there yet."""
    path = data_dir / DB_NAME
    lost = SQLiteCheckpointStore.lost_store(path)
    if lost is not None:
        fail(str(lost))
    if not path.exists():
        fail(f"{str(data_dir)!r} holds no {DB_NAME}: no host has written there yet")


def read_only(db: Path) -> sqlite3.Connection:
    """A connection that cannot write ``db`` (nor create it)."""
    return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)


def _check_schema(data_dir: Path, path: Path) -> None:
    """Exit 1 unless ``path`` holds a store of the schema this code writes, read only.

    Raises what the store's own check raises (a foreign or truncated file, a newer
    schema) and SQLite's errors, for ``data_dir_errors``.
    """
    with closing(read_only(path)) as conn:
        version = SQLiteCheckpointStore.stored_schema(conn, str(path))
    if version is None:
        fail(f"{str(path)!r} holds no store yet: no host has written there")
    writes = SQLiteCheckpointStore.SCHEMA_VERSION
    if version != writes:
        fail(
            f"the store {str(path)!r} has schema version {version}, this sessionvisor "
            f"writes {writes}: start a host of this version on {str(data_dir)!r} to "
            "migrate it, or use the sessionvisor that wrote it"
        )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` as a left-aligned text table under ``headers``, aligned by the columns
    each cell takes on a terminal (a CJK character two, a combining accent none)."""
    cells = [[str(h) for h in headers], *[[render(c) for c in r] for r in rows]]
    widths = [max(_columns(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c + " " * (w - _columns(c)) for c, w in zip(row, widths, strict=True))
        for row in cells
    ]
    return "\n".join(line.rstrip() for line in lines)


def _columns(text: str) -> int:
    """The terminal columns ``text`` takes: two for a wide (East Asian) character, none for
    a combining mark or a format character, one for the others."""
    total = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char) in {"Mn", "Me", "Cf"}:
            continue
        total += 2 if unicodedata.east_asian_width(char) in {"W", "F"} else 1
    return total


_CONTROL = frozenset({"Cc", "Zl", "Zp"})
"""Unicode categories ``render`` writes as escapes: control characters, line and
paragraph separators."""


def _printable(text: str) -> str:
    """``text`` with each control character or line break written as its Python escape
    (``\\n``, ``\\t``, ``\\x1b``): a session id or a value holding one stays on its row,
    and the terminal is not sent escape sequences it would obey."""
    if text.isprintable():
        return text
    return "".join(
        ascii(char)[1:-1] if unicodedata.category(char) in _CONTROL else char for char in text
    )


def render(value: object) -> str:
    """``value`` as people read it, not as Python's repr: ``None`` is ``-``, a mapping
    ``key=value, ...`` (``none`` when empty), a list its items joined by ``, ``, a time
    in ISO 8601 (as ``--json`` prints it); control characters escaped (``_printable``)."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        pairs = (f"{_printable(str(k))}={render(v)}" for k, v in value.items())
        return ", ".join(pairs) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(render(v) for v in value) or "none"
    if isinstance(value, date):
        return value.isoformat()
    return _printable(str(value))


def render_fields(fields: Mapping[str, object]) -> str:
    """One ``name: value`` line per field, each value ``render``-ed."""
    return "\n".join(f"{name}: {render(value)}" for name, value in fields.items())


def emit(as_json: bool, document: object, text: Callable[[], str]) -> None:
    """Print ``document`` as JSON (indented, as every command prints it), or ``text()``."""
    if as_json:
        click.echo(json.dumps(document, indent=2, default=_json_value, ensure_ascii=False))
    else:
        click.echo(text())


def _json_value(value: object) -> str:
    """A value JSON has no type for, as text: a time in ISO 8601 (``2026-01-02T03:04:05+00:00``,
    as every command prints ``saved_at``), anything else as ``str`` gives it."""
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
