"""Cells sent from one machine to the plan's repository as one file: `--pack DIR` writes the cells this machine ran into
one archive with their samples and logs; `--merge ARCHIVE` unpacks it into a temporary folder, checks every cell
(gmts_recipe.verify.plan.incoming_problems: check.py's full check, the plan's settings, code, cards and claims) and
only then merges them with the folder merge (gmts_recipe.sweep.merge), which checks each against the local cells
again. A cell that fails refuses the whole archive, one line per such cell, and nothing is written.

What goes in: each cell of the sweep folder whose results.json is not committed as it stands (a cell this clone ran;
every cell where the folder lies in no repository) and that holds every arm the plan gives it (a seed of a sequential
plan runs whole: a cell cut short stays out, and runs again whole), with the samples files its evaluations name, the
base evaluations' samples where they are not committed, the cell's logs and its lines of logs/timing.jsonl (how long
and where it ran: gmts_recipe.sweep.pace reads them). `pack.json` beside them names the plan, who packed it (--who),
when, and the cells.
"""

from __future__ import annotations

import datetime
import io
import json
import shutil
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path

from gmts_recipe.records import ResultsError
from gmts_recipe.verify.file import load
from gmts_recipe.samples import evaluations, samples_path
from gmts_recipe.sweep.claims import check_who, seed_span, stamp
from gmts_recipe.sweep.grid import Cell, Grid, SweepError
from gmts_recipe.sweep.merge import merge
from gmts_recipe.verify.plan import record as plan_record
from gmts_recipe.verify.plan import incoming_problems, repository
from gmts_recipe.sweep.schedule import TIMING

MANIFEST = "pack.json"
KIND = "sweep cells"


def uncommitted(folder: Path) -> set[str] | None:
    """The paths under `folder` (relative to it) that differ from HEAD or are not committed; None where the folder
    lies in no repository (then every file counts as this machine's)."""
    root = repository(folder) if folder.is_dir() else None
    if root is None:
        return None
    rel = folder.resolve().relative_to(root.resolve()).as_posix()
    out = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "--ignored",
                          "--", rel], capture_output=True, text=True).stdout
    return {line[3:].strip('"').removeprefix(f"{rel}/") for line in out.splitlines() if line.strip()}


def cells_to_pack(grid: Grid) -> tuple[list[tuple[Cell, dict]], list[str]]:
    """(the cells this machine ran, whole, each with its results as verify.file.load gives them; a line per cell left
    out)."""
    folder = Path(grid.results_dir) / grid.name
    changed = uncommitted(folder)
    planned = grid.planned_arms()
    out, skipped = [], []
    for cell in grid.cells():
        path = folder / cell.name / "results.json"
        if not path.is_file() or (changed is not None and f"{cell.name}/results.json" not in changed):
            continue
        try:
            results = load(path)
        except ResultsError as e:
            skipped.append(f"{cell.name}: not packed, its file does not load ({e})")
            continue
        arms = list(results.get("arms", {}))
        if not arms or (grid.whole_seeds and set(arms) != set(planned[cell])):
            skipped.append(f"{cell.name}: not packed, it ran {', '.join(arms) or 'no arm'} of "
                           f"{', '.join(planned[cell])} (the next run runs it again whole)")
            continue
        out.append((cell, results))
    return out, skipped


def _files(folder: Path, cell: Cell, results: dict, changed: set[str] | None) -> list[Path]:
    """The cell's results file, the samples files it names (the shared base's only where not committed), its logs."""
    files = [folder / cell.name / "results.json"]
    for where, ev in evaluations(results):
        if "samples" in ev:
            path = samples_path(folder / cell.name, ev, where).resolve()
            rel = path.relative_to(folder.resolve()).as_posix()
            if rel.startswith(f"{cell.name}/") or changed is None or rel in changed:
                files.append(path)
    return [*files, *sorted((folder / "logs").glob(f"{cell.name}-*.log"))]


def pack(grid: Grid, grid_path: Path, out_dir: Path, who: str | None = None) -> tuple[Path | None, list[str]]:
    """Write the cells this machine ran into `out_dir`/<plan>-s<first>-s<last>[-<who>].tar.gz; (the archive, or None
    where there is no cell to send, and the lines to print)."""
    if who is not None:
        check_who(who)
    folder = Path(grid.results_dir) / grid.name
    cells, lines = cells_to_pack(grid)
    if not cells:
        return None, [*lines, f"no cell of {grid.name} in {folder} to send: every cell there is committed, or none "
                             f"has run whole"]
    changed = uncommitted(folder)
    names = {c.name for c, _ in cells}
    timing = [line for line in _lines(folder / "logs" / TIMING) if _cell_of(line) in names]
    seeds = [c.seed for c, _ in cells]
    manifest = {"kind": KIND, "plan": grid.name, "plan_file": plan_record(grid_path), "who": who,
                "packed": stamp(datetime.datetime.now(datetime.timezone.utc)), "host": socket.gethostname(),
                "cells": sorted(names), "seeds": seeds}
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{grid.name}-s{seeds[0]}-s{seeds[-1]}{f'-{who}' if who else ''}.tar.gz"
    tmp = target.with_name(f".{target.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
        added = set()  # the shared base's files, named by every cell, go in once
        for cell, results in cells:
            for path in _files(folder, cell, results, changed):
                name = f"{grid.name}/{path.resolve().relative_to(folder.resolve()).as_posix()}"
                if name not in added:
                    tar.add(path, name)
                    added.add(name)
        if timing:
            _add_bytes(tar, f"{grid.name}/logs/{TIMING}", "".join(line + "\n" for line in timing).encode())
    tmp.replace(target)
    return target, [*lines, f"{len(cells)} cell(s) of {grid.name} (seeds {seed_span(seeds)}) packed into {target}"]


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(datetime.datetime.now().timestamp())
    tar.addfile(info, io.BytesIO(data))


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


def _cell_of(line: str) -> str | None:
    try:
        return json.loads(line).get("cell")
    except (json.JSONDecodeError, AttributeError):
        return None


def unpack(archive: Path, into: Path, name: str) -> dict:
    """Extract an archive of `--pack` for the plan `name` into `into`; its manifest. Anything but plain files and
    folders under the plan's folder (a link, a path that climbs out, another plan's cells) refuses it whole."""
    where = f"--merge {archive}"
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for m in members:
                parts = Path(m.name).parts
                if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()) or \
                        not (m.name == MANIFEST or parts[0] == name):
                    raise SweepError(f"{where}: {m.name!r} is not a file of plan {name}'s cells: not an archive of "
                                     f"sweep.py {name} --pack, nothing merged")
            # the members are checked above; tarfile's own "data" filter too where this Python has it
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(into, members=members, **extra)
    except (tarfile.TarError, OSError) as e:
        raise SweepError(f"{where}: not a readable archive ({type(e).__name__}: {e})") from None
    try:
        manifest = json.loads((into / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SweepError(f"{where}: no {MANIFEST} in it: not an archive of sweep.py --pack") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND or manifest.get("plan") != name:
        raise SweepError(f"{where}: packed for plan {manifest.get('plan') if isinstance(manifest, dict) else None!r}, "
                         f"not {name}")
    return manifest


def merge_archive(grid: Grid, grid_path: Path, archive: Path, gsm8k_path: str | None = None,
                  now: datetime.datetime | None = None) -> list[str]:
    """Every cell of `archive` checked (verify.plan.incoming_problems), then merged (merge.merge); the lines to print.
    Any cell that fails refuses the archive whole: a SweepError with one line per such cell."""
    root = Path(grid.results_dir) / grid.name
    with tempfile.TemporaryDirectory(prefix="gmts-merge-") as tmp:
        manifest = unpack(archive, Path(tmp), grid.name)
        incoming = Path(tmp) / grid.name
        if not incoming.is_dir():
            raise SweepError(f"--merge {archive}: holds no cell of {grid.name}")
        _lend_base(root, incoming)
        failed, checked = incoming_problems(grid, grid_path, incoming, manifest.get("who"), gsm8k_path, now)
        if failed:
            raise SweepError(f"--merge {archive}: refused whole, nothing merged: {len(failed)} of {checked} cell(s) "
                             f"fail the checks:\n" + "\n".join(f"  {line}" for line in failed))
        lines = merge(grid, incoming)
    who = manifest.get("who") or "no name"
    return [f"{archive.name}: {checked} cell(s) packed by {who} on {manifest.get('packed')} ({manifest.get('host')}), "
            f"each verified (samples re-scored, the plan's settings, code, cards and claims)", *lines]


def _lend_base(root: Path, incoming: Path) -> None:
    """The local base evaluations' samples, where the archive has none of that name: each incoming cell is checked
    whole (its base re-scored too) with the files it will be merged beside."""
    for path in (root / "base-evals").glob("*.jsonl.xz"):
        target = incoming / "base-evals" / path.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
