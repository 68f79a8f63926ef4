"""``load_template``: an import string names a template or a factory of one; anything
else is refused before it is called, and a factory that raises is named."""

from __future__ import annotations

import re

import pytest

from actors import AgentTemplate
from gateway import TemplateFactoryError, TemplateLoadError, load_template, load_templates

TARGETS = "tests.cli.serve_targets"


@pytest.mark.parametrize(
    ("attr", "message"),
    [
        ("add", "is an actors.Tool, not an actors.AgentTemplate (or a function of no arg"),
        ("needs_model", "is a function that needs arguments, not an actors.AgentTemplate"),
    ],
)
def test_a_callable_that_is_no_factory_is_refused_uncalled(attr: str, message: str) -> None:
    with pytest.raises(TemplateLoadError, match=re.escape(message)) as caught:
        load_template(f"{TARGETS}:{attr}")
    assert not isinstance(caught.value, TemplateFactoryError)


def test_a_factory_that_raises_is_named_with_its_error() -> None:
    with pytest.raises(TemplateFactoryError, match="the factory raised RuntimeError") as caught:
        load_template(f"{TARGETS}:broken")
    assert f"'{TARGETS}:broken'" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_template_or_its_factory_loads() -> None:
    loaded = load_templates([f"chat={TARGETS}:echo", "made=tests.gateway.agents:make_slow"])
    assert all(isinstance(t, AgentTemplate) for t in loaded.values())
    assert sorted(loaded) == ["chat", "made"]
