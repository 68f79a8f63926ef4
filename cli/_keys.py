"""``sessionvisor keys``: create, list and revoke the gateway's API keys.

``gateway`` (the ``server`` extra) is imported only when a keys command runs, so
the inspection commands work with the ``cli`` extra alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cli import main
from cli._common import (
    data_dir_errors,
    data_dir_option,
    emit,
    fail,
    json_option,
    make_data_dir,
    require_data_dir,
    table,
)
from supervisor import check_tenant_id

if TYPE_CHECKING:
    from gateway.keys import ApiKeys

__all__ = ["keys"]

F = TypeVar("F", bound=Callable[..., Any])

STORE_OPTIONS = "'--postgres' / '--postgres-schema'"
"""The options an unusable connection string or schema name is a usage error of."""


def _postgres_option(func: F) -> F:
    """``--postgres``, ``--postgres-schema``: the keys of the cluster on that database."""
    dsn = click.option(
        "--postgres",
        "dsn",
        default=None,
        envvar="SESSIONVISOR_POSTGRES",
        help="Cluster mode: the keys every node of the cluster on this PostgreSQL shares "
        "(--data-dir then holds their secret)",
    )
    schema = click.option(
        "--postgres-schema",
        "schema",
        default="sessionvisor",
        show_default=True,
        help="Cluster mode: the PostgreSQL schema of the cluster's tables",
    )
    return dsn(schema(func))


def _tenant(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--tenant``, checked by the host's own rule for a session's ``tenant_id`` (every
    session a key creates runs under it): not empty, not only whitespace, text a
    checkpoint can hold (no lone surrogate: bytes of the argument that are not UTF-8)."""
    try:
        check_tenant_id(value)
    except ValueError as exc:
        if value.strip():
            raise click.BadParameter(f"{value!r}: {exc}") from None
        raise click.BadParameter(
            f"{value!r}: a tenant id must be a non-empty name, not only whitespace"
        ) from None
    return value


@contextmanager
def _key_store(
    data_dir: Path, dsn: str | None, schema: str, *, create: bool = False
) -> Iterator[ApiKeys | None]:
    """The data directory's keys, or the cluster's on ``dsn``; closed on exit. The
    directory must exist (the caller creates it first where that is wanted).

    Without ``create`` (``list``, ``revoke``), a data directory holding no secret and no
    key (no key database yet, or one without keys) yields ``None``: opening the store
    would make ``gateway.secret`` (and the database) there, so that a command that only
    reads keys would write into a directory (one a later ``serve`` then uses, or a cluster
    node's before its secret is copied in).
    For the same reason the cluster's key store is then opened without making the
    secret: listing and revoking need none (the keys are in the database).
    """
    require_data_dir(data_dir)
    try:
        from gateway.keys import (  # noqa: PLC0415 (the server extra, only here)
            DB_FILE,
            SECRET_FILE,
            KeyStore,
            holds_keys,
        )
    except ImportError as exc:
        fail(f"the keys commands need the server extra ({exc}): pip install 'sessionvisor[server]'")
    db = data_dir / DB_FILE
    if (
        dsn is None
        and not create
        # without a secret, opening the store would make one; with keys in the database,
        # it refuses the lost secret instead (below), as ``serve`` does
        and (not db.exists() or (not (data_dir / SECRET_FILE).exists() and not holds_keys(db)))
    ):
        yield None
        return
    with data_dir_errors(data_dir, "the key store"):
        if dsn is None:
            store: ApiKeys = _opened(KeyStore, data_dir)
            try:
                yield store
            finally:
                store.close()
            return
        from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only here)
        from supervisor import PostgresCheckpointStore  # noqa: PLC0415

        try:
            opened = PostgresCheckpointStore(dsn, schema=schema, pool_size=1)
        except (TypeError, ValueError) as exc:  # refused before it connects
            raise click.BadParameter(str(exc), param_hint=STORE_OPTIONS) from None
        with opened as checkpoints:
            yield _opened(
                lambda d: PostgresKeyStore(checkpoints, d, create_secret=create), data_dir
            )


def _opened(make: Callable[[Path], ApiKeys], data_dir: Path) -> ApiKeys:
    """``make(data_dir)``; its ``ValueError`` (a damaged ``gateway.secret``) exits 1."""
    try:
        return make(data_dir)
    except ValueError as exc:
        fail(str(exc))


@main.group()
def keys() -> None:
    """API keys of the gateway (each belongs to one tenant)."""


@keys.command("create")
@data_dir_option
@_postgres_option
@click.option(
    "--tenant", required=True, callback=_tenant, help="The tenant the key belongs to (non-empty)."
)
@json_option
def create(data_dir: Path, dsn: str | None, schema: str, tenant: str, as_json: bool) -> None:
    """Create a key for TENANT and print it (the only time it is shown).

    A missing data directory is created if its parent exists, so keys can be made
    before the first ``serve``; a missing parent is an error (a typo, not a new tree).
    """
    make_data_dir(data_dir)
    with _key_store(data_dir, dsn, schema, create=True) as store:
        assert store is not None  # made when missing
        new = store.create(tenant)
    if as_json:
        emit(True, {"key": new.key, **dataclasses.asdict(new.info)}, str)
    else:
        click.echo(new.key)
        click.echo(f"key id {new.info.key_id}, tenant {tenant}; store the key now", err=True)


@keys.command("list")
@data_dir_option
@_postgres_option
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@json_option
def list_keys(
    data_dir: Path, dsn: str | None, schema: str, tenant: str | None, as_json: bool
) -> None:
    """List keys (never the keys themselves)."""
    with _key_store(data_dir, dsn, schema) as store:
        rows = [] if store is None else store.list(tenant)
    emit(
        as_json,
        [dataclasses.asdict(r) for r in rows],
        lambda: table(
            ("KEY ID", "TENANT", "STATE"),
            [
                (r.key_id, r.tenant_id, "active" if r.revoked_at is None else "revoked")
                for r in rows
            ],
        ),
    )


@keys.command("revoke")
@data_dir_option
@_postgres_option
@click.argument("key_id")
@json_option
def revoke(data_dir: Path, dsn: str | None, schema: str, key_id: str, as_json: bool) -> None:
    """Revoke KEY_ID at once."""
    with _key_store(data_dir, dsn, schema) as store:
        from gateway.keys import KeyNotFound  # noqa: PLC0415 (_key_store found the extra)

        try:
            if store is None:  # no key database: no key at all
                raise KeyNotFound(key_id)
            row = store.revoke(key_id)
        except KeyNotFound as exc:
            fail(str(exc))
    emit(as_json, dataclasses.asdict(row), lambda: f"revoked {key_id}")
