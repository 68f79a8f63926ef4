"""``sessionvisor keys``: create, list and revoke the gateway's API keys."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from cli import main
from cli._common import data_dir_option, json_option
from gateway.keys import ApiKeys, KeyNotFound, KeyStore

__all__ = ["keys"]

F = TypeVar("F", bound=Callable[..., Any])


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


@contextmanager
def _key_store(data_dir: Path, dsn: str | None, schema: str) -> Iterator[ApiKeys]:
    """The data directory's keys, or the cluster's on ``dsn``; closed on exit."""
    if dsn is None:
        store: ApiKeys = KeyStore(data_dir)
        try:
            yield store
        finally:
            store.close()
        return
    from gateway.keys_pg import PostgresKeyStore  # noqa: PLC0415 (psycopg, only here)
    from supervisor import PostgresCheckpointStore  # noqa: PLC0415

    with PostgresCheckpointStore(dsn, schema=schema, pool_size=1) as checkpoints:
        yield PostgresKeyStore(checkpoints, data_dir)


@main.group()
def keys() -> None:
    """API keys of the gateway (each belongs to one tenant)."""


@keys.command("create")
@data_dir_option
@_postgres_option
@click.option("--tenant", required=True)
@json_option
def create(data_dir: Path, dsn: str | None, schema: str, tenant: str, as_json: bool) -> None:
    """Create a key for TENANT and print it (the only time it is shown)."""
    with _key_store(data_dir, dsn, schema) as store:
        new = store.create(tenant)
    if as_json:
        click.echo(json.dumps({"key": new.key, **dataclasses.asdict(new.info)}))
    else:
        click.echo(new.key)
        click.echo(f"key id {new.info.key_id}, tenant {tenant}; store the key now", err=True)


@keys.command("list")
@data_dir_option
@_postgres_option
@click.option("--tenant", default=None)
@json_option
def list_keys(
    data_dir: Path, dsn: str | None, schema: str, tenant: str | None, as_json: bool
) -> None:
    """List keys (never the keys themselves)."""
    with _key_store(data_dir, dsn, schema) as store:
        rows = store.list(tenant)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows]))
        return
    click.echo(f"{'KEY ID':<18} {'TENANT':<20} STATE")
    for r in rows:
        state = "active" if r.revoked_at is None else "revoked"
        click.echo(f"{r.key_id:<18} {r.tenant_id:<20} {state}")


@keys.command("revoke")
@data_dir_option
@_postgres_option
@click.argument("key_id")
@json_option
def revoke(data_dir: Path, dsn: str | None, schema: str, key_id: str, as_json: bool) -> None:
    """Revoke KEY_ID at once."""
    with _key_store(data_dir, dsn, schema) as store:
        try:
            row = store.revoke(key_id)
        except KeyNotFound as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(dataclasses.asdict(row)) if as_json else f"revoked {key_id}")
