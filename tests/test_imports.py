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


# ---------------------------------------------------------------- what importing the method loads
# The modules `import gmts_trainer` may load: the method and what it is built from, nothing of the speed options.
METHOD_MODULES = {"gmts_trainer", "selection", "gmts_recipe", "gmts_recipe.config",
                  "gmts_recipe.grad_hooks", "gmts_recipe.value_checks"}
SPEED_MODULES = {"gmts_recipe.speed_options", "gmts_recipe.fast_config", "gmts_recipe.fast_trainer",
                 "gmts_recipe.training_speed", "gmts_recipe.determinism", "gmts_recipe.generation"}


def loaded_modules(statement: str) -> dict[str, Path]:
    """The repository's modules a fresh Python process holds after `statement` (name -> file)."""
    import json
    import subprocess
    import sys

    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r})\n{statement}\n"
            "print(json.dumps({n: getattr(m, '__file__', None) for n, m in list(sys.modules.items())}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return {n: Path(f) for n, f in found.items() if f and Path(f).is_absolute() and Path(f).is_relative_to(ROOT)}


def test_importing_the_method_loads_the_method_alone():
    """`import gmts_trainer` (the README's `from gmts_trainer import GMTSConfig, GMTSTrainer`) loads six files of this
    repository, none of the speed options nor the recipe's own checks (field_types.py: a config file's values): the
    method reads in one sitting, within the 1,216 lines it held before the recipe's checks grew into its imports."""
    loaded = loaded_modules("from gmts_trainer import GMTSConfig, GMTSTrainer")
    assert set(loaded) == METHOD_MODULES and len(loaded) == 6
    assert not {m for m in loaded for s in SPEED_MODULES if m == s or m.startswith(s + ".")}
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in loaded.values())
    assert lines <= 1216, f"the method's {len(loaded)} files hold {lines} lines"


def test_the_method_file_lists_each_override_and_stays_short():
    """gmts_trainer.py: every TRL method GMTSTrainer overrides is named in its docstring's list, and the file reads
    in one sitting (as TRL's experimental trainers do)."""
    import inspect

    from trl import GRPOTrainer

    from gmts_trainer import GMTSTrainer

    overrides = [name for name in vars(GMTSTrainer) if callable(getattr(GRPOTrainer, name, None))]
    assert sorted(overrides) == sorted(["__init__", "_generate_and_score_completions", "get_high_entropy_mask",
                                        "_compute_loss", "_get_per_token_logps_and_entropies", "log"])
    doc = inspect.getdoc(GMTSTrainer)
    for name in overrides:
        assert f"`{name}`" in doc, name
    assert len((ROOT / "gmts_trainer.py").read_text(encoding="utf-8").splitlines()) <= 260


# ---------------------------------------------------------------- layering
def private_crossings(root: Path = ROOT) -> list[str]:
    """Where a product module or a bench script imports another module's private name (a leading underscore), or
    reads one as an attribute of an imported module."""
    modules = product_modules(root)
    files = {**modules, **{f"bench.{p.stem}": p for p in (root / "bench").glob("*.py")}}
    found = []
    for name, path in sorted(files.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = _package_of(name, path).split(".")
                    base = ".".join([*package[: len(package) - (node.level - 1)], *([base] if base else [])])
                if base not in modules:
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{name}: from {base} import {alias.name}")
                    if f"{base}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        aliases[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_modules():
    """A name with a leading underscore is its module's own: shared names are public."""
    found = private_crossings()
    assert not found, "; ".join(found)


def test_the_check_finds_a_private_name_imported_across_modules(tmp_path):
    (tmp_path / PACKAGE).mkdir()
    (tmp_path / PACKAGE / "__init__.py").write_text("")
    (tmp_path / PACKAGE / "a.py").write_text("def _scale():\n    pass\n\n\ndef _own():\n    _scale()\n")
    (tmp_path / "script.py").write_text("from gmts_recipe.a import _scale\nfrom gmts_recipe import a\na._scale()\n")
    assert private_crossings(tmp_path) == ["script: from gmts_recipe.a import _scale", "script: gmts_recipe.a._scale"]


def test_check_py_defines_and_imports_only_names_it_uses():
    """check.py is a command, not a façade: every name it imports or defines at module level is used in it (a caller
    imports a name from the module that defines it)."""
    tree = ast.parse((ROOT / "check.py").read_text(encoding="utf-8"))
    bound = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
            bound.update({(a.asname or a.name).split(".")[0]: node.lineno for a in node.names})
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound[node.name] = node.lineno
        elif isinstance(node, ast.Assign):
            bound.update({t.id: node.lineno for t in node.targets if isinstance(t, ast.Name)})
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unused = sorted(name for name in bound if name not in used and name != "main")
    assert not unused, f"check.py binds names it does not use: {', '.join(unused)}"


def test_recipe_config_reads_the_configs_without_the_trainer():
    """recipe_config (the recipe's parser) imports the config classes from the package, never gmts_trainer."""
    assert "gmts_trainer" not in import_graph()["gmts_recipe.recipe_config"]


def test_the_package_docstring_holds():
    """gmts_recipe/__init__.py says what the package imports and what not: it names every module, imports nothing
    itself, fast_trainer is its one module that imports gmts_trainer, and check.py, recipe_config and speed_options
    load without torch."""
    init = ROOT / PACKAGE / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)  # the docstring, nothing else
    doc = " ".join(ast.get_docstring(tree).split())
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT / PACKAGE).parts
        if path.name != "__init__.py":
            assert (parts[0] + "/" if len(parts) > 1 else path.name) in doc, path
    graph = import_graph()
    assert {m for m, targets in graph.items() if m.startswith(PACKAGE) and "gmts_trainer" in targets} == {
        f"{PACKAGE}.fast_trainer"}
    assert not {m for m, targets in graph.items() if m.startswith(PACKAGE) and "eval" in targets}
    for statement in ("import check", "import gmts_recipe.recipe_config", "import gmts_recipe.speed_options"):
        assert not _loads_torch(statement), statement


def _loads_torch(statement: str) -> bool:
    import subprocess
    import sys

    code = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{statement}\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return out.stdout.strip().splitlines()[-1] == "True"
