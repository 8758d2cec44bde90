"""The package layout's two rules, checked on the source: no import cycles between ackstate's
modules, and no module imports another module's private (``_``-prefixed) name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGES = ("engine", "udfs", "schemas", "jobs")


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) of every import statement, at any depth: an
    import inside a function is still a dependency."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            submodules = [
                f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules
            ]
            out += [(m, []) for m in submodules]
            names = [a.name for a in node.names if f"{node.module}.{a.name}" not in modules]
            if names and node.module in modules:
                out.append((node.module, names))
    return out


def test_no_import_cycles(repo_root: Path) -> None:
    modules = _modules(repo_root)
    graph = {name: {m for m, _ in _imports(path, modules) if m != name} for name, path in modules.items()}
    cycles = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_no_module_imports_a_private_name_of_another(repo_root: Path) -> None:
    modules = _modules(repo_root)
    tests = {
        ".".join(p.relative_to(repo_root).with_suffix("").parts): p
        for p in (repo_root / "tests").rglob("*.py")
    }
    offenders = [
        f"{name} imports {module}.{imported}"
        for name, path in {**modules, **tests}.items()
        for module, names in _imports(path, modules)
        for imported in names
        if imported.startswith("_") and not imported.startswith("__")
    ]
    assert offenders == []
