"""``sessionvisor keys``: create, list and revoke the gateway's API keys."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from cli import main
from cli._common import data_dir_option, json_option
from gateway.keys import KeyNotFound, KeyStore

__all__ = ["keys"]


@main.group()
def keys() -> None:
    """API keys of the gateway (each belongs to one tenant)."""


@keys.command("create")
@data_dir_option
@click.option("--tenant", required=True)
@json_option
def create(data_dir: Path, tenant: str, as_json: bool) -> None:
    """Create a key for TENANT and print it (the only time it is shown)."""
    store = KeyStore(data_dir)
    try:
        new = store.create(tenant)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps({"key": new.key, **dataclasses.asdict(new.info)}))
    else:
        click.echo(new.key)
        click.echo(f"key id {new.info.key_id}, tenant {tenant}; store the key now", err=True)


@keys.command("list")
@data_dir_option
@click.option("--tenant", default=None)
@json_option
def list_keys(data_dir: Path, tenant: str | None, as_json: bool) -> None:
    """List keys (never the keys themselves)."""
    store = KeyStore(data_dir)
    try:
        rows = store.list(tenant)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows]))
        return
    click.echo(f"{'KEY ID':<18} {'TENANT':<20} STATE")
    for r in rows:
        state = "active" if r.revoked_at is None else "revoked"
        click.echo(f"{r.key_id:<18} {r.tenant_id:<20} {state}")


@keys.command("revoke")
@data_dir_option
@click.argument("key_id")
@json_option
def revoke(data_dir: Path, key_id: str, as_json: bool) -> None:
    """Revoke KEY_ID at once."""
    store = KeyStore(data_dir)
    try:
        row = store.revoke(key_id)
    except KeyNotFound as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    click.echo(json.dumps(dataclasses.asdict(row)) if as_json else f"revoked {key_id}")
