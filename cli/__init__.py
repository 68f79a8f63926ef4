"""The ``sessionvisor`` command."""

import click


@click.group()
def main() -> None:
    """sessionvisor: serve and inspect long-lived agent sessions."""


from cli import _keys, _serve  # noqa: E402, F401  (registers the commands)
