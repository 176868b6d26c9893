"""The product's docstrings and comments say what the code does and why; measurements (timings, speed-ups, dates of
runs, the GPU they ran on) live in bench/README.md and results/LOG.md, where they can be read beside their results
files and updated in one place. And no product function grows past what a reader takes in at once."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = sorted([*ROOT.glob("*.py"), *ROOT.glob("gmts_recipe/**/*.py")])

# a quantity of time or a speed-up, as a measurement quotes it ("3.98 ms", "20-45 s", "7.27 GPU-minutes", "1.13x")
TIMING = re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:ms|us|µs|s|min|seconds|minutes|GPU-min(?:utes)?)\b"
                    r"|\b\d+(?:\.\d+)?x\b")
# words that make such a quantity a measurement: how it was taken, on what, that it was
MEASURED = re.compile(r"\bmeasured\b|\btook\b|\btimed\b|\bH[12]00s?\b|\bon an? (?:GPU|CPU)\b|\bwall\b|\bfaster\b"
                      r"|\bslower\b|\bcost\b", re.IGNORECASE)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")  # a run's date: history, results/LOG.md's
# A unit that is part of what the code does (a timeout, a checkpoint interval, "every few minutes") comes with none of
# these words, so it needs no allow-list entry.
LONGEST = 80  # lines of a function, its docstring included
LONG_ALLOWED: set[tuple[str, str]] = set()  # (file, function) pairs over the limit, each with its reason; none now


def passages(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every docstring paragraph and every run of consecutive comment lines of a module: a
    measurement is one passage, its number and its "measured on" often on different lines."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                first = node.body[0].lineno
                offset = 0
                for paragraph in re.split(r"\n\s*\n", doc):
                    found.append((first + offset, " ".join(paragraph.split())))
                    offset += paragraph.count("\n") + 2
    run: list[str] = []
    start = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        if run and tok.start[0] == last + 1:
            run.append(tok.string.lstrip("# "))
        else:
            if run:
                found.append((start, " ".join(run)))
            run, start = [tok.string.lstrip("# ")], tok.start[0]
        last = tok.start[0]
    if run:
        found.append((start, " ".join(run)))
    return found


def quoted_measurements(path: Path) -> list[str]:
    name = path.relative_to(ROOT).as_posix()
    bad = []
    for line, text in passages(path):
        if (TIMING.search(text) and MEASURED.search(text)) or DATE.search(text):
            bad.append(f"{name}:{line}: {text[:160]}")
    return bad


def test_no_measurements_in_docstrings_or_comments():
    found = [hit for path in PRODUCT for hit in quoted_measurements(path)]
    assert not found, "move these to bench/README.md or results/LOG.md and point there:\n" + "\n".join(found)


def test_the_check_finds_a_quoted_timing(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    module = tmp_path / "module.py"
    module.write_text('"""Decoding.\n\nAt 64 rows on an H200, 5.1 ms of wall time per token step."""\n\n'
                      'def f():\n    """Fast."""\n    # measured: the step took\n    # 3.98 ms\n    return 1\n\n'
                      'def g():\n    """Run on 2026-12-01."""\n\n'
                      'def h():\n    """Waits 30 s for the lock; a 2x wider buffer."""  # 10 ms between polls\n')
    found = [hit.split(": ", 1)[0] for hit in quoted_measurements(module)]
    assert found == ["module.py:3", "module.py:12", "module.py:7"]


def function_lengths(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_product_function_over_80_lines():
    long = [f"{path.relative_to(ROOT).as_posix()}: {name} ({lines} lines)" for path in PRODUCT
            for name, lines in function_lengths(path)
            if lines > LONGEST and (path.relative_to(ROOT).as_posix(), name) not in LONG_ALLOWED]
    assert not long, f"split these into named functions (at most {LONGEST} lines each):\n" + "\n".join(long)


def test_the_length_check_counts_a_long_function(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 85 + "    return x\n")
    assert function_lengths(module) == [("short", 2), ("long", 87)]
