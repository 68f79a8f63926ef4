"""Agent templates named by import strings, as uvicorn names its app.

``pkg.module:attr`` names an ``AgentTemplate`` (or a function of no arguments
returning one); ``name=pkg.module:attr`` gives it the name clients create
sessions with (without ``name=``, the name is ``attr``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable

from actors import AgentTemplate, Tool

__all__ = ["TemplateFactoryError", "TemplateLoadError", "load_template", "load_templates"]

_WANTED = "an actors.AgentTemplate (or a function of no arguments returning one)"


class TemplateLoadError(ValueError):
    """An import string that does not name an ``AgentTemplate``; the message says why."""


class TemplateFactoryError(TemplateLoadError):
    """The template's module or factory raised while it was loaded; the original
    exception is the ``__cause__``."""


def load_template(target: str) -> AgentTemplate:
    """The template ``pkg.module:attr`` names.

    Raises:
        TemplateLoadError: malformed, the module or attribute missing, or not a template.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        msg = f"template {target!r} must have the form pkg.module:attr"
        raise TemplateLoadError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TemplateLoadError(
            f"template {target!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise TemplateFactoryError(
            f"template {target!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    value: object = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            msg = f"template {target!r}: module {module_name!r} has no attribute {attr!r}"
            raise TemplateLoadError(msg) from None
    if callable(value) and not isinstance(value, AgentTemplate):
        value = _made(target, value)
    if not isinstance(value, AgentTemplate):
        msg = f"template {target!r} is of type {type(value).__name__}, not {_WANTED}"
        raise TemplateLoadError(msg)
    return value


def _made(target: str, factory: object) -> object:
    """What the factory ``target`` names returns, called without arguments; a callable
    that is no factory (a tool, a function that needs arguments) is refused uncalled.

    Raises:
        TemplateLoadError: it cannot be called without arguments.
        TemplateFactoryError: it raised.
    """
    assert callable(factory)
    if isinstance(factory, Tool):
        raise TemplateLoadError(f"template {target!r} is an actors.Tool, not {_WANTED}")
    try:
        inspect.signature(factory).bind()
    except TypeError:
        kind = "class" if inspect.isclass(factory) else "function"
        raise TemplateLoadError(
            f"template {target!r} is a {kind} that needs arguments, not {_WANTED}"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): the call decides
        pass
    try:
        return factory()
    except Exception as exc:
        raise TemplateFactoryError(
            f"template {target!r}: the factory raised {type(exc).__name__}: {exc}; "
            "call it in Python to see where"
        ) from exc


def load_templates(specs: Iterable[str]) -> dict[str, AgentTemplate]:
    """``{name: template}`` from ``name=pkg.module:attr`` (or ``pkg.module:attr``) strings.

    Raises:
        TemplateLoadError: as ``load_template``, or a name given twice, or none at all.
    """
    templates: dict[str, AgentTemplate] = {}
    for spec in specs:
        name, sep, target = spec.partition("=")
        if not sep:
            target = spec
            name = spec.rpartition(":")[2].rpartition(".")[2]
        if not name:
            raise TemplateLoadError(f"template {spec!r} has an empty name")
        if name in templates:
            raise TemplateLoadError(f"template name {name!r} is given twice")
        templates[name] = load_template(target)
    if not templates:
        raise TemplateLoadError("give at least one template: --template NAME=pkg.module:attr")
    return templates
