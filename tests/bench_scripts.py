"""bench/ holds scripts, not a package: the tests load one by its path (module_name: its name in tracebacks)."""

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(script: str, module_name: str | None = None) -> ModuleType:
    """bench/<script>.py as a fresh module."""
    spec = importlib.util.spec_from_file_location(module_name or script, BENCH / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_refuses_bad_json_files(main: Callable[[list[str]], int], option: str, folder: Path, capsys) -> None:
    """`main([option, FILE])` for a missing and a broken JSON file: each is argparse's own one-line refusal (exit 2)
    naming the file and what is wrong with it, as records.json_file words it."""
    for name, text, said in (("missing.json", None, "no such file"), ("broken.json", "[", "not valid JSON")):
        if text is not None:
            (folder / name).write_text(text)
        with pytest.raises(SystemExit) as exit_:
            main([option, str(folder / name)])
        assert exit_.value.code == 2 and f"argument {option}: {folder / name}: {said}" in capsys.readouterr().err
