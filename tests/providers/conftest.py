"""Fixtures of the adapter tests: ``flavour`` (each adapter), ``server``, ``make_adapter``."""

from tests.providers.flavours import flavour, make_adapter, server

__all__ = ["flavour", "make_adapter", "server"]
