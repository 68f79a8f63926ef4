"""What every data-directory command shares: options, opening the store, output, errors.

Commands open the store beside a host that may be serving it: they never take
``host.lock``, never create a missing store (a typo in ``--data-dir`` is an
error, not a new empty directory), and never change a store's schema. The
reading commands open it ``read_only=True``: the store itself then refuses
to create, migrate or mark anything, records no key, and leaves a ``-wal``
file as it finds it. The one writing command (``checkpoints prune``) first
checks through a read-only connection that the file holds a store of the
schema this sessionvisor writes (opening one of an older schema would migrate
it under the host serving it). SQLite lets several processes use one file;
readers do not block the host's writes. Not thread-safe: one command per
process.

Every failure a user can cause or meet (a wrong path, a damaged file, a locked
directory) ends in one ``error: ...`` line on stderr and exit status 1, never a
traceback: ``data_dir_errors`` turns the library's, the OS's and SQLite's
exceptions into that line.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from datetime import date
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from actors import Snapshot, SnapshotDecodeError
from supervisor import (
    CheckpointNotFound,
    EncryptionKeys,
    InvalidEncryptionKeys,
    SQLiteCheckpointStore,
    StoreEncrypted,
    StoreReadOnly,
    SupervisorError,
)
from supervisor.host import DEFAULT_DATA_DIR

__all__ = [
    "DB_NAME",
    "data_dir_errors",
    "data_dir_option",
    "emit",
    "fail",
    "ignored_keys",
    "json_option",
    "keys_or_error",
    "make_data_dir",
    "message_count",
    "newest_readable",
    "open_store",
    "read_only",
    "render",
    "render_fields",
    "require_data_dir",
    "require_store",
    "store_keys",
    "table",
]

DB_NAME = "checkpoints.db"
"""The store's file name inside a data directory (as ``AgentHost`` creates it)."""

F = TypeVar("F", bound=Callable[..., Any])


def data_dir_option(func: F) -> F:
    """``--data-dir`` (default the library's ``DEFAULT_DATA_DIR``). A file there is no
    usage error but "no data directory" (``require_data_dir``, ``make_data_dir``)."""
    option = click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        metavar="DIRECTORY",
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
        what = ", a file is there" if data_dir.exists() else ""
        fail(f"no data directory at {str(data_dir)!r}{what}; give the right one with --data-dir")


def make_data_dir(data_dir: Path) -> None:
    """Create a missing ``data_dir``, but only inside a directory that exists.

    A fresh data directory is made by the first command that writes there
    (``keys create`` or ``serve``, in either order); a missing parent is far more
    likely a typo than a wish for a new tree of directories, so it is an error.
    """
    if data_dir.is_dir():
        return
    if data_dir.exists():  # a file: no data directory, and none to create
        require_data_dir(data_dir)
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
def open_store(data_dir: Path, *, write: bool = False) -> Iterator[SQLiteCheckpointStore]:
    """The data directory's store, opened beside any running host; closed on exit.

    Read-only unless ``write`` (see the module docstring). Keys for an encrypted
    store come from ``SESSIONVISOR_KEYS`` (``store_keys``). Every failure exits 1
    with a message.
    """
    require_data_dir(data_dir)
    path = data_dir / DB_NAME
    require_store(data_dir)
    opened = _writing if write else _reading
    with data_dir_errors(data_dir, f"the store {DB_NAME}"), opened(data_dir, path) as store:
        yield store


def store_keys() -> EncryptionKeys | None:
    """The keys of ``SESSIONVISOR_KEYS``, ``None`` when it is unset or empty.

    Raises:
        InvalidEncryptionKeys: it is malformed.
    """
    return EncryptionKeys.from_env() if os.environ.get(EncryptionKeys.VARIABLE) else None


def keys_or_error() -> tuple[EncryptionKeys | None, InvalidEncryptionKeys | None]:
    """The keys of ``SESSIONVISOR_KEYS`` (``store_keys``), or ``None`` and why the variable
    is malformed: that matters only for an encrypted store, a plaintext one is read
    without keys, so the caller decides once it knows which it opens."""
    try:
        return store_keys(), None
    except InvalidEncryptionKeys as exc:
        return None, exc


def ignored_keys(path: Path, error: InvalidEncryptionKeys) -> str:
    """The warning that the malformed ``SESSIONVISOR_KEYS`` (``error``) was ignored for the
    plaintext store at ``path``: nothing failed, but a host given the variable would."""
    return (
        f"{EncryptionKeys.VARIABLE} is malformed, and ignored: the store {str(path)!r} is not "
        f"encrypted, so it needs no keys; fix the variable before a host reads it ({error})"
    )


def _encrypted_without_keys(path: Path, error: InvalidEncryptionKeys | None) -> str:
    """What to do about the encrypted store at ``path`` opened without keys: set them, or,
    when ``SESSIONVISOR_KEYS`` is set but malformed (``error``), fix them."""
    if error is None:
        return (
            f"the store {str(path)!r} is encrypted, give keys: set "
            f"{EncryptionKeys.VARIABLE} as the host has it (key_id:base64key,...)"
        )
    return (
        f"the store {str(path)!r} is encrypted, and {EncryptionKeys.VARIABLE} cannot give "
        f"its keys: {error}"
    )


@contextmanager
def _reading(data_dir: Path, path: Path) -> Iterator[SQLiteCheckpointStore]:
    """The store opened ``read_only=True``: it changes nothing (see the module docstring).
    A malformed ``SESSIONVISOR_KEYS`` fails only an encrypted store (``_open``); for a
    plaintext one it is a warning on stderr."""
    keys, malformed = keys_or_error()
    try:
        store = _open(path, keys, malformed, read_only=True)
    except StoreReadOnly as exc:  # no store there yet, or one of an older schema
        if exc.schema_version is None:
            raise
        _wrong_schema(data_dir, path, exc.schema_version)
    if malformed is not None:  # opened without keys: a plaintext store
        click.echo(f"warning: {ignored_keys(path, malformed)}", err=True)
    with closing(store):
        yield store


@contextmanager
def _writing(data_dir: Path, path: Path) -> Iterator[SQLiteCheckpointStore]:
    """The store opened to write, once a read-only connection found it of this schema.

    A ``-wal`` file already there (a host serves the store, or stopped without
    closing it) stays as it is: the read-only connection is held open beside the
    store's, so that closing the store is not closing the file's last connection,
    which copies the ``-wal`` file into the store and deletes it.
    """
    keep_wal = path.with_name(path.name + "-wal").exists()
    with closing(read_only(path)) as reader:
        _check_schema(data_dir, path, reader)
        keys, malformed = _keys(reader)
        if not keep_wal:
            reader.close()  # else SQLite could not remove the files the store makes
        with closing(_open(path, keys, malformed, read_only=False)) as store:
            if malformed is not None:  # opened without keys: a plaintext store
                click.echo(f"warning: {ignored_keys(path, malformed)}", err=True)
            yield store


def _open(
    path: Path,
    keys: EncryptionKeys | None,
    malformed: InvalidEncryptionKeys | None,
    *,
    read_only: bool,
) -> SQLiteCheckpointStore:
    """The store at ``path``, for every checkpoint (no pruning); exit 1 if it needs keys
    (saying why ``SESSIONVISOR_KEYS`` gave none when it is ``malformed``)."""
    try:
        return SQLiteCheckpointStore(path, keep_last=None, encryption=keys, read_only=read_only)
    except StoreEncrypted:
        fail(_encrypted_without_keys(path, malformed))


def require_store(data_dir: Path) -> None:
    """Exit 1 unless ``data_dir`` holds a store file: saying it was lost when its marker
    file is left (as a host would refuse it), that it is a link to nothing or no file, else
    that no host has written there yet."""
    path = data_dir / DB_NAME
    lost = SQLiteCheckpointStore.lost_store(path)
    if lost is not None:
        fail(str(lost))
    if path.is_symlink() and not path.exists():
        fail(
            f"{str(path)!r} is a symbolic link to {os.readlink(path)!r}, which does not "
            "exist: restore what it points to (mount its volume), or remove the link"
        )
    if not path.exists():
        fail(f"{str(data_dir)!r} holds no {DB_NAME}: no host has written there yet")
    if not path.is_file():  # SQLite: a "disk I/O error"; a named pipe blocks the open
        fail(
            f"{str(path)!r} is not a file: restore the store's file there from a backup, or "
            "give the right data directory with --data-dir"
        )


def read_only(db: Path) -> sqlite3.Connection:
    """A connection that cannot write ``db`` (nor create it), and leaves no file behind.

    When no host has the store open (no ``-wal`` or ``-journal`` file), it is opened
    read-write with ``query_only``, as the store's own read-only connections are:
    closing it, the file's last connection, then removes the ``-wal`` and ``-shm``
    files SQLite makes for a WAL database, which a ``mode=ro`` connection leaves in
    the data directory (a command that stopped at a store of an older schema did).
    """
    idle = not any(db.with_name(db.name + end).exists() for end in ("-wal", "-journal"))
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode={'rw' if idle else 'ro'}", uri=True)
    try:
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _keys(
    conn: sqlite3.Connection,
) -> tuple[EncryptionKeys | None, InvalidEncryptionKeys | None]:
    """The keys to open the store ``conn`` reads with to write: those of
    ``SESSIONVISOR_KEYS``, for an encrypted store only, with a key the store records as
    the current one; and, when the variable is malformed, why (``keys_or_error``).

    Opening a store with keys writes what it lacks: it marks a plaintext store that
    holds no checkpoint yet encrypted (a host without keys then refuses it), and
    records a new current key (a host whose ring lacks it then refuses the store).
    ``checkpoints prune`` only deletes, and must change neither; a plaintext store
    needs no keys, and any key of the ring decrypts the rows written under it.
    """
    keys, malformed = keys_or_error()
    if keys is None:
        return None, malformed
    meta = dict(conn.execute("SELECT name, value FROM store_meta").fetchall())
    if meta.get("encryption") is None:
        return None, None
    recorded = {key_id for (key_id,) in conn.execute("SELECT key_id FROM encryption_keys")}
    current = next((key_id for key_id in keys.key_ids if key_id in recorded), None)
    if current is None or current == keys.current_id:
        return keys, None  # no recorded key in the ring: the store refuses it, naming them
    variable = EncryptionKeys.VARIABLE
    entries = os.environ[variable].split(",")
    first = [e for e in entries if e.strip().partition(":")[0] == current]
    rest = [e for e in entries if e.strip().partition(":")[0] != current]
    return EncryptionKeys.from_env(environ={variable: ",".join(first + rest)}), None


def _check_schema(data_dir: Path, path: Path, conn: sqlite3.Connection) -> None:
    """Exit 1 unless ``path`` holds a store of the schema this code writes, read through
    the read-only connection ``conn``.

    Raises what the store's own check raises (a foreign or truncated file, a newer
    schema) and SQLite's errors, for ``data_dir_errors``.
    """
    version = SQLiteCheckpointStore.stored_schema(conn, str(path))
    if version != SQLiteCheckpointStore.SCHEMA_VERSION:
        _wrong_schema(data_dir, path, version or 0)


def _wrong_schema(data_dir: Path, path: Path, version: int) -> NoReturn:
    """Exit 1 saying that ``path`` holds no store (``version`` 0) or one of ``version``,
    which this sessionvisor does not write (a newer one the store refuses itself)."""
    if not version:
        fail(f"{str(path)!r} holds no store yet: no host has written there")
    fail(
        f"the store {str(path)!r} has schema version {version}, this sessionvisor "
        f"writes {SQLiteCheckpointStore.SCHEMA_VERSION}: start a host of this version on "
        f"{str(data_dir)!r} to migrate it, or use the sessionvisor that wrote it"
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


def newest_readable(
    store: SQLiteCheckpointStore, session_id: str
) -> tuple[Snapshot | None, int, list[SnapshotDecodeError]]:
    """The session's newest checkpoint that can be read (the one a host resumes it from),
    how many checkpoints it has, and the errors of the newer ones that cannot be read,
    newest first. ``(None, 0, [])`` if it has none; ``(None, n, errors)`` if none of its
    ``n`` can be read. A checkpoint the host prunes meanwhile is skipped."""
    infos = store.list(session_id)
    damaged: list[SnapshotDecodeError] = []
    for info in infos:
        try:
            return store.load(session_id, info.checkpoint_id), len(infos), damaged
        except CheckpointNotFound:  # removed meanwhile by the host's pruning
            continue
        except SnapshotDecodeError as exc:
            damaged.append(exc)
    return None, len(infos), damaged


def message_count(state: Mapping[str, object]) -> int:
    """How many messages a checkpoint's ``state`` holds: none unless its ``messages`` is a
    list (a store holds whatever state its users saved, not only an agent session's)."""
    messages = state.get("messages")
    return len(messages) if isinstance(messages, list) else 0


def render_fields(fields: Mapping[str, object]) -> str:
    """One ``name: value`` line per field, each value ``render``-ed."""
    return "\n".join(f"{name}: {render(value)}" for name, value in fields.items())


def emit(as_json: bool, document: object, text: Callable[[], str]) -> None:
    """Print ``document`` as JSON (indented, as every command prints it), or ``text()``.

    The JSON is strict: a NaN or an infinity (a session's state may hold one) is
    ``null``, as JavaScript's ``JSON.stringify`` writes it; Python's ``NaN`` and
    ``Infinity`` are no JSON, and strict parsers (``jq``, browsers) refuse them.
    """
    if not as_json:
        click.echo(text())
        return
    try:
        click.echo(_dumps(document))
    except ValueError:  # a float that is not finite
        click.echo(_dumps(_finite(document)))


def _dumps(document: object) -> str:
    return json.dumps(document, indent=2, default=_json_value, ensure_ascii=False, allow_nan=False)


def _finite(value: object) -> object:
    """``value`` with every NaN and infinity, at any depth, replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_value(value: object) -> str:
    """A value JSON has no type for, as text: a time in ISO 8601 (``2026-01-02T03:04:05+00:00``,
    as every command prints ``saved_at``), anything else as ``str`` gives it."""
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
