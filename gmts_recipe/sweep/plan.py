"""A sweep's plan, held against git: the grid file a sweep.json was made from must be the committed plan, its decision
rules (primary, secondary, sequential) never changed once a cell of the sweep was committed, and every planned cell
present or named as missing.

sweep.py records the plan beside the summary (`record`: the grid file's path in the repository, its SHA-256 and the
commit it was last changed in); check.py (`check`) compares the sweep folder's grid.yaml with that record and, where the
repository is at hand, with git: the file at HEAD and at the recorded commit, and the history of its decision rules
against the commits that added the sweep's cells. Without a repository only the SHA-256 can be compared, and
check.py says so. A summary that records no plan names its plan by convention
(configs/sweeps/<name>.yaml) and is held against git the same way.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import yaml

from gmts_recipe.sweep.grid import SweepError

RULES = ("primary", "secondary", "sequential")  # the keys whose content decides; blocks only say what runs


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def repository(path: Path) -> Path | None:
    """The top of the git work tree holding `path`, or None where there is none (or no git)."""
    try:
        out = _git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel")
    except OSError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record(grid_path: str | Path) -> dict:
    """What sweep.json records of the plan it was made from: the grid file's path (relative to its repository where
    there is one), the SHA-256 of its text, and the commit that last changed it where the file is committed as it
    stands (None otherwise: an uncommitted plan is recorded as such, and check.py reports it)."""
    p = Path(grid_path).resolve()
    text = p.read_text(encoding="utf-8")
    root = repository(p)
    commit = None
    if root is not None:
        rel = p.relative_to(root).as_posix()
        last = _git(root, "log", "-1", "--format=%H", "--", rel).stdout.strip()
        if last and _git(root, "show", f"{last}:{rel}").stdout == text:
            commit = last
        return {"file": rel, "sha256": sha256(text), "commit": commit}
    return {"file": str(grid_path), "sha256": sha256(text), "commit": None}


def _rules(text: str) -> dict:
    raw = yaml.safe_load(text) or {}
    return {k: raw.get(k) for k in RULES} if isinstance(raw, dict) else {}


def _first_cell_commit(root: Path, folder: str) -> str | None:
    """The oldest commit that added a results.json of a cell in `folder` (relative to the repository)."""
    log = _git(root, "log", "--diff-filter=A", "--format=%H", "--", f"{folder}/*/results.json").stdout.split()
    return log[-1] if log else None


def _rule_history(root: Path, rel: str, first_cell: str) -> tuple[list[str], list[str]]:
    """How the decision rules of the plan file `rel` moved once a cell was committed (the first cell commit an ancestor
    of the change): the changes, each one line naming the commit and the rule (refused), and the rules added then (the
    plan's own fixed_on says when; reported)."""
    commits = _git(root, "log", "--reverse", "--format=%H", "--", rel).stdout.split()
    changed, added, before = [], [], None
    for sha in commits:
        rules = _rules(_git(root, "show", f"{sha}:{rel}").stdout)
        if before is not None and _git(root, "merge-base", "--is-ancestor", first_cell, sha).returncode == 0:
            for k in RULES:
                if before.get(k) is not None and rules.get(k) != before.get(k):
                    changed.append(f"{sha[:10]} changed its {k} after the sweep's first cell ({first_cell[:10]})")
                elif before.get(k) is None and rules.get(k) is not None:
                    added.append(k)
        before = rules
    return changed, added


def check(sweep_path: Path, summary: dict) -> list[str]:
    """The sweep's plan against its record and git; raises SweepError on a mismatch, returns the lines to print."""
    folder = sweep_path.parent
    grid_text = (folder / "grid.yaml").read_text(encoding="utf-8")
    claimed = summary.get("plan") or {"file": f"configs/sweeps/{summary['name']}.yaml", "sha256": None,
                                      "commit": None}
    where = f"{sweep_path}: plan {claimed['file']}"
    if claimed["sha256"] is not None and claimed["sha256"] != sha256(grid_text):
        raise SweepError(f"{where}: grid.yaml is not the plan the summary records (SHA-256 differs)")
    root = repository(folder)
    if root is None:
        return [f"Plan: {claimed['file']}, not compared with git (no repository at hand)"
                + ("; grid.yaml matches the SHA-256 the summary records." if claimed["sha256"] else ".")]
    rel = claimed["file"]
    at_head = _git(root, "show", f"HEAD:{rel}")
    if at_head.returncode != 0:
        raise SweepError(f"{where}: not committed in this repository")
    if at_head.stdout != grid_text:
        raise SweepError(f"{where}: grid.yaml differs from the committed plan (git show HEAD:{rel})")
    if claimed["commit"] is not None and _git(root, "show", f"{claimed['commit']}:{rel}").stdout != grid_text:
        raise SweepError(f"{where}: grid.yaml differs from the plan at the commit the summary records "
                         f"({claimed['commit'][:10]})")
    last = _git(root, "log", "-1", "--format=%h %cd", "--date=format:%Y-%m-%d %H:%M", "--", rel).stdout.strip()
    try:
        cells = folder.resolve().relative_to(root).as_posix()
    except ValueError:  # the sweep folder lies outside the plan's repository
        return [f"Plan: {rel} as committed (last changed {last}); its cells are outside the repository."]
    first = _first_cell_commit(root, cells)
    if first is None:
        return [f"Plan: {rel} as committed (last changed {last}); no cell of it is committed yet."]
    changed, added = _rule_history(root, rel, first)
    if changed:
        raise SweepError(f"{where}: {changed[0]}")
    order = ("before" if _git(root, "merge-base", "--is-ancestor", last.split()[0], first).returncode == 0
             else "after")
    rules = (f"its {' and '.join(added)} added after that cell (the plan's fixed_on says when), unchanged since"
             if added else "its decision rules unchanged since that cell")
    return [f"Plan: {rel} as committed (last changed {last}, {order} the first of its cells was committed, "
            f"{first[:10]}); {rules}."]


def missing_cells(summary: dict, planned: list[str]) -> list[str]:
    """The planned cells (names, in the grid's order) the summary does not hold."""
    have = {c["cell"] for c in summary["cells"]}
    return [name for name in planned if name not in have]


def stray_cells(folder: Path, planned: list[str]) -> list[str]:
    """Cell folders with a results.json that the plan does not list: a cell dropped from the grid is named, never
    silently left out."""
    return sorted(p.parent.name for p in folder.glob("*/results.json") if p.parent.name not in set(planned))


def report(sweep_path: Path, summary: dict) -> list[str]:
    """check.py's lines on a verified sweep's plan: `check`, then the planned cells that have not run (named, never
    silently left out) and a refusal for a cell folder the plan does not list."""
    from gmts_recipe.sweep.grid import load_grid

    lines = check(sweep_path, summary)
    planned = [cell.name for cell in load_grid(sweep_path.parent / "grid.yaml").cells()]
    stray = stray_cells(sweep_path.parent, planned)
    if stray:
        raise SweepError(f"{sweep_path}: cell folder(s) the plan does not list: {', '.join(stray[:5])}")
    missing = missing_cells(summary, planned)
    lines.append(f"Planned cells: {len(planned) - len(missing)} of {len(planned)} have a results file"
                 + (f"; not yet: {', '.join(missing[:3])}" + (f" and {len(missing) - 3} more." if len(missing) > 3
                                                             else ".") if missing else "."))
    return lines
