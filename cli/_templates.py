"""``serve --template``: load the named templates, every failure a one-line message.

``gateway.templates`` refuses what is no template (exit 2, a usage error); a
template's module or factory that raises is that code's failure (exit 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from actors import AgentTemplate
from cli._common import fail

__all__ = ["load"]


def load(specs: Sequence[str]) -> dict[str, AgentTemplate]:
    """``{name: template}`` for ``--template`` values, by ``gateway.templates``' rules.

    Raises:
        click.UsageError: a target that is not a template or a factory of one.
        SystemExit: a template's module or factory raised (status 1, on one line).
    """
    from gateway.templates import (  # noqa: PLC0415 (the server extra, only here)
        TemplateFactoryError,
        TemplateLoadError,
        load_templates,
    )

    try:
        return load_templates(specs)
    except TemplateFactoryError as exc:
        fail(str(exc))
    except TemplateLoadError as exc:
        raise click.UsageError(str(exc)) from None
