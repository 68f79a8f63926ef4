"""README, Layout: "Thread-safety is stated in every public class's docstring."

(docs/ARCHITECTURE.md, "Concurrency, in one paragraph": "Every public object says in
its docstring whether it is thread-safe.") Most do ("Immutable and thread-safe.",
"Thread-safe."); a few exported classes said nothing, among them ``actors.Plugin``,
whose one object may serve many sessions' threads at once. Exceptions are left
out, and so are ``TypedDict``s (keyword-argument types, never shared objects).
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import is_typeddict

PUBLIC_MODULES = (
    "actors",
    "actors.adapters",
    "actors.mcp",
    "supervisor",
    "supervisor.aio",
    "supervisor.cluster",
    "supervisor.log_format",
    "supervisor.metrics",
    "supervisor.tracing",
    "gateway",
)


def public_classes() -> dict[str, type]:
    """Every class the public modules export, but exceptions and ``TypedDict``s."""
    found: dict[str, type] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if not inspect.isclass(value) or issubclass(value, BaseException):
                continue
            if is_typeddict(value):
                continue
            found.setdefault(f"{value.__module__}.{value.__qualname__}", value)
    return found


def test_every_public_class_states_its_thread_safety() -> None:
    silent = sorted(
        name
        for name, cls in public_classes().items()
        if not re.search(r"thread", inspect.getdoc(cls) or "", re.IGNORECASE)
    )
    assert silent == [], f"public classes whose docstring says nothing of threads: {silent}"
