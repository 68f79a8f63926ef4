"""``sessionvisor serve``: the HTTP gateway on a data directory."""

from __future__ import annotations

from pathlib import Path

import click

from cli import main

__all__ = ["serve"]


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--template",
    "templates",
    multiple=True,
    required=True,
    help="NAME=pkg.module:attr (repeatable)",
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="Run sessions in N worker processes"
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
def serve(
    data_dir: Path, templates: tuple[str, ...], workers: int | None, host: str, port: int
) -> None:
    """Serve the sessions of DATA_DIR over HTTP until interrupted."""
    from gateway.server import serve as run  # noqa: PLC0415  (the server extra, only here)
    from gateway.templates import TemplateLoadError, load_templates  # noqa: PLC0415

    try:
        loaded = load_templates(templates)
    except TemplateLoadError as exc:
        raise click.UsageError(str(exc)) from None
    run(data_dir, loaded, host=host, port=port, workers=workers)
