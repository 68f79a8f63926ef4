"""The ``sessionvisor`` command: the root click group; subcommands register themselves."""

import click


@click.group()
def main() -> None:
    """sessionvisor: inspect and manage a sessionvisor data directory."""


from cli import _checkpoints, _doctor, _sessions  # noqa: E402, F401  (registers the commands)
