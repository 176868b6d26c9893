"""The product's import graph, read from the source (ast, imports inside functions included): no module imports
itself back through others, and the package imports none of the scripts. A circle makes the import order decide
which names exist when a module runs, and a package that imports a script cannot be installed without it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gmts_recipe"
SCRIPTS = {"recipe", "check", "sweep", "update_readme"}  # commands in the clone, not installed with the package


def product_modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file: the top-level *.py and every module of the package."""
    modules = {p.stem: p for p in root.glob("*.py")}
    for p in (root / PACKAGE).rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return modules


def _package_of(name: str, path: Path) -> str:
    """The package a module's relative imports start from: itself for an __init__, else its parent."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules `name` imports anywhere in its file. Importing a.b.c runs a and a.b first, so those count
    too, except the packages that hold `name` itself (Python has them in sys.modules before their submodules run)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(name, path).split(".")
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
        else:
            continue
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix != name and not name.startswith(prefix + "."):
                    found.add(prefix)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = product_modules(root)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_product_has_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_package_imports_no_script():
    graph = import_graph()
    found = sorted(f"{m} imports {s}" for m, targets in graph.items() if m.split(".")[0] == PACKAGE
                   for s in targets & SCRIPTS)
    assert not found, "; ".join(found)


def test_the_graph_sees_circles_and_relative_imports(tmp_path):
    """The reader itself: a circle through a function-level import, a relative import and a package's __init__."""
    (tmp_path / PACKAGE / "sub").mkdir(parents=True)
    (tmp_path / "script.py").write_text("def main():\n    from gmts_recipe.sub import leaf\n")
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "sub" / "__init__.py").write_text("from . import leaf\n")
    (tmp_path / PACKAGE / "sub" / "leaf.py").write_text("from ..other import x\n")
    (tmp_path / PACKAGE / "other.py").write_text("def f():\n    import script\n")
    graph = import_graph(tmp_path)
    assert graph["script"] == {PACKAGE, f"{PACKAGE}.sub", f"{PACKAGE}.sub.leaf"}
    assert graph[f"{PACKAGE}.sub"] == {f"{PACKAGE}.sub.leaf"}  # its own package is not an import of its own
    assert graph[f"{PACKAGE}.sub.leaf"] == {f"{PACKAGE}.other"}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and "script" in cycle and f"{PACKAGE}.other" in cycle
    (tmp_path / PACKAGE / "other.py").write_text("x = 1\n")
    assert find_cycle(import_graph(tmp_path)) is None
