"""A sweep's plan, held against git: the grid file a sweep.json was made from must be the committed plan, the plan its
first cell ran under only grown since (whatever file holds it now), a sequential plan the one its design file and the
test it continues say, and every planned cell present or named as missing; and a cell from another machine held
against the plan before it enters (`incoming_problems`, below).

sweep.py records the plan beside the summary (`record`: the grid file's path in the repository, its SHA-256 and the
commit it was last changed in); check.py (`report`, before any cell is read) compares the sweep folder's grid.yaml
with that record and, where the repository is at hand, with git:

- the file at HEAD and at the recorded commit;
- the plan's history, by content rather than by name: every version of the plan that git holds from the sweep's first
  cell on (the sweep folder's grid.yaml, configs/sweeps/<name>.yaml and the recorded file, at each commit that added a
  cell and at each later commit that changed one of them) must be contained in the plan as it stands (`growth`). A
  plan grows only by what adds runs without touching a run already made or a rule already read: new blocks, new
  seeds, arms or learning rates in a block, new variants, and a decision rule that was not there yet (reported with
  its fixed_on). Its name, config and results_dir, a variant's settings, every planned (variant, learning rate, seed,
  arm) and every decision rule once present (primary, secondary, sequential: thresholds, seeds, looks, boundaries)
  never change. A plan renamed, copied into the sweep folder or committed under a new name is held against the same
  history, so an edit cannot start a history of its own;
- a sequential plan (`sequential_lines`): the test it continues (its plan file and its sweep folder) exactly as
  committed, its plan file as at the extension plan's recorded commit, its sweep passing these same checks (look 0 is
  that test as committed, never an edit in the working tree); its design file committed and unchanged since the
  first cell, and agreeing with the plan (`design_problem`); each counted seed's arms on one card the plan names,
  by the exact name the card reports (`card_problem`).

Without a repository only the SHA-256 (and the design file and cards, which need no git) can be compared, and check.py
says so. A summary that records no plan names its plan by convention (configs/sweeps/<name>.yaml) and is held against
git the same way. Every disagreement is one SweepError line naming the file and what differs.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import io
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import yaml

from gmts_recipe.code_digest import code_commit, commit_with_code
from gmts_recipe.records import ResultsError, config_hash
from gmts_recipe.sequential import stats as sequential
from gmts_recipe.sequential.cards import CARDS, card_allowed, recorded_cards  # the exact names a plan's cards stand for
from gmts_recipe.sweep.claims import Claim, foreign, read_claims, stamp
from gmts_recipe.sweep.grid import Cell, Grid, SweepError, load_grid
from gmts_recipe.verify.cell import arms_problem, recorded
from gmts_recipe.verify.file import verify

# What this level refuses (check.py --checks, docs/results.md's list of checks).
CHECKS = (
    "a grid.yaml that is not the committed plan, or a plan changed since its first cell other than by growing "
    "(`check`: new blocks, seeds, arms, learning rates, variants, rules); a frozen sequential plan changed at all "
    "(`frozen_problem`); a cell folder the plan does not list",
    "a sequential plan whose design file, continued test or cards disagree with it (`sequential_lines`, "
    "`design_problem`, `card_problem`); --allow-unsampled on a planned sweep not pinned as made before samples "
    "(`unsampled_plan`)",
    "a cell from another machine (sweep.py --merge ARCHIVE) that fails check.py, is not the cell it names, ran other "
    "settings than the plan's config gives it, code no commit of the plan's history holds, on a card the plan does "
    "not name, or a seed someone else claims (`incoming_problems`)",
)

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


@functools.lru_cache(maxsize=256)
def _mapping(text: str | None) -> dict | None:
    """A plan's YAML as a mapping (None: no such file then, or not a mapping: it never ran a cell); each text parsed
    once (a plan's versions repeat over the commits that added cells). Read only: the mapping is shared."""
    if text is None:
        return None
    try:
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    return raw if isinstance(raw, dict) else None


def _jobs(raw: dict) -> dict[tuple[str, float, int, str], str]:
    """Every (variant, learning rate, seed, arm) a plan's blocks run, each with its block's name."""
    out: dict = {}
    for block in raw.get("blocks") or []:
        try:
            for seed in block["seeds"]:
                for lr in block["learning_rates"]:
                    for arm in block["arms"]:
                        out.setdefault((str(block.get("variant", "paper")), float(lr), int(seed), str(arm)),
                                       str(block.get("name", "?")))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # a block no loader accepts ran nothing
    return out


def _differing(before, after) -> str:
    """The keys of a rule that differ, for the refusal's line (the whole rule where it is not a mapping)."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = [k for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k)]
        return ", ".join(map(str, keys))
    return "its content"


def growth(before: dict, after: dict) -> tuple[str, str] | None:
    """Why the plan `after` is not the plan `before` grown as a plan may grow, as (what changed, how), None where it
    is. Grown: the same name, config and results_dir; every variant `before` defines with the same settings (its
    cells computed with them); every (variant, learning rate, seed, arm) `before` plans still planned (no cell, seed
    or arm dropped: a result one dislikes cannot leave with its seed); every decision rule `before` has unchanged
    (primary, secondary, sequential: read once cells ran; a threshold, seed, look or boundary moved after the fact
    decides another question). New blocks, seeds, arms, learning rates, variants and rules are allowed: they add
    runs, or a rule not yet read (reported with its fixed_on)."""
    for key in RULES:
        if before.get(key) is not None and after.get(key) != before.get(key):
            return f"changed its {key}", f"{_differing(before[key], after.get(key) or {})} differ"
    for key in ("name", "config", "results_dir"):
        if before.get(key) != after.get(key):
            return f"changed its {key}", f"{before.get(key)!r} became {after.get(key)!r}"
    was, now = before.get("variants") or {}, after.get("variants") or {}
    changed = [v for v in was if now.get(v) != was[v]]
    if changed:
        return f"changed variant {changed[0]!r}", f"{_differing(was[changed[0]], now.get(changed[0]) or {})} differ"
    planned, kept = _jobs(before), _jobs(after)
    dropped = [job for job in planned if job not in kept]
    if dropped:
        seeds = sorted({s for _, _, s, _ in dropped})
        blocks = sorted({planned[job] for job in dropped})
        return (f"dropped {len(dropped)} planned run(s)", f"seed(s) {', '.join(map(str, seeds[:8]))}"
                f"{' ...' if len(seeds) > 8 else ''} of block(s) {', '.join(blocks)}")
    return None


class _History:
    """Files as git holds them at given commits, each read once."""

    def __init__(self, root: Path):
        self.root, self._texts, self._ancestor = root, {}, {}

    def text(self, commit: str, rel: str) -> str | None:
        if (commit, rel) not in self._texts:
            out = _git(self.root, "show", f"{commit}:{rel}")
            self._texts[(commit, rel)] = out.stdout if out.returncode == 0 else None
        return self._texts[(commit, rel)]

    def commits(self, *args: str) -> list[str]:
        return _git(self.root, "log", "--format=%H", *args).stdout.split()

    def descends(self, first: str, sha: str) -> bool:
        """Whether `sha` descends from `first` (or is it)."""
        if (first, sha) not in self._ancestor:
            self._ancestor[(first, sha)] = _git(self.root, "merge-base", "--is-ancestor", first, sha).returncode == 0
        return self._ancestor[(first, sha)]

    def origins(self, folder: Path, rel: str) -> list[str]:
        """The folders (relative) a sweep's cells were first committed in, where git followed one of them there by
        rename (a sweep folder moved keeps its history: its first cell is the one first committed elsewhere)."""
        tracked = _git(self.root, "ls-files", "--", f"{rel}/*/results.json").stdout.split()
        if not tracked:
            return []
        first = sorted(tracked)[0]
        names = _git(self.root, "log", "--follow", "--format=", "--name-only", "--", first).stdout.split()
        return [str(Path(names[-1]).parent.parent.as_posix())] if names and names[-1] != first else []

    def dirty(self, rel: str) -> list[str]:
        """Paths under `rel` that differ from HEAD or that git does not track (ignored files aside)."""
        out = _git(self.root, "status", "--porcelain", "--untracked-files=all", "--", rel).stdout
        return [line[3:] for line in out.splitlines() if line.strip()]


def _versions_since(history: _History, paths: list[str], cell_commits: list[str]) -> list[tuple[str, str]]:
    """(path, commit) of every plan version that counts once the first cell was committed: each path at each commit
    that added a cell, then at each later commit that changed it (the first cell's commit an ancestor)."""
    first = cell_commits[0]
    out = [(rel, c) for c in cell_commits for rel in paths]
    for rel in paths:
        out += [(rel, c) for c in reversed(history.commits("--", rel)) if history.descends(first, c)]
    return list(dict.fromkeys(out))


def _history_lines(where: str, history: _History, plan: dict, paths: list[str], folders: list[str], rel: str,
                   last: str) -> list[str]:
    """The plan against every version of it from the sweep's first cell on (`growth`), whichever path held it; the
    cells are those of `folders` (the sweep's folder, then any it was moved from)."""
    cell_commits = list(reversed(history.commits("--diff-filter=A", "--", *(f"{f}/*/results.json" for f in folders))))
    if not cell_commits:
        return [f"Plan: {rel} as committed (last changed {last}); no cell of it is committed yet."]
    first = cell_commits[0]
    at_first = {p: _mapping(history.text(first, p)) for p in paths}
    at_first = {p: m for p, m in at_first.items() if m is not None}
    if not at_first:
        raise SweepError(f"{where}: no plan committed with or before the sweep's first cell ({first[:10]}: none of "
                         f"{', '.join(paths)})")
    for path, commit in _versions_since(history, paths, cell_commits):
        before = _mapping(history.text(commit, path))
        reason = None if before is None else growth(before, plan)
        if reason:
            raise SweepError(f"{where}: {reason[0]} after the sweep's first cell ({first[:10]}): {reason[1]}, against "
                             f"{path} at {commit[:10]}; a plan only grows (new blocks, seeds, arms, learning rates, "
                             f"variants, rules)")
    order = ("before" if _git(history.root, "merge-base", "--is-ancestor", last.split()[0], first).returncode == 0
             else "after")
    added = [k for k in RULES if plan.get(k) is not None and all(m.get(k) is None for m in at_first.values())]
    rules = (f"its {' and '.join(added)} added after that cell (the plan's fixed_on says when), unchanged since"
             if added else "its decision rules unchanged since that cell")
    return [f"Plan: {rel} as committed (last changed {last}, {order} the first of its cells was committed, "
            f"{first[:10]}); {rules}."]


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
    plan = _mapping(grid_text)
    if plan is None:
        raise SweepError(f"{where}: grid.yaml is not a YAML mapping")
    history = _History(root)
    folders = list(dict.fromkeys([cells, *history.origins(folder, cells)]))
    paths = list(dict.fromkeys([*(f"{f}/grid.yaml" for f in folders), f"configs/sweeps/{summary['name']}.yaml",
                                *(f"configs/sweeps/{Path(f).name}.yaml" for f in folders[1:]), rel]))
    frozen = frozen_problem(history, paths, plan)
    if frozen:
        raise SweepError(f"{where}: {frozen}")
    return _history_lines(where, history, plan, paths, folders, rel, last)


def frozen_problem(history: _History, paths: list[str], plan: dict) -> str | None:
    """Why the plan breaks a freeze (None: it does not). A sequential plan frozen (`frozen_on`) in any committed
    version, under any of its names, is frozen for good: its `sequential` section must equal that version's, key for
    key (its boundaries above all: no later amendment, up or down), and its design file must be the one committed
    with it; every frozen version is held so, whichever was first. The freeze holds before any cell is committed
    too, which is its point: a plan may otherwise be amended until its first cell."""
    for rel in paths:
        for commit in reversed(history.commits("--", rel)):
            then = _mapping(history.text(commit, rel)) or {}
            seq = then.get("sequential")
            if not isinstance(seq, dict) or seq.get("frozen_on") is None:
                continue
            now = plan.get("sequential")
            if now != seq:
                return (f"{rel} at {commit[:10]} froze the sequential plan ({seq['frozen_on']}); "
                        f"{_differing(seq, now if isinstance(now, dict) else {})} differ since")
            design = seq.get("design")
            if isinstance(design, str):
                current = history.root / design
                frozen_design = history.text(commit, design)
                if frozen_design is None or not current.is_file() or \
                        current.read_text(encoding="utf-8") != frozen_design:
                    return (f"{rel} at {commit[:10]} froze the sequential plan ({seq['frozen_on']}); its design "
                            f"file {design} differs from the one committed with it")
    return None


# The planned sweeps whose cells ran when evaluations kept no samples yet (format 1: every score in results.json, no
# texts beside it), by the digest of their summary, which holds every cell's digest: of the planned sweeps, only
# these pass check.py --allow-unsampled (marked "not re-scored"). Any other planned test decides on scores re-scored
# from their texts; cells stripped of their samples, their scores made up, would otherwise read "reproduced". A
# summary re-sealed (a format change) moves its digest: the new one is written here, in the same commit.
UNSAMPLED_PLANS = {"qwen": "ff44a99c94db32967ca3ec6479341c7bd1829ccaca64c3fd479c1ad9337b1d06"}


def unsampled_plan(sweep_path: Path, summary: dict) -> None:
    """check.py --allow-unsampled on a sweep (`summary`: its sweep.json as read): refused in one SweepError line where
    the sweep is planned (a primary, secondary or sequential rule decides, or reads, from its cells), unless it is one
    of UNSAMPLED_PLANS as pinned."""
    rules = [key for key in RULES if isinstance(summary, dict) and summary.get(key)]
    if rules and UNSAMPLED_PLANS.get(summary.get("name")) != summary.get("digest"):
        raise SweepError(f"{sweep_path}: --allow-unsampled on a planned sweep ({', '.join(rules)}): its decision would "
                         f"read scores nobody re-scored; only the planned sweeps made before evaluations kept samples "
                         f"take it, pinned by their summary's digest ({', '.join(UNSAMPLED_PLANS)}: "
                         f"gmts_recipe.verify.plan.UNSAMPLED_PLANS)")


def card_problem(allowed: list[str], cell_cards: dict[str, list[str]]) -> str | None:
    """Why the counted seeds' cards break a sequential plan's `cards` (None: they do not). A seed's two arms ran on
    one card (its delta is one card's, never a difference between cards), and that card is one the plan names: the
    recorded name (torch.cuda.get_device_name) itself, or the card type CARDS maps that exact name to. No substring:
    an "NVIDIA GH200 480GB" is no H200, an A100 beside an H100 no H100."""
    for seed, names in cell_cards.items():
        if len(names) != 1:
            return (f"seed {seed}'s arms ran on {len(names)} cards ({', '.join(names) or 'none recorded'}): both arms "
                    f"of a seed run on one card")
        if not card_allowed(names[0], allowed):
            known = "; ".join(f"{CARDS[n]}: {n}" for n in CARDS if CARDS[n] in allowed)
            return (f"seed {seed} ran on {names[0]!r}, not a card the plan names ({', '.join(allowed)}; recorded as "
                    f"{known or 'no known name'})")
    return None


def design_problem(spec: dict, design: dict) -> str | None:
    """Why a sequential plan and its design file disagree (None: they agree), from the fields the design records:
    the plan's critical values are the design's; the design's simulation settings, error and looks are the plan's,
    the looks led by the continued test's seed count; its first look's critical value is that test's t quantile; its
    observed first stage (seeds, mean, SD, decision) is the continued test's per-seed deltas as the cells give them;
    its contamination model is the plan's; its first look's exact shares recompute (`sequential.first_look_share`);
    each direction's required value is its boundaries plus MARGIN_SE Monte Carlo errors as recorded
    (`sequential.required_critical`), and the plan's critical value is at least that; and every error it records under
    the plan's models, over the whole sequence and given the first stage, stays within the plan's error per direction
    (the sensitivity rows it publishes beside them need not). What is not recomputed here: that the boundaries are
    what the simulation yields from its seed (`python -m gmts_recipe.sweep.design PLAN --out FILE` writes the file
    again, bit for bit, and tests/test_sequential.py does so)."""
    n = len(spec["continued_seeds"])
    observed = [100 * v for v in spec["per_seed"][:n]]
    try:
        c0 = sequential.first_critical(n)
        first = sequential.look(observed, c0, c0, spec["reproduced_above_points"], spec["refuted_below_points"])
        sd = float(np.std(observed, ddof=1))
        checks = [
            ("critical", design["critical"] == spec["critical"], f"{spec['critical']} in the plan"),
            ("simulation", design["simulation"] == spec["simulation"], f"{spec['simulation']} in the plan"),
            ("error_per_direction", design["error_per_direction"] == spec["error_per_direction"],
             f"{spec['error_per_direction']} in the plan"),
            ("looks", design["looks"] == [n, *spec["looks"]], f"{[n, *spec['looks']]} by the plan"),
            ("first_critical", math.isclose(design["first_critical"], c0, rel_tol=1e-9), f"t quantile {c0:.4f}"),
            ("observed", design["observed"]["seeds"] == n and math.isclose(design["observed"]["mean"], first["mean"],
                                                                           rel_tol=1e-9, abs_tol=1e-12)
             and math.isclose(design["observed"]["sd"], sd, rel_tol=1e-9)
             and design["observed"]["decision"] == first["decision"],
             f"the continued test's {n} deltas: mean {first['mean']:+.4f}, SD {sd:.4f}"),
        ]
        exact = {"normal": sequential.first_look_share(n, c0),
                 "contaminated": sequential.first_look_share(n, c0, spec["contamination"]["rate"],
                                                             -spec["contamination"]["jump_sds"])}
        checks += [("first_look_exact", all(math.isclose(design["first_look_exact"][k], v, rel_tol=1e-6)
                                            for k, v in exact.items()), f"{exact} recomputed"),
                   ("margin_se", design["margin_se"] == sequential.MARGIN_SE, f"{sequential.MARGIN_SE} by the code")]
        for direction, found in design["boundaries"].items():
            whole = {k: {"boundary": b, "se": design["boundary_se"][direction][k]} for k, b in found.items()}
            need = sequential.required_critical(whole, design["conditional"][direction])
            recorded = design["required"][direction]
            checks.append((f"required.{direction}", (recorded is None and math.isinf(need)) or (
                recorded is not None and math.isclose(recorded, need, rel_tol=1e-12)),
                           f"{need:.4f} from its boundaries and their Monte Carlo errors"))
            critical = spec["critical"][direction]
            checks.append((f"critical.{direction}", critical is not None and critical >= need,
                           f"{critical} in the plan lies below {need:.4f}: every boundary it must hold (the whole "
                           f"sequence's and, given the first stage, each model's) plus {sequential.MARGIN_SE:g} Monte "
                           f"Carlo SEs"))
        if "contamination" in spec or "contamination" in design:
            checks.append(("contamination", design.get("contamination") == spec.get("contamination"),
                           f"{spec.get('contamination')} in the plan"))
        worst = max(e["error"] if isinstance(e, dict) else e for per in (*design["errors"].values(),
                                                                        *design["conditional"].values())
                    for e in per.values())
        checks.append(("errors", worst <= spec["error_per_direction"],
                       f"at most {spec['error_per_direction']} per direction"))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"cannot be read as a design ({type(e).__name__}: {e})"
    bad = [(field, expected) for field, ok, expected in checks if not ok]
    if bad:
        field, expected = bad[0]
        return f"{field} {design.get(field.split('.')[0])} disagrees ({expected})"
    return None


def sequential_lines(sweep_path: Path, summary: dict, grid: Grid,
                     continued: tuple[Path, dict, Grid] | None) -> list[str]:
    """A sequential plan's own checks (see the module's docstring): the test it continues as committed (`continued`:
    its sweep.json's path, the file and its grid as the caller read them; None where it has no sweep.json yet), its
    design file, its cards. Each disagreement one SweepError line; returns the lines to print."""
    spec, folder = summary["sequential"], sweep_path.parent
    where = f"{sweep_path}: sequential"
    problem = card_problem(spec["cards"], spec["cell_cards"])
    if problem:
        raise SweepError(f"{where}: cards: {problem}")
    design_path = grid.path(spec["design"])
    try:
        design_text = design_path.read_text(encoding="utf-8")
        design = json.loads(design_text)
    except (OSError, ValueError):
        raise SweepError(f"{where}: design file {spec['design']} is missing or not JSON") from None
    problem = design_problem(spec, design)
    if problem:
        raise SweepError(f"{where}: the design file {spec['design']}: {problem}")
    root = repository(folder)
    if root is None:
        return [f"Sequential plan: its design file agrees with it (recorded fields; the simulation is not rerun); "
                f"the continued test {spec['continues']} not compared with git (no repository at hand)."]
    history = _History(root)
    rel = lambda p: Path(p).resolve().relative_to(root.resolve()).as_posix()  # noqa: E731
    try:
        design_rel, continued_rel = rel(design_path), rel(grid.path(spec["continues"]))
        continued_plan = _mapping(grid.path(spec["continues"]).read_text(encoding="utf-8")) or {}
        continued_folder = folder.parent / str(continued_plan.get("name", Path(spec["continues"]).stem))
        continued_cells = rel(continued_folder)
    except (ValueError, OSError):
        raise SweepError(f"{where}: the design file, the continued test's plan and its cells must lie in the "
                         f"repository of {sweep_path}") from None
    if history.text("HEAD", design_rel) != design_text:
        raise SweepError(f"{where}: the design file {design_rel} differs from the committed one (git show "
                         f"HEAD:{design_rel})")
    cells = folder.resolve().relative_to(root.resolve()).as_posix()
    cell_commits = list(reversed(history.commits("--diff-filter=A", "--", f"{cells}/*/results.json")))
    if cell_commits:
        for path, commit in _versions_since(history, [design_rel], cell_commits):
            try:
                then = None if (text := history.text(commit, path)) is None else json.loads(text)
            except ValueError:
                then = text  # not JSON then: not this design either
            if then is not None and then != design:
                raise SweepError(f"{where}: the design file {design_rel} at {commit[:10]} is not the one of the "
                                 f"sweep's first cell ({cell_commits[0][:10]}): a design never changes once cells ran")
    if _mapping(history.text("HEAD", continued_rel)) != continued_plan:
        raise SweepError(f"{where}: {continued_rel}, the test it continues, differs from its committed plan (git show "
                         f"HEAD:{continued_rel}): look 0 is that test as committed")
    recorded = (summary.get("plan") or {}).get("commit")
    if recorded is not None and _mapping(history.text(recorded, continued_rel)) != continued_plan:
        raise SweepError(f"{where}: {continued_rel} is not the plan it continued at the plan's commit "
                         f"({recorded[:10]}): look 0 is that test as the plan was fixed")
    dirty = history.dirty(continued_cells)
    if dirty:
        raise SweepError(f"{where}: {continued_cells}, the test it continues, has {len(dirty)} file(s) that differ "
                         f"from HEAD or are not committed (e.g. {dirty[0]}): look 0 reads its cells as committed")
    lines = [f"Sequential plan: its design file {design_rel} as committed agrees with it (critical values, simulation "
             f"settings, looks, the first stage; the simulation itself is not rerun); "
             + (f"{len(spec['cell_cards'])} new seed(s), each on one card it names." if spec["cell_cards"]
                else "no new seed counted yet.")]
    said = f"Look 0: {continued_rel} and {continued_cells} as committed"
    if continued is not None:  # that sweep's own plan checks (its history, stray cells), without its cells
        inner = report(*continued)[0]
        said += f"; its plan: {inner.removeprefix('Plan: ')}"
    lines.append(said + ("" if said.endswith(".") else "."))
    return lines


def continued_by(sweep_path: Path, name: str) -> list[str]:
    """check.py's line for each sequential plan beside a sweep (<results_dir>/*/grid.yaml) that continues it: a
    finished test whose seeds are another test's first look says so, and where that test stands is read."""
    out = []
    for other in sorted(sweep_path.parent.parent.glob("*/grid.yaml")):
        if other.parent.resolve() == sweep_path.parent.resolve() or \
                not (_mapping(other.read_text(encoding="utf-8")) or {}).get("sequential"):
            continue
        try:
            grid = load_grid(other)
            continued = load_grid(grid.path(grid.sequential["continues"]))
        except SweepError:
            continue
        if continued.name == name:
            seeds = grid.sequential["seeds"]
            out.append(f"Continued by {grid.name}, a sequential plan: this test's seeds are its first look, new seeds "
                       f"{seeds[0]}-{seeds[-1]} its later ones; where it stands: python check.py "
                       f"{other.parent / 'sweep.json'}")
    return out


def report(sweep_path: Path, summary: dict, grid: Grid, continued: tuple[Path, dict, Grid] | None = None) -> list[str]:
    """check.py's lines on a sweep's plan, before any of its cells is read (`summary`, `grid`: sweep.json and its
    grid.yaml as verify.sweep read them, once; `continued`: the same three of the test a sequential plan continues):
    `check`, then a refusal for a cell folder with a results.json the plan does not list (a cell dropped from the grid
    is named), the planned cells that have not run (named, in the grid's order, never silently left out), and a
    sequential plan's own checks."""
    lines = check(sweep_path, summary)
    planned = [cell.name for cell in grid.cells()]
    stray = sorted(p.parent.name for p in sweep_path.parent.glob("*/results.json") if p.parent.name not in planned)
    if stray:
        raise SweepError(f"{sweep_path}: cell folder(s) the plan does not list: {', '.join(stray[:5])}")
    missing = [name for name in planned if name not in {c["cell"] for c in summary["cells"]}]
    lines.append(f"Planned cells: {len(planned) - len(missing)} of {len(planned)} have a results file"
                 + (f"; not yet: {', '.join(missing[:3])}" + (f" and {len(missing) - 3} more." if len(missing) > 3
                                                             else ".") if missing else "."))
    if summary.get("sequential"):
        lines += sequential_lines(sweep_path, summary, grid, continued)
    return lines


# A cell from another machine (sweep.py --merge ARCHIVE, gmts_recipe.sweep.archive) before it enters the plan:
# check.py's full check of the file (digest, records, samples re-scored against the gold answers), the cell it claims
# to be (seed, variant settings, learning rates, every planned arm), the plan's pinned settings (its config record is
# the one the plan's config gives that cell, as recipe.py records it on the card it ran on), each arm's code (its
# recorded digest matched to a commit of the plan's history: from the commit that added the plan to HEAD), the plan's
# cards (on one card the plan names, both arms), and the seed claims (no cell of a seed that someone else's claim
# holds). `incoming_problems` gives one line per cell that fails, every reason of that cell in it; the archive is
# refused whole on any.

SKIPPED = ("logs", "base-evals", "claims")  # folders of a sweep folder that are not cells


class PlanHistory(_History):
    """The repository that holds a plan, the commit that added it (`first`; None, and `why`, where there is none),
    and which commits lie between it and HEAD: the code a contributed cell may have run."""

    def __init__(self, root: Path | None, first: str | None, why: str = ""):
        super().__init__(root)
        self.first, self.why = first, why

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
        return self.descends(self.first, commit) and self.descends(commit, "HEAD")

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
    problem = arms_problem(cell, results.get("arms", {}), grid.planned_arms()[cell], grid.whole_seeds)
    out += [problem] if problem else []
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


def incoming_problems(grid: Grid, grid_path: Path, incoming: Path, who: str | None,
                      gsm8k_path: str | None = None, now: datetime.datetime | None = None) -> tuple[list[str], int]:
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
