"""What every data-directory command shares: options, opening the store, output, errors.

Commands open the store beside a host that may be serving it: they never take
``host.lock`` and never create a missing store (a typo in ``--data-dir`` is an
error, not a new empty directory). SQLite lets several processes use one file;
readers do not block the host's writes. Not thread-safe: one command per process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from supervisor import EncryptionKeys, SQLiteCheckpointStore, SupervisorError
from supervisor.errors import StoreEncrypted
from supervisor.host import DEFAULT_DATA_DIR

__all__ = ["DB_NAME", "data_dir_option", "emit", "fail", "json_option", "open_store", "table"]

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


@contextmanager
def open_store(data_dir: Path) -> Iterator[SQLiteCheckpointStore]:
    """The data directory's store, opened beside any running host; closed on exit.

    Keys for an encrypted store come from ``SESSIONVISOR_KEYS`` (as
    ``EncryptionKeys.from_env`` reads them). Every failure exits 1 with a message.
    """
    if not data_dir.is_dir():
        fail(f"no data directory at {str(data_dir)!r}; give the right one with --data-dir")
    path = data_dir / DB_NAME
    if not path.exists():
        fail(f"{str(data_dir)!r} holds no {DB_NAME}: no host has written there yet")
    try:
        keys = EncryptionKeys.from_env() if os.environ.get(EncryptionKeys.VARIABLE) else None
        store = SQLiteCheckpointStore(path, keep_last=None, encryption=keys)
    except StoreEncrypted:
        fail(
            f"the store {str(path)!r} is encrypted, give keys: set {EncryptionKeys.VARIABLE} "
            "as the host has it (key_id:base64key,...)"
        )
    except SupervisorError as exc:
        fail(str(exc))
    try:
        yield store
    except SupervisorError as exc:
        fail(str(exc))
    finally:
        store.close()


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` as a left-aligned text table under ``headers``."""
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(as_json: bool, document: object, text: Callable[[], str]) -> None:
    """Print ``document`` as JSON, or ``text()`` for people."""
    if as_json:
        click.echo(json.dumps(document, indent=2, default=str, ensure_ascii=False))
    else:
        click.echo(text())
