"""A sweep file: its grid of (variant, learning rate, training seed) cells and arms, checked line by line, and the
jobs still to run with the recipe.py command that runs each cell."""

from __future__ import annotations

import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmts_recipe.arms import arms as rule_arms, comparisons as rule_comparisons
from gmts_recipe.records import ResultsError, read_yaml_mapping
from gmts_recipe.verify.file import load
from gmts_recipe.sweep import SweepError  # importable from here, as before
from gmts_recipe.sequential import failures  # a sequential plan's failed cells: what `jobs` runs again
from gmts_recipe.user_rules import RULES_HINT  # said beside an unknown arm
# the rules' arms and compared pairs, read when used (a rule registered at run time counts)


@dataclass(frozen=True)
class Cell:
    """One run directory: a setting variant at one learning rate and one training seed."""

    variant: str
    overrides: tuple[tuple[str, Any], ...]
    learning_rate: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.variant}-lr{self.learning_rate:g}-s{self.seed}"

    def recipe_args(self) -> list[str]:
        args = ["--learning_rate", repr(self.learning_rate), "--seed", str(self.seed)]
        for key, value in self.overrides:
            args += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
        return args


@dataclass
class Grid:
    """A sweep file: the base config, the results directory, and blocks of (arms x learning rates x seeds)."""

    name: str
    config: str
    results_dir: str
    blocks: list[dict] = field(default_factory=list)
    variants: dict[str, dict] = field(default_factory=dict)
    primary: dict | None = None  # the analysis plan's one primary test (PRIMARY_KEYS), fixed before its cells ran
    secondary: list[dict] = field(default_factory=list)  # its secondary comparisons (SECONDARY_KEYS): intervals only
    sequential: dict | None = None  # a planned test's sequential continuation (SEQUENTIAL_KEYS), fixed before its seeds
    base: Path = field(default_factory=Path)  # where the file's relative paths (config, continues, design) lie

    def path(self, name: str) -> Path:
        """A path the grid names (its config, the test it continues, its design file), as a file: relative paths are
        the repository's, found from the grid file's folder whatever the current directory."""
        return self.base / name

    def jobs_in_order(self, only: str | None = None) -> list[tuple[Cell, str]]:
        """Every (cell, arm) in the grid's order (block by block, seed-major), each once even when blocks share it."""
        out: list[tuple[Cell, str]] = []
        for block in self.blocks:
            if only is not None and block["name"] not in only.split(","):
                continue
            variant = block.get("variant", "paper")
            overrides = tuple(sorted(self.variants.get(variant, {}).items()))
            for seed in block["seeds"]:  # seed-major: a half-finished sweep has whole seeds, not half of each
                for lr in block["learning_rates"]:
                    cell = Cell(variant, overrides, float(lr), int(seed))
                    out += [(cell, arm) for arm in block["arms"] if (cell, arm) not in out]
        return out

    def cells(self) -> list[Cell]:
        """Every cell of the grid, once."""
        return list(dict.fromkeys(cell for cell, _ in self.jobs_in_order()))

    @property
    def whole_seeds(self) -> bool:
        """Whether each cell runs whole, its arms in one process on one card: so a sequential plan's seeds do, since
        its comparison is read per seed between arms that must share everything but the rule. A cell cut after some
        of its arms (a machine taken back) runs again whole, never resumed elsewhere, but for an arm that failed on its
        own (never run again); the next run starts with it (`jobs`), so a cut leaves no gap in the plan's order once
        the same command runs again."""
        return self.sequential is not None

    def planned_arms(self) -> dict[Cell, list[str]]:
        """Each cell's arms, in the grid's order."""
        arms: dict[Cell, list[str]] = {}
        for cell, arm in self.jobs_in_order():
            arms.setdefault(cell, []).append(arm)
        return arms


_INTS = lambda v: [int(x) for x in v]  # noqa: E731 - a list of seeds
PRIMARY_KEYS = {"fixed_on": str, "variant": str, "comparison": str, "learning_rate": float, "seeds": _INTS,
                "reproduced_above_points": float, "refuted_below_points": float}  # key: its conversion


def _check_primary(primary: Any, grid: Grid, p: Path) -> dict:
    """The grid's `primary:` mapping (every key of PRIMARY_KEYS, nothing else), each mistake one line."""
    where = f"{p}: primary"
    if not isinstance(primary, dict):
        raise SweepError(f"{where}: must be a mapping with {', '.join(PRIMARY_KEYS)}")
    missing, extra = set(PRIMARY_KEYS) - set(primary), set(primary) - set(PRIMARY_KEYS)
    if missing or extra:
        raise SweepError(f"{where}: " + (f"missing {', '.join(sorted(missing))}" if missing else
                                         f"unknown key(s) {', '.join(sorted(extra))}"))
    try:
        out = {k: PRIMARY_KEYS[k](v) for k, v in primary.items()}
    except (TypeError, ValueError):
        raise SweepError(f"{where}: learning_rate and the two thresholds must be numbers, seeds a list of "
                         f"integers") from None
    pairs = [f"{a} - {b}" for a, b in rule_comparisons()]
    if out["comparison"] not in pairs:
        raise SweepError(f"{where}: comparison {out['comparison']!r} is not one of {', '.join(pairs)}")
    if out["variant"] != "paper" and out["variant"] not in grid.variants:
        raise SweepError(f"{where}: variant {out['variant']!r} is not defined under variants")
    if len(out["seeds"]) < 2:
        raise SweepError(f"{where}: a t interval over seeds needs at least 2 seeds")
    return out


SECONDARY_KEYS = {"comparison": str, "seeds": _INTS}  # at the primary test's variant and learning rate


def _check_secondary(secondary: Any, grid: Grid, p: Path) -> list[dict]:
    """The grid's `secondary:` list, the plan's other comparisons (each at the primary test's variant and learning
    rate, over its own planned seeds; reported with their intervals, no decision); each mistake one line."""
    where = f"{p}: secondary"
    if grid.primary is None:
        raise SweepError(f"{where}: needs a primary test (its variant and learning rate are the secondary ones')")
    if not isinstance(secondary, list) or not secondary:
        raise SweepError(f"{where}: must be a non-empty list of mappings with {', '.join(SECONDARY_KEYS)}")
    planned = {(s, a) for b in grid.blocks if b.get("variant", "paper") == grid.primary["variant"]
               and any(math.isclose(float(lr), grid.primary["learning_rate"]) for lr in b["learning_rates"])
               for s in b["seeds"] for a in b["arms"]}  # (seed, arm) the blocks run at the primary's setting
    out = []
    for i, item in enumerate(secondary):
        at = f"{where}[{i}]"
        if not isinstance(item, dict) or set(item) != set(SECONDARY_KEYS):
            raise SweepError(f"{at}: must be a mapping with exactly {', '.join(SECONDARY_KEYS)}")
        try:
            entry = {k: SECONDARY_KEYS[k](v) for k, v in item.items()}
        except (TypeError, ValueError):
            raise SweepError(f"{at}: seeds must be a list of integers") from None
        arms = entry["comparison"].split(" - ")
        if len(arms) != 2 or any(a not in rule_arms() for a in arms) or arms[0] == arms[1]:
            raise SweepError(f"{at}: comparison {entry['comparison']!r} is not 'A - B' of two of {', '.join(rule_arms())}")
        if entry["comparison"] == grid.primary["comparison"]:
            raise SweepError(f"{at}: {entry['comparison']} is the primary test")
        if len(entry["seeds"]) < 2:
            raise SweepError(f"{at}: a t interval over seeds needs at least 2 seeds")
        missing = [s for s in entry["seeds"] if any((s, a) not in planned for a in arms)]
        if missing:
            raise SweepError(f"{at}: no block runs both arms of {entry['comparison']} for seed(s) "
                             f"{', '.join(map(str, missing))}")
        out.append(entry)
    return out


SIMULATION_KEYS = {"seed": int, "paths": int, "contaminated_paths": int, "resampled_paths": int,
                   "sensitivity_paths": int, "outcome_paths": int, "conditional_paths": int}
CONTAMINATION_KEYS = {"rate": float, "jump_sds": float}  # the plan's contamination model (gmts_recipe.sequential)
ARM_FAILURE_SCORES = ("base",)  # what an arm's own failure scores: the untrained base model's pass@1
SENSITIVITY_BY = ("card", "commit", "day")  # what old seeds are compared with new by: printed, never a decision
SEQUENTIAL_KEYS = {"fixed_on": str, "continues": str, "variant": str, "comparison": str, "learning_rate": float,
                   "seeds": _INTS, "looks": _INTS, "error_per_direction": float, "critical": dict,
                   "reproduced_above_points": float, "refuted_below_points": float, "cards": list, "design": str,
                   "contamination": dict, "failures": dict, "sensitivity": list, "simulation": dict}
# frozen_on: once a committed version of the plan carries it, no later version may change the plan's decision keys
# or its design file at all (gmts_recipe.verify.plan.frozen_problem); a plan may leave it out until it is frozen
OPTIONAL_SEQUENTIAL_KEYS = {"frozen_on": str}


def _check_sequential(sequential: Any, grid: Grid, p: Path) -> dict:
    """The grid's `sequential:` mapping: a planned test continued over new seeds with looks fixed in advance
    (gmts_recipe.sequential). The test it continues (`continues`, a sweep file with a primary test) must be the same
    comparison at the same setting and thresholds; the new seeds are disjoint from its seeds and run both arms in this
    grid's blocks; the looks are seed totals, the continued test's seeds included, the last one every seed."""
    where = f"{p}: sequential"
    if not isinstance(sequential, dict):
        raise SweepError(f"{where}: must be a mapping with {', '.join(SEQUENTIAL_KEYS)}")
    missing = set(SEQUENTIAL_KEYS) - set(sequential)
    extra = set(sequential) - set(SEQUENTIAL_KEYS) - set(OPTIONAL_SEQUENTIAL_KEYS)
    if missing or extra:
        raise SweepError(f"{where}: " + (f"missing {', '.join(sorted(missing))}" if missing else
                                         f"unknown key(s) {', '.join(sorted(extra))}"))
    try:  # critical: ~ until the design is computed (python -m gmts_recipe.sweep.design)
        keys = {**SEQUENTIAL_KEYS, **OPTIONAL_SEQUENTIAL_KEYS}
        out = {k: None if (k, v) == ("critical", None) else keys[k](v) for k, v in sequential.items()}
        out["simulation"] = {k: SIMULATION_KEYS[k](out["simulation"][k]) for k in SIMULATION_KEYS}
        out["contamination"] = {k: CONTAMINATION_KEYS[k](out["contamination"][k]) for k in CONTAMINATION_KEYS}
        out["failures"] = {"machine_fault_retries": int(out["failures"]["machine_fault_retries"]),
                           "arm_failure": str(out["failures"]["arm_failure"])}
        if len(sequential["simulation"]) != len(SIMULATION_KEYS) or len(sequential["contamination"]) != 2 \
                or len(sequential["failures"]) != 2:
            raise KeyError
        if out["critical"] is not None:
            out["critical"] = {k: float(out["critical"][k]) for k in ("reproduced", "refuted")}
            if len(sequential["critical"]) != 2:
                raise KeyError
    except (TypeError, ValueError, KeyError):
        raise SweepError(f"{where}: seeds and looks must be lists of integers, learning_rate, error_per_direction "
                         f"and the thresholds numbers, critical a mapping of reproduced and refuted (numbers), "
                         f"simulation a mapping of {', '.join(SIMULATION_KEYS)} (integers), contamination of "
                         f"{', '.join(CONTAMINATION_KEYS)} (numbers), failures of machine_fault_retries (an integer) "
                         f"and arm_failure") from None
    if not 0 <= out["contamination"]["rate"] < 0.5 or out["contamination"]["jump_sds"] < 0:
        raise SweepError(f"{where}: contamination.rate must lie in [0, 0.5) and jump_sds be at least 0")
    if out["failures"]["arm_failure"] not in ARM_FAILURE_SCORES or out["failures"]["machine_fault_retries"] < 0:
        raise SweepError(f"{where}: failures.arm_failure must be one of {', '.join(ARM_FAILURE_SCORES)} and "
                         f"machine_fault_retries at least 0")
    if not out["sensitivity"] or any(k not in SENSITIVITY_BY for k in out["sensitivity"]):
        raise SweepError(f"{where}: sensitivity must list what old seeds are compared with new by: "
                         f"{', '.join(SENSITIVITY_BY)}")
    numbers = {k: out[k] for k in ("learning_rate", "error_per_direction", "reproduced_above_points",
                                   "refuted_below_points")}
    numbers.update({f"critical.{k}": v for k, v in (out["critical"] or {}).items()})
    finite = [k for k, v in numbers.items() if not math.isfinite(v)]
    if finite:
        raise SweepError(f"{where}: {', '.join(finite)} must be finite")
    continued = load_grid(grid.path(out["continues"]))
    c = continued.primary
    if c is None:
        raise SweepError(f"{where}: continues {out['continues']}, which has no primary test")
    same = ("variant", "comparison", "learning_rate", "reproduced_above_points", "refuted_below_points")
    differ = [k for k in same if out[k] != c[k]]
    if differ:
        raise SweepError(f"{where}: {', '.join(differ)} differ from the primary test of {out['continues']}")
    if set(out["seeds"]) & set(c["seeds"]) or len(set(out["seeds"])) != len(out["seeds"]):
        raise SweepError(f"{where}: the new seeds must be distinct and none of {out['continues']}'s")
    looks = out["looks"]
    if any(b <= a for a, b in zip([len(c["seeds"]), *looks], looks)):
        raise SweepError(f"{where}: looks must be increasing seed totals above the {len(c['seeds'])} seeds continued")
    if looks[-1] != len(c["seeds"]) + len(out["seeds"]):
        raise SweepError(f"{where}: the last look ({looks[-1]}) must count every seed: {len(c['seeds'])} continued + "
                         f"{len(out['seeds'])} new")
    if not 0 < out["error_per_direction"] < 0.5 or any(v <= 0 for v in (out["critical"] or {}).values()):
        raise SweepError(f"{where}: error_per_direction must lie in (0, 0.5) and critical above 0")
    arms = out["comparison"].split(" - ")
    planned = {(s, a) for b in grid.blocks if b.get("variant", "paper") == out["variant"]
               and any(math.isclose(float(lr), out["learning_rate"]) for lr in b["learning_rates"])
               for s in b["seeds"] for a in b["arms"]}
    unplanned = [s for s in out["seeds"] if any((s, a) not in planned for a in arms)]
    if unplanned:
        raise SweepError(f"{where}: no block runs both arms of {out['comparison']} for seed(s) "
                         f"{', '.join(map(str, unplanned[:5]))}")
    return out


def base_of(grid_path: Path, config: str) -> Path:
    """The folder a grid's relative paths start from: the nearest folder above the grid file that holds its config
    (the repository's top for configs/sweeps/X.yaml and results/X/grid.yaml alike), else the current directory (a
    grid kept elsewhere, run from the repository). check.py on a sweep thereby reads the same files from anywhere."""
    if config and not Path(config).is_absolute():
        for folder in grid_path.resolve().parents:
            if (folder / config).is_file():
                return folder
    return Path()


def load_grid(path: str | Path) -> Grid:
    """Read and check a sweep file; every mistake is a one-line SweepError."""
    p = Path(path)
    if not p.is_file():
        near = sorted(str(q) for q in (p.parent if p.parent.is_dir() else Path("configs/sweeps")).glob("*.yaml"))
        raise SweepError(f"sweep file {p} not found" + (f" (sweeps: {', '.join(near)})" if near else ""))
    raw = read_yaml_mapping(p, SweepError, "must be a YAML mapping with config and blocks")
    unknown = set(raw) - {"name", "config", "results_dir", "blocks", "variants", "primary", "secondary", "sequential"}
    if unknown:
        raise SweepError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; allowed: name, config, results_dir, "
                         f"blocks, variants, primary, secondary, sequential")
    grid = Grid(name=str(raw.get("name", p.stem)), config=str(raw.get("config", "")),
                results_dir=str(raw.get("results_dir", "results")), blocks=list(raw.get("blocks") or []),
                variants=dict(raw.get("variants") or {}), base=base_of(p, str(raw.get("config", ""))))
    if not grid.path(grid.config).is_file():
        raise SweepError(f"{p}: config {grid.config!r} not found")
    if not grid.blocks:
        raise SweepError(f"{p}: no blocks")
    for i, block in enumerate(grid.blocks):
        where = f"{p}: block {block.get('name', i)!r}"
        keys = ("name", "arms", "learning_rates", "seeds", "variant")
        extra = set(block) - set(keys)
        if extra:
            near = {k: difflib.get_close_matches(str(k), keys, n=1) for k in sorted(extra, key=str)}
            hints = [f"{k} (did you mean {m[0]}?)" if m else str(k) for k, m in near.items()]
            raise SweepError(f"{where}: unknown key(s) {', '.join(hints)}; a block has {', '.join(keys)}")
        if "name" not in block:
            raise SweepError(f"{where}: needs a name")
        for key in ("arms", "learning_rates", "seeds"):
            if not isinstance(block.get(key), list) or not block[key]:
                raise SweepError(f"{where}: {key} must be a non-empty list")
        bad = [a for a in block["arms"] if a not in rule_arms()]
        if bad:
            raise SweepError(f"{where}: unknown arm(s) {', '.join(map(str, bad))}; use {', '.join(rule_arms())} "
                             f"({RULES_HINT})")
        try:
            [float(x) for x in block["learning_rates"]]
            [int(x) for x in block["seeds"]]
        except (TypeError, ValueError):
            raise SweepError(f"{where}: learning_rates must be numbers and seeds integers") from None
        variant = block.get("variant", "paper")
        if variant != "paper" and variant not in grid.variants:
            raise SweepError(f"{where}: variant {variant!r} is not defined under variants")
    if "primary" in raw:
        grid.primary = _check_primary(raw["primary"], grid, p)
    if "secondary" in raw:
        grid.secondary = _check_secondary(raw["secondary"], grid, p)
    if "sequential" in raw:
        if "primary" in raw:
            raise SweepError(f"{p}: a grid has a primary test or a sequential one, not both")
        grid.sequential = _check_sequential(raw["sequential"], grid, p)
    return grid


def check_recipe_keys(grid: Grid, allowed: list[str], after_dashes: list[str]) -> None:
    """Every key a variant sets and every key given after -- (`after_dashes`) is a recipe.py field (`allowed`): a
    typo is one line before any cell runs (or --plan counts jobs), where each cell's recipe.py would refuse it only
    once launched. The caller reads the field list from recipe.py (the package imports no script)."""
    def refuse(key: str, where: str) -> SweepError:
        near = difflib.get_close_matches(key, allowed, n=3)
        return SweepError(f"{where}: unknown recipe.py key {key!r}" + (f" (did you mean {', '.join(near)}?)"
                                                                         if near else ""))

    for name, variant in grid.variants.items():
        for key in variant:
            if str(key) not in allowed:
                raise refuse(str(key), f"variant {name!r}")
    for key in after_dashes:
        if key not in allowed:
            raise refuse(key, "after --")


def _finished_arms(results_path: Path) -> set[str]:
    if not results_path.is_file():
        return set()
    try:
        return set(load(results_path).get("arms", {}))
    except ResultsError:
        return set()  # unreadable or partial: the recipe decides (it refuses a foreign config with a clear line)


def jobs(grid: Grid, only: str | None = None) -> list[tuple[Cell, str]]:
    """The (cell, arm) jobs still to run, in the grid's order; under `whole_seeds` a cell that still waits for an arm
    runs all of them again but those that failed on their own, which never run again (its failure.json, read as the
    plan's `failures` say: gmts_recipe.sequential.failures.outcome)."""
    root = Path(grid.results_dir) / grid.name
    done = {cell: _finished_arms(root / cell.name / "results.json") for cell in grid.cells()}
    order = grid.jobs_in_order(only)
    if not grid.whole_seeds:
        return [(cell, arm) for cell, arm in order if arm not in done[cell]]
    left, retries = {}, grid.sequential["failures"]["machine_fault_retries"]
    for cell, arms in grid.planned_arms().items():
        rec = failures.checked(root / cell.name, cell.seed, grid.sequential, done[cell])  # the runner's, or refused
        own, missing = failures.outcome(rec, arms, done[cell], retries)
        left[cell] = [a for a in arms if a not in own] if missing else []
    return [(cell, arm) for cell, arm in order if arm in left[cell]]


def by_cell(todo: list[tuple[Cell, str]]) -> list[tuple[Cell, tuple[str, ...]]]:
    """The jobs as one recipe process per cell, in the order of each cell's first job. The arms of a cell share the
    process, so the second and third reuse what the first compiled (a new process compiles its decoder and training
    graphs again; measurements: bench/docs/scaling.md, "What a new process costs a sweep")."""
    arms: dict[Cell, list[str]] = {}
    for cell, arm in todo:
        arms.setdefault(cell, []).append(arm)
    return [(cell, tuple(a)) for cell, a in arms.items()]


def cell_command(grid: Grid, cell: Cell, arms: tuple[str, ...], extra: list[str]) -> list[str]:
    """A cell's recipe.py command: resumed (under `whole_seeds`: started over, so a cut cell's arms run again together),
    without figures (python -m gmts_recipe.plots CELL_DIR draws them) and without the arms' adapters (a grid's
    hundreds of arms would fill the disk; `-- --keep_adapter true` keeps them)."""
    return [sys.executable, "recipe.py", "--config", grid.config, "--arm", ",".join(arms), "--experiment", cell.name,
            "--results_dir", str(Path(grid.results_dir) / grid.name),
            "--overwrite" if grid.whole_seeds else "--resume", "--figures", "false",
            "--keep_adapter", "false",
            *cell.recipe_args(), *extra]


def log_name(cell: Cell, arms: tuple[str, ...]) -> str:
    return f"{cell.name}-{'+'.join(arms)}.log"


def jobs_to_start(grid: Grid, only: str | None, base_only: bool) -> list[tuple[Cell, str]]:
    """What a run starts: every missing job, or with base_only the first cell's base evaluations alone."""
    todo = [(grid.jobs_in_order(only)[0][0], "base")] if base_only else jobs(grid, only)
    if not todo:
        print("[sweep] nothing to run: every job has finished")
    return todo
