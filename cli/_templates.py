"""``serve --template``: load the named templates, every failure a one-line message.

``gateway.templates.load_template`` calls whatever callable an import string
names, as a template factory. A callable that is not one (an ``actors.Tool``, a
function that needs arguments) then fails inside that call with a ``TypeError``
about the wrong function. So each target is looked at before anything is
called, and what a real factory raises is reported as that factory's failure.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence

import click

from actors import AgentTemplate, Tool
from cli._common import fail

__all__ = ["load"]

_WANTED = "an AgentTemplate (or a function of no arguments returning one)"


def load(specs: Sequence[str]) -> dict[str, AgentTemplate]:
    """``{name: template}`` for ``--template`` values, by ``gateway.templates``' rules.

    Raises:
        click.UsageError: a target that is not a template or a factory of one
            (the loader's own refusals included).
        SystemExit: a factory raised (status 1, its error on one line).
    """
    from gateway.templates import TemplateLoadError, load_templates  # noqa: PLC0415

    factories = [target for spec in specs if (target := _factory_or_none(spec))]
    try:
        return load_templates(specs)
    except TemplateLoadError as exc:
        raise click.UsageError(str(exc)) from None
    except Exception as exc:  # a user's factory may raise anything
        fail(
            f"the template factory {' or '.join(factories or specs)} raised {type(exc).__name__}: "
            f"{exc}; call it in Python to see where"
        )


def _factory_or_none(spec: str) -> str | None:
    """The target of ``spec`` if it is a callable to call as a factory, else ``None``.

    A target that does not resolve is left to ``load_templates``, which says why.

    Raises:
        click.UsageError: it is callable, but calling it without arguments cannot
            give a template.
        SystemExit: importing its module raised something other than ``ImportError``.
    """
    target = spec.partition("=")[2] if "=" in spec else spec
    module_name, _, attr = target.partition(":")
    try:
        value: object = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, ValueError):
        return None
    except Exception as exc:  # the module's own code failed while it was imported
        fail(f"template {target!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}")
    if isinstance(value, AgentTemplate) or not callable(value):
        return None
    if isinstance(value, Tool):
        raise click.UsageError(f"{target} is a Tool, not {_WANTED}")
    try:
        inspect.signature(value).bind()
    except TypeError:
        kind = "class" if inspect.isclass(value) else "function"
        raise click.UsageError(
            f"{target} is a {kind} that needs arguments, not {_WANTED}"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): the call decides
        pass
    return target
