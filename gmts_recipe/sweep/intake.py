"""What a cell from another machine must show before it enters the plan: check.py's full check of the file (digest,
records, samples re-scored against the gold answers), the cell it claims to be (seed, variant settings, learning
rates, every planned arm), the plan's pinned settings (its config record is the one the plan's config gives that cell,
as recipe.py records it on the card it ran on), each arm's code (its recorded digest matched to a commit of the plan's
history: from the commit that added the plan to HEAD), the plan's cards (on one card the plan names, both arms), and
the seed claims (no cell of a seed that someone else's claim holds). `problems` gives one line per cell that fails,
every reason of that cell in it; gmts_recipe.sweep.archive refuses a whole archive on any.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gmts_recipe.code_digest import code_commit, commit_with_code
from gmts_recipe.records import ResultsError, config_hash
from gmts_recipe.sequential.cards import recorded_cards
from gmts_recipe.sweep.claims import Claim, foreign, read_claims, stamp
from gmts_recipe.sweep.grid import Cell, Grid, SweepError
from gmts_recipe.verify.cell import recorded
from gmts_recipe.verify.file import verify
from gmts_recipe.verify.plan import card_problem, repository

SKIPPED = ("logs", "base-evals", "claims")  # folders of a sweep folder that are not cells


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


@dataclass
class PlanHistory:
    """The repository that holds the plan, the commit that added it, and which commits lie between it and HEAD."""

    root: Path | None
    first: str | None
    why: str = ""
    _holds: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, grid_path: Path) -> PlanHistory:
        root = repository(grid_path)
        if root is None:
            return cls(None, None, f"the plan {grid_path} lies in no git repository here")
        rel = grid_path.resolve().relative_to(root.resolve()).as_posix()
        added = _git(root, "log", "--diff-filter=A", "--format=%H", "--", rel).stdout.split()
        if not added:
            return cls(root, None, f"the plan {rel} is not committed here")
        return cls(root, added[-1])

    def holds(self, commit: str) -> bool:
        """Whether `commit` descends from the plan's first commit and is in HEAD's history."""
        if commit not in self._holds:
            self._holds[commit] = all(_git(self.root, "merge-base", "--is-ancestor", a, b).returncode == 0
                                      for a, b in ((self.first, commit), (commit, "HEAD")))
        return self._holds[commit]

    def code_problem(self, arm: str, provenance) -> str | None:
        """Why an arm's recorded code is not a commit of the plan's history (None: it is)."""
        if not isinstance(provenance, dict):
            return f"arm {arm} records no provenance (commit, code digest, card)"
        if self.first is None:
            return self.why
        match = code_commit(provenance, self.root)
        if match is None:
            return f"arm {arm} records no code digest, so which commit's code ran cannot be told"
        candidates = [match[1], commit_with_code(provenance["code_digest"], self.root)]
        if any(c is not None and self.holds(c) for c in candidates):
            return None
        if match[0] == "none":
            return f"arm {arm} ran code that no commit of this repository's history holds"
        return (f"arm {arm} ran the code of {match[1][:10]}, not a commit between the plan's first ({self.first[:10]}) "
                f"and HEAD")


class Expected:
    """The config record recipe.py writes for a cell of the plan, on a GPU or on the CPU (recipe_config.parse with
    `recorded_on`: the record a run there writes, on any machine), each parsed once."""

    def __init__(self, grid: Grid):
        self.grid, self.records = grid, {}

    def record(self, cell: Cell, device: str) -> dict:
        if (cell, device) not in self.records:
            from gmts_recipe.recipe_config import RecipeError, parse
            from gmts_recipe.run_setup import config_record

            try:
                with contextlib.redirect_stdout(io.StringIO()):  # parse's notes ("no GPU found: ...") say nothing here
                    args = parse(["--config", str(self.grid.path(self.grid.config)), *cell.recipe_args()],
                                 recorded_on=device)
            except RecipeError as e:
                raise SweepError(f"the plan's config does not parse: {e}") from None
            self.records[(cell, device)] = config_record(*args[:3])
        return self.records[(cell, device)]


def config_problem(expected: dict, results: dict) -> str | None:
    """Why a cell's config record is not the plan's (None: its hash is), naming the settings that differ."""
    if config_hash(expected) == results.get("config_hash"):
        return None
    got = results.get("config") or {}
    keys = [k for k in dict.fromkeys([*expected, *got]) if expected.get(k) != got.get(k)]
    said = ", ".join(f"{k} {got.get(k, 'unset')!r} (the plan: {expected.get(k, 'unset')!r})" for k in keys[:4])
    return f"its settings differ from the plan's: {said or 'the config hash'}"


def cell_problems(grid: Grid, cell: Cell, path: Path, history: PlanHistory, expected: Expected,
                  claims: list[Claim], who: str | None, now: datetime.datetime, gsm8k_path: str | None = None,
                  done: dict | None = None) -> list[str]:
    """Every reason `path` (an incoming results.json) may not enter `grid` as `cell`; [] where it may."""
    try:
        results, _ = verify(path, done, gsm8k_path)
    except ResultsError as e:
        return [str(e).replace(str(path.parent.parent), grid.name)]
    out = []
    try:
        recorded(cell, results)
    except SweepError as e:
        out.append(str(e).removeprefix(f"{cell.name}: "))
    arms, planned = list(results.get("arms", {})), grid.planned_arms()[cell]
    if grid.whole_seeds and set(arms) != set(planned):
        out.append(f"ran {', '.join(arms) or 'no arm'} of {', '.join(planned)}: a seed of this plan runs whole")
    cards = recorded_cards(results)
    try:
        problem = config_problem(expected.record(cell, "cpu" if cards == ["CPU"] else "gpu"), results)
    except SweepError as e:
        problem = str(e)
    out += [problem] if problem else []
    out += [p for arm, entry in results.get("arms", {}).items()
            if (p := history.code_problem(arm, entry.get("provenance"))) is not None]
    if grid.sequential is not None:
        problem = card_problem(grid.sequential["cards"], {str(cell.seed): cards})
        out += [problem] if problem else []
    held = foreign(claims, cell.seed, who, now)
    if held is not None:
        out.append(f"seed {cell.seed} is claimed by {held.who} until {stamp(held.until)} ({held.path.name}): its cells "
                   f"merge from its claimant only")
    return list(dict.fromkeys(out))


def problems(grid: Grid, grid_path: Path, incoming: Path, who: str | None, gsm8k_path: str | None = None,
             now: datetime.datetime | None = None) -> tuple[list[str], int]:
    """(one line per incoming cell folder that may not enter the plan, the number of cell folders checked)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    history, expected = PlanHistory.of(Path(grid_path)), Expected(grid)
    claims = read_claims(Path(grid.results_dir) / grid.name)
    cells = {c.name: c for c in grid.cells()}
    out, done, folders = [], {}, sorted(p for p in incoming.iterdir() if p.is_dir() and p.name not in SKIPPED)
    for folder in folders:
        cell = cells.get(folder.name)
        if cell is None:
            out.append(f"{folder.name}: not a cell of the plan {grid.name}")
        elif not (folder / "results.json").is_file():
            out.append(f"{folder.name}: no results.json")
        else:
            reasons = cell_problems(grid, cell, folder / "results.json", history, expected, claims, who, now,
                                    gsm8k_path, done)
            out += [f"{cell.name}: {'; '.join(reasons)}"] if reasons else []
    return out, len(folders)
