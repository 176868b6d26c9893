"""bench/ holds scripts, not a package: the tests load one by its path (module_name: its name in tracebacks)."""

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(script: str, module_name: str | None = None) -> ModuleType:
    """bench/<script>.py as a fresh module."""
    spec = importlib.util.spec_from_file_location(module_name or script, BENCH / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
