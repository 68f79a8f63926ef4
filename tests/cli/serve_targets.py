"""Import targets for ``serve --template`` that are not templates (see test_serve_cmd)."""

from __future__ import annotations

from actors import AgentTemplate, EchoModel, tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def needs_model(model: str) -> AgentTemplate:
    """A factory that cannot be called without arguments."""
    return AgentTemplate(model=model)


def broken() -> AgentTemplate:
    """A factory that fails."""
    raise RuntimeError("the model's credentials are missing")


echo = AgentTemplate(model=EchoModel())
