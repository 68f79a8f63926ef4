"""The ``sessionvisor`` command: the root click group; subcommands register themselves."""

import click


@click.group()
def main() -> None:
    """sessionvisor: serve and inspect long-lived agent sessions."""


from cli import _checkpoints, _doctor, _keys, _serve, _sessions  # noqa: E402, F401  (registers the commands)
