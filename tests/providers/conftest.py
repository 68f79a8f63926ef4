"""Fixtures of the adapter tests: ``flavour`` (each adapter), ``server``, ``make_adapter``, and
a wire server of each dialect (``chat``, ``responses``, ``anthropic``)."""

from tests.providers.flavours import (
    anthropic_server,
    chat_server,
    flavour,
    make_adapter,
    responses_server,
    server,
)

__all__ = [
    "anthropic_server",
    "chat_server",
    "flavour",
    "make_adapter",
    "responses_server",
    "server",
]
