"""The layering rules of docs/ARCHITECTURE.md, checked on the source.

- ``actors/`` never imports ``supervisor/``;
- ``gateway/`` and ``cli/`` import only public modules of the inner packages;
- process-mode code is reached only through the runtime seam: nothing in
  ``supervisor/`` outside ``supervisor/workers/`` imports a private
  ``supervisor.workers._*`` module, and ``AgentHost`` names no worker pool;
- no module imports itself back through others (no import cycle);
- every public module has ``__all__``, and public names report their package.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


PACKAGES = ("actors", "supervisor", "gateway", "cli")
OUTER = ("gateway", "cli")
"""The outermost layer: it imports ``supervisor/`` and ``actors/``, never the reverse."""


def _imported_modules(path: Path, modules: Collection[str] = ()) -> set[str]:
    """What ``path`` imports; ``from pkg import mod`` names ``pkg.mod`` alone when
    ``pkg.mod`` is one of ``modules`` (that import does not run ``pkg`` again)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in modules else node.module)
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (anywhere in it, TYPE_CHECKING too)."""
    paths = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph = {
        name: {m for m in _imported_modules(path, paths) if m in paths and m != name}
        for name, path in paths.items()
    }
    # ``cli/__init__`` imports its command modules last, to register them on ``main``
    # (defined before): a deliberate registration, not a cycle that can break.
    graph["cli"] = {m for m in graph.get("cli", set()) if not m.startswith("cli._")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that ends where it starts), or ``None``.

    Importing ``a.b`` runs ``a/__init__`` first, but that is no cycle: Python
    finds the package half-initialised and goes on. An edge to a package
    counts only where its ``__init__`` is imported by name.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_actors_never_imports_supervisor() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "actors").rglob("*.py")
        if any(m == "supervisor" or m.startswith("supervisor.") for m in _imported_modules(path))
    ]
    assert offenders == []


def test_supervisor_and_actors_never_import_the_outer_layer() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for package in ("actors", "supervisor")
        for path in (ROOT / package).rglob("*.py")
        for module in sorted(_imported_modules(path))
        if module.split(".")[0] in OUTER
    ]
    assert offenders == []


def test_the_outer_layer_uses_only_the_public_api_of_the_inner_ones() -> None:
    """``gateway/`` and ``cli/`` are written as a user's code would be: what they need
    from ``supervisor/`` or ``actors/`` is public there (a private module may change
    shape with any release)."""
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for package in OUTER
        for path in (ROOT / package).rglob("*.py")
        for module in sorted(_imported_modules(path))
        if module.split(".")[0] in ("actors", "supervisor")
        and any(part.startswith("_") for part in module.split("."))
    ]
    assert offenders == []


def test_process_mode_is_reached_only_through_the_runtime_seam() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / "supervisor").rglob("*.py")
        if "workers" not in path.relative_to(ROOT / "supervisor").parts
        for module in sorted(_imported_modules(path))
        if module.startswith("supervisor.workers._")
    ]
    assert offenders == []
    host = (ROOT / "supervisor" / "host.py").read_text(encoding="utf-8")
    assert "_pool" not in host
    assert "WorkerRuntime" not in host  # the runtime is chosen in _runtimes
    assert "ThreadRuntime" not in host


def test_no_import_cycle() -> None:
    assert _cycle(_import_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["actors", "supervisor", "gateway", "cli"])
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
