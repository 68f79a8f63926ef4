"""The one layering rule of DESIGN.md: actors/ never imports supervisor/."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_actors_never_imports_supervisor() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "actors").rglob("*.py")
        if any(m == "supervisor" or m.startswith("supervisor.") for m in _imported_modules(path))
    ]
    assert offenders == []


@pytest.mark.parametrize("package", ["actors", "supervisor"])
def test_every_public_module_defines_all(package: str) -> None:
    pkg = importlib.import_module(package)
    missing = [
        info.name
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{package}.")
        if not hasattr(importlib.import_module(info.name), "__all__")
    ]
    assert missing == []
    assert (ROOT / package / "py.typed").exists()


@pytest.mark.parametrize("package", ["actors", "supervisor"])
def test_public_names_report_public_module(package: str) -> None:
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        obj = getattr(pkg, name)
        if isinstance(obj, type):
            assert obj.__module__ == package, f"{package}.{name} reports {obj.__module__}"
