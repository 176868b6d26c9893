"""A sweep verified (CHECKS; check.py on a sweep.json: `check_sweep`): sweep.json read once (`read_summary`), its
plan held against git before any cell is read (verify.plan.report), its summary recomputed from every cell's file, each
read once (`verify`), and their samples re-scored from the files as read (`sweep_samples`)."""

from __future__ import annotations

import json
from pathlib import Path

from gmts_recipe.records import ResultsError, current_record, digest, first_difference, numbers_close
from gmts_recipe.sweep import summary as sweep_summary
from gmts_recipe.sweep.grid import Grid, SweepError, load_grid
from gmts_recipe.verify.cell import Evaluation, check_apart, evaluations_of
from gmts_recipe.verify.file import samples_of
from gmts_recipe.verify.plan import report as plan_report, unsampled_plan
from gmts_recipe.verify.provenance import cell_origin


# What this level refuses (check.py --checks, docs/results.md's list of checks).
CHECKS = (
    "a sweep.json whose digest is not its own (its plan checked first: verify.plan); a failure record not the "
    "runner's",
    "a summary number other than the one recomputed from every cell, each read once (`verify`); a cell holding an arm "
    "its blocks do not run, or not the recipe of the test a sequential plan continues",
    "cells keeping samples some but not all, or whose samples do not re-score (`sweep_samples`); a look 0 that does "
    "not check as its own sweep does",
)


def read_summary(path: str | Path, summary: dict | None = None) -> dict:
    """A sweep.json as sweep.py wrote it (`summary`: as the caller read it, else read here): JSON whose digest is its
    own; one SweepError line otherwise."""
    p = Path(path)
    try:
        summary = json.loads(p.read_text(encoding="utf-8")) if summary is None else summary
    except (OSError, ValueError):
        raise SweepError(f"{p}: not a readable sweep summary (JSON)") from None
    if not isinstance(summary, dict) or summary.get("digest") != digest(summary):
        raise SweepError(f"{p}: digest mismatch: the file was edited after sweep.py wrote it")
    return summary


def read_sweep(path: Path, summary: dict | None = None) -> tuple[dict, Grid, tuple[Path, dict, Grid] | None]:
    """(sweep.json, its grid, and for the test a sequential sweep continues, where it has a sweep.json, that file's
    path, the file and its grid): each read once, for the plan's checks (verify.plan.report) and the cells'
    (`verify`)."""
    summary, grid = read_summary(path, summary), _grid(path)
    beside = continued_sweep(path, grid, must_exist=False)
    exists = beside is not None and beside.is_file()
    return summary, grid, (beside, read_summary(beside), _grid(beside)) if exists else None


def check_sweep(path: Path, sweep: dict | None = None, gsm8k_path: str | None = None, allow_unsampled: bool = False,
                gsm8k_pinned: bool = True, math_path: str | None = None) -> tuple[dict, list[str], dict]:
    """check.py on a sweep.json (`sweep`: as read, else read here): (summary, the plan's lines, the samples'
    report). The plan first (git, seconds): a plan that moved is refused before its cells are read, and
    --allow-unsampled on a planned sweep not pinned as made before samples; then `verify` on the cells, a sequential
    sweep's look 0 (the test it continues) checked in full, and `sweep_samples` on the cells as `verify` read them."""
    summary, grid, continued = read_sweep(path, sweep)
    loaded, first = {}, None
    planned = plan_report(path, summary, grid, continued)
    if allow_unsampled:  # a planned test's decision stands on re-scored samples
        unsampled_plan(path, summary)
    with sweep_summary.summaries_kept():  # the continued test's cells, read for look 0, are summarized once
        verify(path, loaded, summary, grid)
        if grid.sequential is not None and continued is None:
            continued_sweep(path, grid)  # refuses: the test it continues has no sweep.json
        if continued is not None:  # checked as check.py checks that sweep
            look0, cells = continued[0], {}
            done = verify(look0, cells, *continued[1:])
            first = {**sweep_samples(look0, done, cells, gsm8k_path, False, gsm8k_pinned, math_path), "path": look0,
                     "cells": len(done["cells"])}
        report = sweep_samples(path, summary, loaded, gsm8k_path, allow_unsampled, gsm8k_pinned, math_path)
    return summary, planned, report if first is None else {**report, "look0": first}


def _grid(path: Path) -> Grid:
    """The grid a sweep.json was made from (grid.yaml beside it), its results folder the sweep's."""
    if not (path.parent / "grid.yaml").is_file():
        raise SweepError(f"{path}: the grid it was made from ({path.parent / 'grid.yaml'}) is missing")
    grid = load_grid(path.parent / "grid.yaml")
    grid.results_dir = str(path.parent.parent)
    return grid


def look0_lines(report: dict) -> list[str]:
    """A sequential sweep's line on its first look, the test it continues, checked as check.py checks that sweep:
    its summary recomputed from its cells and their samples re-scored."""
    if "look0" not in report:
        return []
    look0 = report["look0"]
    return [f"Look 0 in full: {look0['path']} recomputed from its {look0['cells']} cells, {look0['samples']:,} samples "
            f"of their {look0['evaluations']} evaluations re-scored with the recipe's reward, every score as recorded."]


def verify(path: str | Path, loaded: dict | None = None, summary: dict | None = None, grid: Grid | None = None) -> dict:
    """Recompute a sweep.json from its grid and the cells' own results files, and hold each of its evaluations against
    every other cell of it and of the sweeps beside it (verify.cell.check_apart, `sweeps_beside`); raise SweepError on
    any difference. `loaded`: filled with each cell's results as verified (cell name -> results), for `sweep_samples`;
    `summary`, `grid`: the sweep.json and its grid where the caller read them already (each read once)."""
    p = Path(path)
    summary = read_summary(p) if summary is None else summary
    grid = _grid(p) if grid is None else grid
    index: list[Evaluation] = []
    summarized = sweep_summary.summarize(grid, index, continued=sweep_summary.continued_summary(grid), loaded=loaded)
    recomputed = sweep_summary.with_plan(summarized, summary.get("plan"))
    if not numbers_close(recomputed, summary):  # the plan itself: verify.plan.check
        raise SweepError(f"{p}: {first_difference(recomputed, summary, 'sweep')}")
    try:  # a refusal names this sweep's evaluation first; texts beside only where this sweep's can match them
        check_apart([*sweeps_beside(p, texts=any(ev.prints is not None for ev in index)), *index])
    except SweepError as e:
        raise SweepError(f"{p}: {e}") from None
    return summary


def continued_sweep(path: Path, grid: Grid, must_exist: bool = True) -> Path | None:
    """The sweep.json of the test a sequential sweep continues (its first look), in the same results folder; None for
    a sweep that continues none. check.py checks it in full beside the sequential sweep: look 0's cells are read from
    it, and their samples must re-score as any sweep's do (`must_exist`: refused where it has none)."""
    if grid.sequential is None:
        return None
    continued = path.parent.parent / load_grid(grid.path(grid.sequential["continues"])).name / "sweep.json"
    if must_exist and not continued.is_file():
        raise SweepError(f"{path}: the test it continues has no sweep.json ({continued}): look 0 is checked as that "
                         f"sweep (python sweep.py {grid.sequential['continues']} --summarize writes it)")
    return continued


def sweeps_beside(path: Path, texts: bool = True) -> list[Evaluation]:
    """The index of the other sweeps of a sweep's results folder (every <results_dir>/*/sweep.json but `path`; the
    repository's results/ holds every committed sweep): the evaluations of each cell its summary names, read from the
    cell's file as it is, without recomputing anything (each sweep's own check verifies its cells), with their texts'
    prints (verify.cell.text_prints) if `texts`. About 2 s of reading for the ~150 cells committed, and 15-30 s more for
    the texts of their ~270 samples files (decompressed and parsed: most of it), once in a process; a folder or file
    that is not a readable sweep is left out."""
    out: list[Evaluation] = []
    memo: dict = {}
    for other in sorted(path.parent.parent.glob("*/sweep.json")):
        if other.resolve() == path.resolve():
            continue
        try:
            cells = json.loads(other.read_text(encoding="utf-8")).get("cells") or []
        except (OSError, ValueError, AttributeError):
            continue
        for cell in cells:
            try:
                file = other.parent / cell["path"]
                results = current_record(json.loads(file.read_text(encoding="utf-8")), file.parent)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):  # ResultsError is a ValueError
                continue
            for folder in (file.parent if texts else None, None):  # a samples file that does not read: keys alone
                try:
                    out += evaluations_of(other.parent.name, str(cell["cell"]), results, memo, folder)
                    break
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    continue
    return out


def sweep_samples(path: Path, summary: dict, loaded: dict, gsm8k_path: str | None = None, allow_unsampled: bool = False,
                  gsm8k_pinned: bool = True, math_path: str | None = None) -> dict:
    """samples_of (held-out tasks, gold answers, samples) over every cell of a verified sweep.json, each cell's results
    as `verify` read them (`loaded`), the shared base evaluations re-scored once; the cells keep samples all or none."""
    from tqdm.auto import tqdm

    total: dict = {"evaluations": 0, "with_samples": 0, "samples": 0, "without": [], "dataset": None,
                   "no_dataset": None}
    done: dict = {}
    # a grid of 100 cells takes about a minute: a bar on a terminal (tqdm leaves pipes and logs alone)
    sampled: dict[bool, str] = {}
    for cell in tqdm(summary["cells"], desc="re-scoring samples", unit="cell", leave=False, disable=None):
        results_path, results = path.parent / cell["path"], loaded[cell["cell"]]
        sampled.setdefault("samples" in results["base"]["evals"][0], cell["cell"])
        if len(sampled) > 1:  # a cell stripped of its samples would pass for one of a format without them
            raise ResultsError(f"{path}: cell {sampled[False]} keeps no samples files where cell {sampled[True]} "
                               f"does: the cells of one sweep keep them all or none")
        report = samples_of(results_path, results, done, gsm8k_path, allow_unsampled, gsm8k_pinned, math_path)
        for key in ("evaluations", "with_samples", "samples"):
            total[key] += report[key]
        total["dataset"], total["no_dataset"] = report["dataset"], report["no_dataset"]
        total["without"] += [f"{cell['cell']} {where}" for where in report["without"]]
        total.setdefault("origins", []).append((results["config"]["seed"], cell_origin(results)))
    return total
