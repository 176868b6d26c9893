"""--merge: cells that another machine ran brought into this tree, each checked before anything is written, with the
shared base evaluations they were paired with there where this tree lacks them (`offered_caches`)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gmts_recipe.records import ResultsError, write_results
from gmts_recipe.samples import evaluations, samples_path
from gmts_recipe.sweep.grid import Cell, Grid, SweepError
from gmts_recipe.sweep.schedule import TIMING
from gmts_recipe.verify.cell import base_record, check_together, paired_base, read_base_record, recorded, same_base
from gmts_recipe.verify.file import check_samples, load, read_results, seal


@dataclass
class Merge:
    """What merging one incoming cell does: the sealed file to write (None: the cell is unchanged), the incoming logs
    that are new here (absent, or a local log of that name that does not hold their text yet), and the line."""

    cell: Cell
    results: dict | None
    logs: list[Path]
    line: str
    samples: list[tuple[Path, Path]] = field(default_factory=list)  # (incoming file, where it goes here)
    timing: list[str] = field(default_factory=list)  # the incoming cell's lines of logs/timing.jsonl new here
    cache: list[tuple[Path, Path]] = field(default_factory=list)  # the incoming base-evals record it brings in


def plan_merge(grid: Grid, incoming: Path) -> list[Merge]:
    """Every cell of the grid that `incoming` (another tree's sweep folder) holds, checked against this tree before
    anything is written: one refusal (a SweepError naming cell and reason) and no cell is merged."""
    if not incoming.is_dir():
        raise SweepError(f"--merge {incoming}: no such folder (give another tree's sweep folder, e.g. results/qwen)")
    root = Path(grid.results_dir) / grid.name
    caches = {p.stem: read_base_record(p) for p in (root / "base-evals").glob("*.json")}
    offered = offered_caches(incoming, root, caches)
    planned = grid.planned_arms()
    plans = [_merge_cell(cell, incoming, root, caches, planned[cell] if grid.whole_seeds else None, offered)
             for cell in grid.cells() if (incoming / cell.name / "results.json").is_file()]
    merged = {m.cell: m.results for m in plans if m.results is not None}
    try:  # the tree as it would be: every cell's file, merged or local (summarize verifies the local ones)
        tree = {cell: merged[cell] if cell in merged else read_results(root / cell.name / "results.json")
                for cell in grid.cells() if cell in merged or (root / cell.name / "results.json").is_file()}
        check_together([recorded(cell, results, grid.name) for cell, results in tree.items()])
        same_base(tree, {m.cell for m in plans if m.cache})
    except (SweepError, ResultsError) as e:
        raise SweepError(f"--merge: {e}") from None
    return plans


def offered_caches(incoming: Path, root: Path, caches: dict[str, dict]) -> dict[str, tuple[Path, dict]]:
    """The base-evals records of `incoming` (recipe.py's base-evals/<eval hash>.json) that this tree lacks, each
    verified as any base evaluation's record (verify.cell.base_record). The samples files they name are re-scored where
    a merged cell names them (_merge_samples), and a record comes in only with a cell merged on it. A record under a
    hash this tree holds is this tree's: with the same settings it is passed over, whatever its evaluations (the base
    evaluated again there, as bf16 is not bit-exact: its cells pair with this tree's, _merge_cell); with others, the
    merge is refused."""
    out = {}
    for path in sorted((incoming / "base-evals").glob("*.json")):
        local = root / "base-evals" / path.name
        if local.is_file() and local.resolve() == path.resolve():
            continue  # a staging folder's link to this tree's own (ray_tasks)
        cache = base_record(path, caches.get(path.stem), local)
        if cache is not None:
            out[path.stem] = (path, cache)
    return out


def _merge_cell(cell: Cell, incoming: Path, root: Path, caches: dict[str, dict], whole: list[str] | None = None,
                offered: dict[str, tuple[Path, dict]] | None = None) -> Merge:
    """One cell: the incoming arms added to the local ones, paired with this tree's base evaluation. The shared
    cache is the base every local cell carries, so it wins; an incoming base computed again elsewhere (bf16 differs
    run to run) is replaced, and its pass@1 recorded in the file's `merges`. The arms never read the base (recipe.py
    trains after, and independently of, the base evaluation), so this is the cell the sweep would have written had
    the cache travelled. `whole`: the cell's arms where it runs whole (Grid.whole_seeds): a cell that ran only some of
    them is left out, to run again whole. `offered`: the incoming tree's verified base-evals records this tree lacks
    (offered_caches): a cell whose hash is one of them is paired with it as with a local one, and brings it in."""
    def refuse(reason: str) -> SweepError:  # one line, and the way to bring in the other cells
        return SweepError(f"--merge: {cell.name}: {reason}; nothing merged (to merge the other cells, move "
                          f"{incoming / cell.name} out of {incoming})")

    local_path = root / cell.name / "results.json"
    try:
        new = load(incoming / cell.name / "results.json")  # both of any format, as this one holds them
        old = load(local_path) if local_path.is_file() else None
    except ResultsError as e:
        raise refuse(str(e)) from None
    try:
        recorded(cell, new)  # the incoming file is this cell: its seed, variant and every arm's learning rate
    except SweepError as e:
        raise SweepError(f"--merge: {e}") from None
    key = new["base"]["eval_hash"]
    kept, source, brought = paired_base(new, old, key, caches, offered, root, incoming, refuse)
    arms = dict(old["arms"]) if old is not None else {}
    for arm, entry in new["arms"].items():
        if arm in arms and arms[arm] != entry:
            raise refuse(f"arm {arm} differs from the local one")
    added = [arm for arm in new["arms"] if arm not in arms]
    logs = [p for p in sorted((incoming / "logs").glob(f"{cell.name}-*.log")) if _log_is_new(p, root / "logs" / p.name)]
    appended = sum((root / "logs" / p.name).exists() for p in logs)
    copied = "".join(f"; {n} log(s) {how}" for n, how in ((len(logs) - appended, "copied"), (appended, "appended")) if n)
    if not new["arms"]:  # a cell process stopped before its first arm ended: its results file holds the base only
        return Merge(cell, None, logs, f"{cell.name}: no finished arm there (a run stopped before its first arm "
                                       f"ended), nothing merged{copied}")
    if whole is not None and set(new["arms"]) != set(whole):
        return Merge(cell, None, [], f"{cell.name}: ran in part ({', '.join(new['arms'])} of {', '.join(whole)}): a "
                                     f"seed of this plan runs whole, on one card; nothing merged (the next run runs it "
                                     f"again whole)")
    if not added:
        return Merge(cell, None, logs, f"{cell.name}: unchanged{copied}")
    replaced = new["base"]["evals"] != kept
    entry = {"arms": added, "incoming_digest": new["digest"], "versions": new.get("versions"), "base": source}
    if replaced:
        entry["replaced_base_pass@1"] = [ev["pass@1"] for ev in new["base"]["evals"]]
    merged = {k: v for k, v in (old or new).items() if k not in ("summary", "digest")}
    merged.update(arms={**arms, **{arm: new["arms"][arm] for arm in added}}, base={"evals": kept, "eval_hash": key},
                  merges=[*merged.get("merges", []), entry])
    try:
        seal(merged)
    except ResultsError as e:
        raise refuse(f"the merged cell does not verify: {e}") from None
    samples = _merge_samples(merged, incoming / cell.name, root / cell.name, refuse)
    timing = _timing_lines(incoming / "logs" / TIMING, cell, root / "logs" / TIMING)
    if timing:
        copied += f"; {len(timing)} timing line(s)"
    named = f" {key[:12]}" if brought is not None else ""  # brought in with the cell (merge: after its samples)
    base = (f"base replaced by the {source}{named} (incoming pass@1 "
            f"{', '.join(f'{p:.4f}' for p in entry['replaced_base_pass@1'])})" if replaced else
            f"base kept ({source}{named})")
    return Merge(cell, merged, logs, f"{cell.name}: added arm(s) {', '.join(added)}; {base}{copied}", samples, timing,
                 [(brought[0], root / "base-evals" / brought[0].name)] if brought is not None else [])


def _timing_lines(incoming: Path, cell: Cell, local: Path) -> list[str]:
    """The incoming lines of logs/timing.jsonl about `cell` that the local file does not hold yet: a merged cell keeps
    the record of how long its processes ran, and where (`recorded_pace` reads it)."""
    try:
        lines = incoming.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    have = set(local.read_text(encoding="utf-8").splitlines()) if local.is_file() else set()
    out = []
    for line in lines:
        try:
            ours = json.loads(line).get("cell") == cell.name
        except (json.JSONDecodeError, AttributeError):
            continue
        if ours and line not in have and line not in out:
            out.append(line)
    return out


def _merge_samples(merged: dict, incoming: Path, local: Path, refuse) -> list[tuple[Path, Path]]:
    """The samples files the merged cell names (samples.samples_path: the arms' in the cell's folder, the base's in the
    shared base-evals folder), each verified (SHA-256, records, re-scored: verify.file.check_samples) where it will be
    read: here if a file of that name is here, else in the incoming tree, from which it is to be copied. A merged cell
    keeps verifiable samples; a file here with other bytes is refused, never overwritten."""
    copies = []
    for where, ev in evaluations(merged):
        if "samples" not in ev:
            continue
        try:
            here, there = (Path(os.path.normpath(samples_path(folder, ev, where))) for folder in (local, incoming))
            check_samples(here if here.is_file() else there, ev, where)
        except ResultsError as e:
            raise refuse(str(e)) from None
        if not here.is_file():
            copies.append((there, here))
    return copies


def merge(grid: Grid, incoming: Path) -> list[str]:
    """Bring the cells of `incoming` into this tree (plan_merge: all checked first), write each merged cell's
    results file (no figures: a sweep's cells carry none), bring in their logs (a same-named local log keeps its text
    and gets the incoming one appended, as a resumed local sweep appends; only its rest where the local log ends with
    its beginning: `_continued`), and return one line per cell. Never overwrites a log, never writes the sweep's summary (--summarize does); merging
    the same folder again changes nothing."""
    plans = plan_merge(grid, incoming)
    root = Path(grid.results_dir) / grid.name
    for m in plans:
        for source, target in m.samples:  # before the results file that names them
            copy_atomic(source, target)
        for source, target in m.cache:  # after its samples (recipe.py reuses a record it finds), once
            if not target.exists():
                copy_atomic(source, target)
        if m.results is not None:
            (root / m.cell.name).mkdir(parents=True, exist_ok=True)
            # atomic: the cell is the old or the new one; in this format (no per-task records beside samples files)
            # and without figures (python -m gmts_recipe.plots CELL_DIR draws them)
            write_results(root / m.cell.name / "results.json", m.results)
        if m.timing:  # after the results file: a line never describes a cell that is not here
            (root / "logs").mkdir(parents=True, exist_ok=True)
            with open(root / "logs" / TIMING, "a", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in m.timing))
        for log in m.logs:
            target = root / "logs" / log.name
            if target.exists():  # as a resumed local sweep does: the new run's log after the old one, nothing lost
                text = log.read_text(encoding="utf-8", errors="replace")
                rest = _continued(text, target.read_text(encoding="utf-8", errors="replace"))
                with open(target, "a", encoding="utf-8") as out:
                    out.write(rest if rest is not None else f"\n[sweep] merged from {incoming}:\n" + text)
            else:
                copy_atomic(log, target)
    return [m.line for m in plans] or [f"no cell of {grid.name} in {incoming}"]


def _continued(incoming: str, local: str) -> str | None:
    """What an incoming log adds when the local one ends with its beginning (the same process's log, merged once while
    it was still being written, then again whole): the rest, to append as is; None for another process's log."""
    marks = re.finditer(r"\n\[sweep\] merged from .*:\n", local)
    for merged_last in (local, *(local[m.end():] for m in marks)):  # the longest first
        if merged_last and incoming.startswith(merged_last):
            return incoming[len(merged_last):]
    return None


def _log_is_new(incoming: Path, local: Path) -> bool:
    """An incoming log is brought in unless the local log of that name already holds its text (merged before)."""
    if not local.exists():
        return True
    text = incoming.read_text(encoding="utf-8", errors="replace")
    return bool(text) and text not in local.read_text(encoding="utf-8", errors="replace")


def copy_atomic(source: Path, target: Path) -> None:
    """Copy through a temporary name renamed over the target: an interrupted copy never leaves a file that looks
    whole (a truncated samples file of the right name would be refused at the next merge)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.copy2(source, tmp)
    os.replace(tmp, target)
