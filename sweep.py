"""A grid of experiments (arms x learning rates x training seeds x setting variants), resumable, on one or more GPUs,
with one sealed summary that `check.py` verifies cell by cell.

    python sweep.py configs/sweeps/qwen.yaml                      # run what is missing, then summarize
    python sweep.py configs/sweeps/qwen.yaml --gpus 0,1           # one worker per GPU, cells from one queue
    python sweep.py configs/sweeps/qwen.yaml --only lr-sweep      # one block of the grid (or several: a,b)
    python sweep.py configs/sweeps/qwen.yaml --plan               # print the jobs and their GPU time, run nothing
    python sweep.py configs/sweeps/qwen.yaml --summarize          # only (re)write sweep.json and sweep.png
    python sweep.py configs/sweeps/qwen.yaml --base               # only the base evaluations (shared by all cells)
    python sweep.py configs/sweeps/qwen.yaml -- --gsm8k_path DIR  # anything after -- goes to every recipe.py call
    python sweep.py configs/sweeps/qwen.yaml --results_dir /scratch  # the sweep's folder under another parent
    python sweep.py configs/sweeps/qwen.yaml --merge OTHER/results/qwen  # bring in cells another machine ran
    python sweep.py configs/sweeps/qwen.yaml --runs_per_gpu 4     # 4 cells at once per GPU (start CUDA MPS first)
    python sweep.py configs/sweeps/qwen.yaml --warm_workers       # a worker's cells in one process (startup once)
    python sweep.py configs/sweeps/qwen.yaml --ray                # cells as Ray tasks (a local cluster, or `ray start`'s)
    python sweep.py configs/sweeps/qwen.yaml --ray HEAD:6379      # cells on the workers of that Ray cluster
    python sweep.py configs/sweeps/qwen.yaml --commands           # one shell line per missing cell (Slurm job arrays)
    python check.py results/qwen/sweep.json                       # verify: every cell recomputed from its results.json

A cell is one (setting variant, learning rate, training seed): its own run directory `<results_dir>/<name>/<cell>/`
written by recipe.py, with one results.json that holds the cell's arms. Cells that two blocks share are run once.
The folder name only finds the file: what the file records must be that cell (its config's training seed and variant
settings, each arm's learning rate; the other config fields shared by every cell) and no two cells may hold the same
run, or the summary, its verification and --merge refuse in one line naming the cell (`recorded`, `check_together`).
The held-out tasks, their samples and the base evaluations are the same in every cell (recipe.py caches the base
evaluations by what they depend on), so every comparison is paired by task.

Each cell's missing arms run in one `python recipe.py --arm ARM,ARM ... --resume` process (the later arms reuse what
the first compiled): an interrupted sweep resumes where it stopped, and finished arms are kept. With --warm_workers
each worker runs its cells' recipe.py one after another in one process of its own (gmts_recipe.worker), so the startup
and the compile are paid once per worker, not per cell. The summary pools each comparison over the seeds of a
(variant, learning rate) with a two-level bootstrap (seeds, then tasks: stats.pooled_delta), so its interval includes
seed-to-seed variance, and gives Student's t over the seeds beside it.

`--merge DIR` brings in cells that another machine ran (DIR: its sweep folder), without running anything: each
incoming results.json must verify, be the cell it is merged into (as above), and match the local cell's config hash
and held-out tasks and this tree's base evaluation hash; its arms join the local ones (an arm in both must be
identical), and the cell keeps this tree's shared base evaluation, the one every local cell carries. A base
evaluated again elsewhere (bf16 is not bit-exact) is replaced, and the file's `merges` says so with that base's
pass@1. Its absent logs are copied; then --summarize.
The samples files the merged cell names (its arms', the kept base's) are verified and re-scored and copied if absent.

`--ray` runs each cell process as a Ray task on a worker that may be another machine (docs/scale.md): the task runs
the same recipe.py command in a temporary folder of a copy of this tree, with the shared base evaluations (run once,
first) shipped in, and ships the cell's files back; they enter the grid only through --merge's checks, written file by
file atomically, so a failed, preempted or refused task (retried --retries times) leaves no half-written cell. Every
cell process, local or Ray, appends one line to <sweep folder>/logs/timing.jsonl (cell, arms, gpu, workers_on_gpu,
start, end, exit_code, host): cells per GPU-hour from committed files; --merge brings a merged cell's lines with it,
and --plan estimates the jobs left from them (per arm: a grid's cells may run 4 arms, then 2).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import heapq
import json
import math
import os
import queue
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selection import RULES, arms, comparisons, control_arms  # the arms and compared pairs are the results files'
# a cell's file, verified (load), read as written today (current_record) and written as check.py does
from gmts_recipe.records import (ResultsError, _close, _first_difference, current_record, digest, load,
                                 read_yaml_mapping, seal, task_scores, write_json)
from gmts_recipe.worker import WarmWorker  # --warm_workers: one process runs a worker's cells

SCHEMA = 1
# The rules' arms, in table order, and the pairs compared ((a, b): a - b, pooled wherever a cell holds both). A control
# arm (ETS with omega == 0 tokens ranked last) gets a column in the tables only where a cell has it.
ARM_ORDER, COMPARISONS, CONTROL_ARMS = arms(), comparisons(), control_arms()
ARM_COLUMNS = {r.arm: r.label() for r in RULES.values()}
ARM_COLORS = {r.arm: r.color for r in RULES.values()}
# The gains over ETS the GMTS paper reports (pass@1, as fractions): the effects a grid must be able to detect.
CLAIMED = {"gmts - ets": (0.013, 0.034)}
POWER, MAX_SEEDS = 0.8, 1000


class SweepError(ValueError):
    """A grid or summary that cannot be used; the message is the one-line reason."""


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
    comparisons = [f"{a} - {b}" for a, b in COMPARISONS]
    if out["comparison"] not in comparisons:
        raise SweepError(f"{where}: comparison {out['comparison']!r} is not one of {', '.join(comparisons)}")
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
        if len(arms) != 2 or any(a not in ARM_ORDER for a in arms) or arms[0] == arms[1]:
            raise SweepError(f"{at}: comparison {entry['comparison']!r} is not 'A - B' of two of {', '.join(ARM_ORDER)}")
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


def load_grid(path: str | Path) -> Grid:
    """Read and check a sweep file; every mistake is a one-line SweepError."""
    p = Path(path)
    if not p.is_file():
        near = sorted(str(q) for q in (p.parent if p.parent.is_dir() else Path("configs/sweeps")).glob("*.yaml"))
        raise SweepError(f"sweep file {p} not found" + (f" (sweeps: {', '.join(near)})" if near else ""))
    raw = read_yaml_mapping(p, SweepError, "must be a YAML mapping with config and blocks")
    unknown = set(raw) - {"name", "config", "results_dir", "blocks", "variants", "primary", "secondary"}
    if unknown:
        raise SweepError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; allowed: name, config, results_dir, "
                         f"blocks, variants, primary, secondary")
    grid = Grid(name=str(raw.get("name", p.stem)), config=str(raw.get("config", "")),
                results_dir=str(raw.get("results_dir", "results")), blocks=list(raw.get("blocks") or []),
                variants=dict(raw.get("variants") or {}))
    if not Path(grid.config).is_file():
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
        bad = [a for a in block["arms"] if a not in ARM_ORDER]
        if bad:
            raise SweepError(f"{where}: unknown arm(s) {', '.join(map(str, bad))}; use {', '.join(ARM_ORDER)}")
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
    return grid


def check_recipe_keys(grid: Grid, extra: list[str]) -> None:
    """Every key a variant sets and every --key after -- is a recipe.py field: a typo is one line before any cell runs
    (or --plan counts jobs), where each cell's recipe.py would refuse it only once launched. Imports the recipe's
    config classes (a few seconds, unless a run here kept the field list), so --summarize and --merge, which launch
    nothing, leave it out."""
    import recipe

    allowed = recipe.known_field_names() or recipe.field_names()

    def refuse(key: str, where: str) -> SweepError:
        near = difflib.get_close_matches(key, allowed, n=3)
        return SweepError(f"{where}: unknown recipe.py key {key!r}" + (f" (did you mean {', '.join(near)}?)"
                                                                         if near else ""))

    for name, variant in grid.variants.items():
        for key in variant:
            if str(key) not in allowed:
                raise refuse(str(key), f"variant {name!r}")
    for key in recipe.cli_values(extra):
        if key not in allowed:
            raise refuse(key, "after --")


# ---------------------------------------------------------------------------- running
def _finished_arms(results_path: Path) -> set[str]:
    if not results_path.is_file():
        return set()
    try:
        return set(load(results_path).get("arms", {}))
    except ResultsError:
        return set()  # unreadable or partial: the recipe decides (it refuses a foreign config with a clear line)


def jobs(grid: Grid, only: str | None = None) -> list[tuple[Cell, str]]:
    """The (cell, arm) jobs still to run, in the grid's order."""
    root = Path(grid.results_dir) / grid.name
    done = {cell: _finished_arms(root / cell.name / "results.json") for cell in grid.cells()}
    return [(cell, arm) for cell, arm in grid.jobs_in_order(only) if arm not in done[cell]]


def by_cell(todo: list[tuple[Cell, str]]) -> list[tuple[Cell, tuple[str, ...]]]:
    """The jobs as one recipe process per cell, in the order of each cell's first job. The arms of a cell share the
    process, so the second and third reuse what the first compiled (a new process compiles its decoder and training
    graphs again: the first step of each arm process took 24-31 s on an H200, results/qwen/logs)."""
    arms: dict[Cell, list[str]] = {}
    for cell, arm in todo:
        arms.setdefault(cell, []).append(arm)
    return [(cell, tuple(a)) for cell, a in arms.items()]


def _command(grid: Grid, cell: Cell, arms: tuple[str, ...], extra: list[str]) -> list[str]:
    return [sys.executable, "recipe.py", "--config", grid.config, "--arm", ",".join(arms), "--experiment", cell.name,
            "--results_dir", str(Path(grid.results_dir) / grid.name), "--resume", *cell.recipe_args(), *extra]


def _log_name(cell: Cell, arms: tuple[str, ...]) -> str:
    return f"{cell.name}-{'+'.join(arms)}.log"


def refusal(log_text: str) -> str | None:
    """recipe.py's own one-line refusal (exit 2: a typo in a field, a file not found), if the log ends with one: the
    failure line then says why, and a typo in a grid's variant is read where the sweep stops, not in a log."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    return lines[-1].removeprefix("recipe.py: ") if lines and lines[-1].startswith("recipe.py: ") else None


def _failure(cell: Cell, arms: tuple[str, ...], log: Path) -> str:
    """A failed cell process, for the sweep's last line: the cell, its arms, the recipe's refusal if any, its log."""
    why = refusal(log.read_text(encoding="utf-8", errors="replace")[-4000:]) if log.is_file() else None
    return f"{cell.name} {','.join(arms)}{f': {why}' if why else ''} (see {log})"


INTERRUPTED = (130, -2)  # recipe.py's exit code after Ctrl-C, and a process ended by SIGINT
TIMING = "timing.jsonl"  # one JSON line per cell process, in the sweep's logs folder


def write_timing(log_dir: Path, cell: Cell, arms: tuple[str, ...], gpu: str | None, workers_on_gpu: int,
                 start: float, end: float, exit_code: int | None, host: str, warm: bool = False,
                 job_in_process: int | None = None) -> None:
    """One line of logs/timing.jsonl: which cell process ran where and how long (unix seconds), so cells per
    GPU-hour come from committed files; `warm`: the cell ran in a warm worker's process (its startup paid once per
    worker), `job_in_process` its place there (1: the job that paid the process's start and first compile). One
    write call per line in append mode: concurrent workers never interleave."""
    record = {"cell": cell.name, "arms": list(arms), "gpu": gpu, "workers_on_gpu": workers_on_gpu,
              "start": round(start, 3), "end": round(end, 3), "exit_code": exit_code, "host": host}
    if warm:
        record["warm"] = True
        if job_in_process is not None:
            record["job_in_process"] = job_in_process
    line = json.dumps(record)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / TIMING, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def mps_running(env: dict | None = None) -> bool:
    """Whether a CUDA MPS control daemon answers here (its pipe directory holds the `control` pipe): without it,
    several processes on one GPU take turns (time-slicing) and gain little; with it four cells gave 1.55x."""
    env = os.environ if env is None else env
    return (Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control").exists()


def shares_gpus(workers: list[str | None]) -> bool:
    """Whether two local workers are given one GPU id."""
    ids = [w for w in workers if w is not None]
    return len(ids) != len(set(ids))


def time_left(arm_s: float, running: list[tuple[float, int]], queued: list[int], slots: int) -> float:
    """Seconds until the last cell process ends, if each takes `arm_s` per arm (the finished processes' seconds over
    their arms: a grid's cells may run 4 arms, then 2): the running ones ((seconds run, arms)) end when they reach
    theirs, and each queued one (its arms) takes the first slot that frees. Cells run `slots` at a time, so the work
    left divided by one worker's pace would overstate it `slots`-fold."""
    free = sorted([max(0.0, arms * arm_s - r) for r, arms in running] + [0.0] * max(0, slots - len(running)))
    if not free:
        return 0.0 if not queued else float("inf")
    end = max(free) if running else 0.0
    for arms in queued:
        t = heapq.heappop(free) + arms * arm_s
        heapq.heappush(free, t)
        end = max(end, t)
    return end


def seconds_per_arm(took: list[tuple[float, int]], warm_up: list[tuple[float, int]] = (),
                    recorded: float | None = None) -> float:
    """`time_left`'s pace: the finished cell processes' seconds over their arms ((seconds, arms) each). A warm
    worker's first training cell also pays its process's model load and compilation (5.2 min against 3.1 for the
    next ones of the confirmatory grid on one H200): those go in `warm_up` and count only until a steady cell has
    finished, after the pace recorded by earlier runs (`recorded_pace`) where there is one; counted like the
    others they put the first estimates ~1.7x too high, falling with every cell after."""
    if not took and recorded is not None:
        return recorded
    cells = took or warm_up
    if not cells:
        raise ValueError("no finished cell to take a pace from")
    return sum(t for t, _ in cells) / sum(n for _, n in cells)


def arms_that_fit(arms: int, seconds_per_arm: float | None, seconds_left: float) -> int:
    """How many of a cell process's `arms` to start with `seconds_left` before a time limit (`--time_limit`), at
    `seconds_per_arm`: all when they fit, else as many as fit, so that an arm is left whole for the next run instead of
    cut midway by the end of the allocation (with checkpoints off a cut arm keeps nothing). None: no pace measured yet
    (nothing has run), so every arm starts while time is left."""
    if seconds_left <= 0:
        return 0
    if seconds_per_arm is None or seconds_per_arm <= 0:
        return arms
    return max(0, min(arms, int(seconds_left // seconds_per_arm)))


def recorded_pace(log_dir: Path, warm: bool = False, steady: bool = True) -> tuple[float, int] | None:
    """(seconds per arm, arm-runs) of the cell processes in logs/timing.jsonl that trained arms, ended well and had
    their GPU to themselves, those of fresh processes (each with its start and compile) or, with `warm`, those that
    ran in warm workers; None where there are none. With `steady` (what `--plan` and the sweep's time-left estimate
    use, the worker's start counted apart) a warm worker's first training job is left out: it loaded the model and
    compiled (job 1, or job 2 after a job 1 of base evaluations alone, its worker known by host and GPU; lines from
    before `job_in_process` was recorded count). Without it every training job counts: the arm-runs per GPU-hour that
    warm workers gave, their start included (bench/costs.py)."""
    seconds = arms = 0
    try:
        lines = (log_dir / TIMING).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    began_with_base: dict[tuple, bool] = {}  # (host, gpu): whether that worker's job 1 was the base evaluations
    for line in lines:
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(t, dict):
            continue
        job, worker = t.get("job_in_process"), (t.get("host"), t.get("gpu"))
        if job == 1:
            began_with_base[worker] = t.get("arms") == ["base"]
        first_training = job == 1 or (job == 2 and began_with_base.get(worker, False))
        if (t.get("exit_code") == 0 and t.get("arms") and t["arms"] != ["base"] and t.get("workers_on_gpu") == 1
                and bool(t.get("warm")) == warm and not (warm and steady and first_training)):
            seconds += t["end"] - t["start"]
            arms += len(t["arms"])
    return (seconds / arms, arms) if arms else None


def expand_workers(gpus: list[str], runs_per_gpu: int = 1) -> list[str | None]:
    """The local pool's workers: `runs_per_gpu` per listed GPU id (an id listed twice already gives two), None for
    the one device of a run without --gpus. Several cells share a GPU well only under CUDA MPS (README, Scale)."""
    return [gpu for gpu in (gpus or [None]) for _ in range(runs_per_gpu)]


def commands(grid: Grid, extra: list[str], only: str | None = None) -> list[str]:
    """One shell line per missing cell process, the base evaluations first: the exact commands `run` starts, for a
    scheduler's job array (run the first line alone, then the rest in any order: README, Scale)."""
    todo = jobs(grid, only)
    if not todo:
        return []
    units = [(todo[0][0], ("base",)), *by_cell(todo)]
    return [shlex.join(_command(grid, cell, arms, extra)) for cell, arms in units]


def _todo(grid: Grid, only: str | None, base_only: bool) -> list[tuple[Cell, str]]:
    """What a run starts: every missing job, or with base_only the first cell's base evaluations alone."""
    todo = [(grid.jobs_in_order(only)[0][0], "base")] if base_only else jobs(grid, only)
    if not todo:
        print("[sweep] nothing to run: every job has finished")
    return todo


def run(grid: Grid, gpus: list[str], extra: list[str], only: str | None = None, base_only: bool = False,
        runs_per_gpu: int = 1, warm_workers: bool = False, time_limit: float | None = None,
        left: list[str] | None = None) -> list[str]:
    """Run every missing job, `runs_per_gpu` workers per GPU id (an id given twice: two workers on that GPU), one
    process per cell (`by_cell`), or with `warm_workers` one process per worker that runs its cells one after
    another (gmts_recipe.worker: imports, CUDA context and compiled graphs paid once per worker); returns the failed
    jobs (their logs are next to their results). With `time_limit` (minutes from now) a worker starts only the arms
    that end within it at the pace measured so far (`arms_that_fit`) and appends the others to `left`."""
    deadline = None if time_limit is None else time.time() + 60 * time_limit
    todo = _todo(grid, only, base_only)
    if not todo:
        return []
    log_dir = Path(grid.results_dir) / grid.name / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    workers = expand_workers(gpus, runs_per_gpu)
    host = socket.gethostname()
    # The base evaluations first, alone: every cell reuses them, and two cells must not compute them twice.
    first_cell = todo[0][0]
    failed: list[str] = []
    pending: queue.Queue = queue.Queue()
    for unit in by_cell(todo):
        pending.put(unit)
    lock = threading.Lock()
    total, done = len(todo), [0]
    took: list[tuple[float, int]] = []  # (seconds, arms) of each finished cell process
    warm_up: list[tuple[float, int]] = []  # the same, of a warm process's first training cell (its load and compile)
    trained_in: dict[int, int] = {}  # worker slot -> which of its processes (WarmWorker.started) last trained a cell
    before = recorded_pace(log_dir, warm=warm_workers)  # (seconds per arm, arm-runs) of earlier runs, run the same way
    recorded = before[0] if before else None
    running: dict[int, tuple[float, int]] = {}  # worker thread -> (start time, arms) of the cell process it runs
    skipped_whole = [False]  # a cell has been left whole for the next run (its line printed)

    def environment(gpu: str | None) -> dict:
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        return env

    warm = [WarmWorker(environment(gpu), cwd=Path.cwd()) for gpu in workers] if warm_workers else None

    def launch(cell: Cell, arms: tuple[str, ...], slot: int) -> int:
        gpu = workers[slot]
        command = _command(grid, cell, arms, extra)
        start = time.time()
        log = log_dir / _log_name(cell, arms)
        where = "" if warm is None else f"  # in warm worker {slot}'s process"
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}{where}\n")
            out.flush()
            if warm is None:
                code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, env=environment(gpu))
        if warm is not None:
            code = warm[slot].run(command[1:], log)  # the worker's own Python runs recipe.py
        write_timing(log_dir, cell, arms, gpu, workers.count(gpu), start, time.time(), code, host, warm=warm_workers,
                     job_in_process=None if warm is None else warm[slot].jobs)
        return code

    def first_in_process(slot: int) -> bool:
        """Whether the worker's next (or just finished) cell is the first its warm process trains: that one pays the
        process's model load and compilation, so its pace is kept apart (`warm_up`)."""
        return warm is not None and trained_in.get(slot) != warm[slot].started

    stop = threading.Event()  # an interrupted cell (Ctrl-C reaches every process of the terminal): take no other

    def worker(slot: int) -> None:
        while not stop.is_set():
            try:
                cell, arms = pending.get_nowait()
            except queue.Empty:
                return
            t0 = time.time()
            with lock:
                if stop.is_set():  # interrupted while this cell was being taken: it never started
                    return
                if deadline is not None:
                    pace = (seconds_per_arm(warm_up) if first_in_process(slot) and warm_up else
                            seconds_per_arm(took, warm_up, recorded) if took or warm_up or recorded else None)
                    n = arms_that_fit(len(arms), pace, deadline - t0)
                    if n < len(arms):
                        if left is not None:
                            left.extend(f"{cell.name} {arm}" for arm in arms[n:])
                        at = "" if pace is None else f", {pace / 60:.1f} min per arm so far"
                        if n > 0 or not skipped_whole[0]:  # one line for the cells not started, not one per cell
                            rest = "" if n > 0 else ", and every later cell that does not fit"
                            print(f"[sweep] time limit: {cell.name} {','.join(arms[n:])}{rest} left for the next "
                                  f"run ({max(0.0, deadline - t0) / 60:.1f} min left{at})", flush=True)
                        if n == 0:
                            skipped_whole[0] = True
                            continue
                        arms = arms[:n]
                running[threading.get_ident()] = (t0, len(arms))
            code = launch(cell, arms, slot)
            with lock:
                del running[threading.get_ident()]
                done[0] += len(arms)
                (warm_up if first_in_process(slot) else took).append((time.time() - t0, len(arms)))
                if warm is not None:
                    trained_in[slot] = warm[slot].started
                now = time.time()
                eta = time_left(seconds_per_arm(took, warm_up, recorded), [(now - r, n) for r, n in running.values()],
                                [len(a) for _, a in list(pending.queue)], len(workers))
                status = "ok" if code == 0 else f"FAILED (exit {code})"
                print(f"[sweep] {done[0]}/{total} {cell.name} {','.join(arms)} on gpu {workers[slot]}: {status}, "
                      f"{(time.time() - t0) / 60:.1f} min; about {eta / 60:.0f} min left", flush=True)
                if code != 0:
                    failed.append(_failure(cell, arms, log_dir / _log_name(cell, arms)))
                if code in INTERRUPTED:
                    stop.set()

    print(f"[sweep] {grid.name}: {total} job(s) in {pending.qsize()} cell process(es) on {len(workers)} "
          f"worker(s){' (warm: one process each)' if warm else ''}; base evaluations first")
    try:
        if launch(first_cell, ("base",), 0) != 0:
            return [_failure(first_cell, ("base",), log_dir / _log_name(first_cell, ("base",)))]
        if base_only:
            return []
        threads: list[threading.Thread] = []
        try:
            for slot in range(len(workers)):
                threads.append(threading.Thread(target=worker, args=(slot,)))
                threads[-1].start()
            for t in threads:
                while t.is_alive():  # short waits: a Ctrl-C delivered to a worker thread runs its handler here only
                    t.join(0.1)      # when this thread wakes, which a join without timeout does when the cell ends
        except KeyboardInterrupt:
            stop.set()
            print("[sweep] interrupted: waiting for the running cells to stop (each keeps its finished arms)",
                  file=sys.stderr, flush=True)
            for t in threads:
                if t.ident is not None:  # started
                    t.join()
            raise
    finally:
        for w in warm or []:
            w.close()
    return failed


# ---------------------------------------------------------------------------- which cell a results file is
@dataclass(frozen=True)
class Recorded:
    """What a cell's results file says it is, beside its folder name: its config record (the training seed, the
    variant's settings and every other field) and a fingerprint of each arm's data (evaluation records and training
    log), which two runs never share."""

    cell: Cell
    config: dict
    arms: dict[str, str]


def recorded(cell: Cell, results: dict) -> Recorded:
    """The file's own account of the cell, checked against `cell` (SweepError naming the cell and the mismatch): the
    training seed in its config, each arm's learning rate, each setting of the cell's variant. A folder name says
    none of these (the learning rate is not even in the config hash that recipe.py checks on --resume). Read as
    recipe.py writes it today (`current_record`): a cell from before a field moved into the arms pools with later
    ones."""
    results = current_record(results)
    config = results.get("config") or {}
    where = f"{cell.name}: results.json"
    if config.get("seed") != cell.seed:
        raise SweepError(f"{where} records training seed {config.get('seed')!r}, the cell's is {cell.seed}")
    arms = results.get("arms", {})
    options = {arm: (entry.get("generation_options") or {}) for arm, entry in arms.items()}
    for key, value in cell.overrides:
        if key in config:
            if not _same_setting(config[key], value):
                raise SweepError(f"{where} records {key} = {config[key]!r}, variant {cell.variant} sets {value!r}")
            continue
        # a speed lever is left out of the config record (it changes rounding only): each arm records it instead
        if not arms:
            continue  # no arm has run yet: nothing records the lever, nothing contradicts the variant
        if any(key not in o for o in options.values()):
            raise SweepError(f"{where} records no {key} (variant {cell.variant} sets {value!r})")
        for arm, o in options.items():
            if not _same_setting(o[key], value):
                raise SweepError(f"{where}: arm {arm} ran with {key} = {o[key]!r}, variant {cell.variant} sets "
                                 f"{value!r}")
    for arm, entry in arms.items():
        lr = entry.get("learning_rate")
        if not isinstance(lr, (int, float)) or not math.isclose(lr, cell.learning_rate, rel_tol=1e-9):
            raise SweepError(f"{where}: arm {arm} trained at learning rate {lr!r}, the cell's is "
                             f"{cell.learning_rate:g}")
    fingerprints = {arm: hashlib.sha256(json.dumps([entry["eval"]["records"], entry.get("train_log", [])],
                                                   sort_keys=True).encode()).hexdigest()
                    for arm, entry in results.get("arms", {}).items()}
    return Recorded(cell, config, fingerprints)


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


_ABSENT = _Absent()


def _same_setting(recorded_value: Any, given: Any) -> bool:
    """A variant's value as recipe.py records it: the grid's YAML value, or its text as the command line parsed it
    (Cell.recipe_args passes strings as they are: '1e-4' in YAML is a string that the recipe reads as a number)."""
    if _close(recorded_value, json.loads(json.dumps(given))):
        return True
    if isinstance(given, str):
        try:
            return _close(recorded_value, json.loads(given.lower() if given.lower() in ("true", "false") else given))
        except ValueError:
            return str(recorded_value) == given
    return False


def check_together(cells: list[Recorded], where: str = "") -> None:
    """The cells of one grid as one experiment: their configs agree on every field but the training seed and the
    variants' settings (a cell whose variant leaves a setting alone has the value the others that leave it alone
    have), and no two cells hold the same arm data (a results file copied into another cell's folder)."""
    keys = {key for c in cells for key in c.config} | {key for c in cells for key, _ in c.cell.overrides}
    shared: dict[str, tuple[Recorded, Any]] = {}
    for c in cells:
        own = {key for key, _ in c.cell.overrides}
        for key in sorted(keys - own - {"seed"}):
            value = c.config.get(key, _ABSENT)
            first, first_value = shared.setdefault(key, (c, value))
            if not _close(first_value, value):
                raise SweepError(f"{where}{c.cell.name}: results.json records {key} = {value!r} where "
                                 f"{first.cell.name} records {first_value!r} (cells differ only in the training "
                                 f"seed and their variant's settings)")
    seen: dict[str, tuple[Cell, str]] = {}
    for c in cells:
        for arm, fingerprint in c.arms.items():
            other = seen.setdefault(fingerprint, (c.cell, arm))
            if other[0] != c.cell:
                raise SweepError(f"{where}{c.cell.name}: arm {arm} holds the same evaluation records and training "
                                 f"log as arm {other[1]} of {other[0].name} (a copied results file)")


# ---------------------------------------------------------------------------- merging cells run elsewhere
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


def plan_merge(grid: Grid, incoming: Path) -> list[Merge]:
    """Every cell of the grid that `incoming` (another tree's sweep folder) holds, checked against this tree before
    anything is written: one refusal (a SweepError naming cell and reason) and no cell is merged."""
    if not incoming.is_dir():
        raise SweepError(f"--merge {incoming}: no such folder (give another tree's sweep folder, e.g. results/qwen)")
    root = Path(grid.results_dir) / grid.name
    caches = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in (root / "base-evals").glob("*.json")}
    plans = [_merge_cell(cell, incoming, root, caches) for cell in grid.cells()
             if (incoming / cell.name / "results.json").is_file()]
    merged = {m.cell: m.results for m in plans if m.results is not None}
    try:  # the tree as it would be: every cell's file, merged or local (summarize verifies the local ones)
        check_together([recorded(cell, merged[cell] if cell in merged else
                                 json.loads((root / cell.name / "results.json").read_text(encoding="utf-8")))
                        for cell in grid.cells() if cell in merged or (root / cell.name / "results.json").is_file()])
    except SweepError as e:
        raise SweepError(f"--merge: {e}") from None
    return plans


def _merge_cell(cell: Cell, incoming: Path, root: Path, caches: dict[str, dict]) -> Merge:
    """One cell: the incoming arms added to the local ones, paired with this tree's base evaluation. The shared
    cache is the base every local cell carries, so it wins; an incoming base computed again elsewhere (bf16 differs
    run to run) is replaced, and its pass@1 recorded in the file's `merges`. The arms never read the base (recipe.py
    trains after, and independently of, the base evaluation), so this is the cell the sweep would have written had
    the cache travelled."""
    def refuse(reason: str) -> SweepError:  # one line, and the way to bring in the other cells
        return SweepError(f"--merge: {cell.name}: {reason}; nothing merged (to merge the other cells, move "
                          f"{incoming / cell.name} out of {incoming})")

    local_path = root / cell.name / "results.json"
    try:
        new = current_record(load(incoming / cell.name / "results.json"))  # both as recipe.py writes them today
        old = current_record(load(local_path)) if local_path.is_file() else None
    except ResultsError as e:
        raise refuse(str(e)) from None
    try:
        recorded(cell, new)  # the incoming file is this cell: its seed, variant and every arm's learning rate
    except SweepError as e:
        raise SweepError(f"--merge: {e}") from None
    key = new["base"]["eval_hash"]
    if old is not None and old["config_hash"] != new["config_hash"]:
        raise refuse(f"config_hash {new['config_hash'][:12]} differs from the local cell's {old['config_hash'][:12]}")
    if old is not None and old.get("data", {}).get("heldout") != new.get("data", {}).get("heldout"):
        raise refuse("held-out tasks differ from the local cell's")
    if old is not None and old["base"]["eval_hash"] != key:
        raise refuse(f"base eval hash {key[:12]} differs from the local cell's {old['base']['eval_hash'][:12]}")
    if caches and key not in caches:
        raise refuse(f"base eval hash {key[:12]} is not the local shared cache's "
                     f"({', '.join(k[:12] for k in sorted(caches))} in {root / 'base-evals'})")
    cache = caches.get(key)
    if cache is not None and cache["eval_config"]["heldout"] != new.get("data", {}).get("heldout"):
        raise refuse("held-out tasks differ from the local shared cache's")
    kept, source = ((cache["evals"], "shared cache") if cache is not None else
                    (old["base"]["evals"], "local cell") if old is not None else (new["base"]["evals"], "incoming"))
    if old is not None and old["base"]["evals"] != kept:
        raise refuse("the local cell's base differs from the local shared cache; merging would rewrite a local result")
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
    base = (f"base replaced by the {source} (incoming pass@1 "
            f"{', '.join(f'{p:.4f}' for p in entry['replaced_base_pass@1'])})" if replaced else f"base kept ({source})")
    return Merge(cell, merged, logs, f"{cell.name}: added arm(s) {', '.join(added)}; {base}{copied}", samples, timing)


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
    shared base-evals folder), each verified (SHA-256, records, re-scored: samples.check_samples) where it will be read:
    here if a file of that name is here, else in the incoming tree, from which it is to be copied. A merged cell
    keeps verifiable samples; a file here with other bytes is refused, never overwritten."""
    from gmts_recipe.records import ResultsError
    from gmts_recipe.samples import check_samples, evaluations, samples_path

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
    """Bring the cells of `incoming` into this tree (plan_merge: all checked first), redraw each merged cell's curves
    as recipe.py does, bring in their logs (a same-named local log keeps its text and gets the incoming one appended,
    as a resumed local sweep appends; only its rest where the local log ends with its beginning: `_continued`), and
    return one line per cell. Never overwrites a log, never writes the sweep's summary (--summarize does); merging
    the same folder again changes nothing."""
    from gmts_recipe.plots import plot_run

    plans = plan_merge(grid, incoming)
    root = Path(grid.results_dir) / grid.name
    for m in plans:
        for source, target in m.samples:  # before the results file that names them
            copy_atomic(source, target)
        if m.results is not None:
            (root / m.cell.name).mkdir(parents=True, exist_ok=True)
            write_json(root / m.cell.name / "results.json", m.results)  # atomic: the cell is the old or the new one
            plot_run(m.results, root / m.cell.name / "curves.png")
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


# ---------------------------------------------------------------------------- cells as Ray tasks
RAY_EXTRA = 'pip install -e ".[ray]"'
# What a task's copy of the tree leaves out: history, results (the cells travel themselves), caches, environments.
RAY_EXCLUDES = [".git/", "/results/", "/runs/", "/cache/", ".carry/", "venv/", ".venv/", "__pycache__/",
                "*.egg-info/", ".pytest_cache/", ".hypothesis/"]
# The files of a cell process that come back to the driver (paths in the task's sweep folder, {cell}: its name).
RETURNED = ("{cell}/results.json", "{cell}/samples-*.jsonl.xz", "{cell}/curves*.png", "base-evals/*.json",
            "base-evals/*.jsonl.xz")


class CellFailed(RuntimeError):
    """A cell process that exited non-zero on a Ray worker: its exit code, log and timing travel back (Ray retries
    the task first: a CUDA error or a full disk on one node need not fail the cell)."""

    def __init__(self, code: int, log: str, timing: dict):
        super().__init__(code, log, timing)
        self.code, self.log, self.timing = code, log, timing

    def __str__(self) -> str:
        why = refusal(self.log[-4000:])
        return f"recipe.py exited with code {self.code} on {self.timing.get('host')}" + (f": {why}" if why else "")


def run_cell_here(command: list[str], sweep_name: str, cell_name: str, *shipped: dict[str, bytes]) -> dict:
    """Run one cell process (the command `run` would start) on this node, in a fresh temporary sweep folder holding
    the `shipped` files (path in the sweep folder: bytes; the shared base evaluations, the cell's finished arms), and
    return the cell's files, its log and its timing. Self-contained (standard library only): Ray ships it to workers
    that may hold another copy of sweep.py, or none importable."""
    import fnmatch
    import os
    import socket
    import subprocess
    import sys
    import tempfile
    import time

    sent = {rel: data for files in shipped for rel, data in files.items()}
    with tempfile.TemporaryDirectory(prefix="gmts-cell-") as tmp:
        root = Path(tmp) / sweep_name
        for rel, data in sent.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        command = [sys.executable, *command[1:]]  # this node's Python, running the tree's recipe.py
        command[command.index("--results_dir") + 1] = str(root)
        start = time.time()
        with open(Path(tmp) / "cell.log", "w", encoding="utf-8") as out:
            code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
        timing = {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.time(),
                  "host": socket.gethostname(), "exit_code": code}
        log = (Path(tmp) / "cell.log").read_text(encoding="utf-8", errors="replace")
        if code != 0:
            raise CellFailed(code, log, timing)
        patterns = [p.format(cell=cell_name) for p in RETURNED]
        files = {}
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and any(fnmatch.fnmatchcase(rel, p) for p in patterns):
                data = path.read_bytes()
                if sent.get(rel) != data:  # what was shipped in unchanged stays out of the answer
                    files[rel] = data
        return {"files": files, "log": log, "timing": timing}


def _files_of(folder: Path, root: Path, patterns: tuple[str, ...]) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for pattern in patterns for p in sorted(folder.glob(pattern))
            if p.is_file()}


def _install_base(root: Path, files: dict[str, bytes]) -> None:
    """The base evaluations a task computed, into this tree's shared cache: samples first, each file atomically,
    none overwritten (a file already here is this tree's, which every local cell carries)."""
    for rel in sorted(files, key=lambda r: r.endswith(".json")):
        target = root / rel
        if rel.startswith("base-evals/") and not target.exists():
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(files[rel])
            os.replace(tmp, target)


def _install_cell(grid: Grid, root: Path, cell: Cell, files: dict[str, bytes]) -> str:
    """A cell a Ray task ran, into the grid only through `merge`: written to a staging folder (a sweep folder of its
    own beside the cells), verified there as any incoming cell is (plan_merge), then written file by file atomically.
    A refused cell stays in the staging folder, named in the SweepError, and the grid is untouched."""
    import uuid

    staging = root / ".incoming" / f"{cell.name}-{uuid.uuid4().hex[:8]}"
    for rel, data in files.items():
        if rel.startswith(f"{cell.name}/"):
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
    try:
        lines = merge(grid, staging)
    except SweepError as e:
        raise SweepError(f"{e} (its files: {staging})") from None
    shutil.rmtree(staging)
    if not any((root / ".incoming").iterdir()):
        (root / ".incoming").rmdir()
    return "; ".join(lines)


def ray_init_kwargs(address: str | None) -> dict:
    """ray.init's arguments for a sweep. The tree travels as the job's working_dir (Ray packs it once and every node
    unpacks it): each node runs this very recipe.py, uncommitted edits included, with no shared filesystem or
    checkout to keep in step; the cells' files travel as task arguments and answers. Quiet: each cell's output goes
    to its log."""
    import logging

    return {"address": address, "logging_level": logging.WARNING, "log_to_driver": False,
            "runtime_env": {"working_dir": str(Path(__file__).resolve().parent), "excludes": RAY_EXCLUDES}}


def _answers(address: str, timeout: float = 10.0) -> OSError | None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        return e
    return None


def _ray_address(address: str | None) -> str | None:
    """The address for ray.init, checked first: ray.init waits minutes on a HOST:PORT that does not answer. None:
    RAY_ADDRESS, else the cluster `ray start` made on this machine (Ray's /tmp/ray/ray_current_cluster) if it still
    answers (a head killed without `ray stop` leaves the file behind), else "local", a new local cluster."""
    if address is None:
        if os.environ.get("RAY_ADDRESS"):
            return None
        latest = Path("/tmp/ray/ray_current_cluster")
        found = latest.read_text().strip() if latest.is_file() else ""
        return None if found and _answers(found, 2.0) is None else "local"
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:  # else "auto" or a ray:// client address: Ray's to resolve
        error = _answers(address)
        if error is not None:
            raise SweepError(f"--ray {address}: no Ray head answers there ({error.strerror or error}); start one "
                             f"with `ray start --head` and give the address it prints") from None
    return address


def run_ray(grid: Grid, extra: list[str], only: str | None = None, base_only: bool = False,
            address: str | None = None, runs_per_gpu: int = 1, retries: int = 2) -> list[str]:
    """Every missing cell process as a Ray task asking for 1/runs_per_gpu GPU (one CPU on a cluster without GPUs), on
    the cluster at `address` (None: the running one `ray start` made here, else a new local one; an initialized Ray
    is used as it is). The base evaluations run first as one task and are shipped to every cell task, so no node
    computes them again; each task is retried `retries` times (a failed process or a lost worker); its cell enters
    the grid through _install_cell. Returns the failed cells, as `run` does."""
    try:
        import ray
    except ImportError:
        raise SweepError(f"--ray needs Ray, which is not installed here: {RAY_EXTRA}") from None
    todo = _todo(grid, only, base_only)
    if not todo:
        return []
    root = Path(grid.results_dir) / grid.name
    log_dir = root / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    started_here = not ray.is_initialized()  # else the caller's Ray, as it is (tests: ray_init_kwargs + resources)
    if started_here:
        address = _ray_address(address)
        try:
            ray.init(**ray_init_kwargs(address))
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise SweepError(f"--ray {address or ''}: cannot reach the Ray cluster ({str(e).splitlines()[0]}; a head "
                             f"started with a token needs RAY_AUTH_MODE=token here: docs/scale.md)") from None
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        share = {"num_gpus": 1 / runs_per_gpu} if gpus else {"num_cpus": 1}
        task = ray.remote(run_cell_here).options(max_retries=retries, retry_exceptions=True, **share)
        units = by_cell(todo)
        print(f"[sweep] {grid.name}: {len(todo)} job(s) in {len(units)} cell process(es) as Ray tasks on "
              f"{ray.cluster_resources().get('CPU', 0):g} CPU(s), {gpus:g} GPU(s), {share}; base evaluations first")

        def finish(cell: Cell, arms: tuple[str, ...], ref) -> tuple[dict | None, str | None]:
            """The task's answer (None if it failed for good), its log and timing written, and why it failed."""
            name = _log_name(cell, arms)
            try:
                answer, reason = ray.get(ref), None
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)  # CellFailed (by value when sweep.py runs as a script)
                if type(cause).__name__ == "CellFailed":
                    answer, reason = {"log": cause.log, "timing": cause.timing}, str(cause)
                else:
                    answer, reason = None, str(cause or e).strip().splitlines()[-1]
            except ray.exceptions.RayError as e:  # the worker or its node was lost, more often than retried
                answer, reason = None, str(e).strip().splitlines()[0]
            if answer is not None:
                t = answer["timing"]
                with open(log_dir / name, "a", encoding="utf-8") as out:
                    out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t['start']))} Ray task on "
                              f"{t['host']} (gpu {t['gpu']}) {' '.join(_command(grid, cell, arms, extra))}\n")
                    out.write(answer["log"])
                write_timing(log_dir, cell, arms, t["gpu"], runs_per_gpu, t["start"], t["end"], t["exit_code"],
                             t["host"])
            return (None if reason else answer), (f"{cell.name} {','.join(arms)}: {reason} (see {log_dir / name})"
                                                  if reason else None)

        first = todo[0][0]
        base_sent = _files_of(root / "base-evals", root, ("*.json", "*.jsonl.xz"))
        answer, failure = finish(first, ("base",), task.remote(_command(grid, first, ("base",), extra), grid.name,
                                                                first.name, base_sent))
        if failure:
            return [failure]
        _install_base(root, answer["files"])
        if base_only:
            return []
        base_ref = ray.put(_files_of(root / "base-evals", root, ("*.json", "*.jsonl.xz")))  # once, to every node
        refs = {}
        for cell, arms in units:
            own = _files_of(root / cell.name, root, ("results.json", "samples-*.jsonl.xz"))  # its finished arms
            refs[task.remote(_command(grid, cell, arms, extra), grid.name, cell.name, base_ref, own)] = (cell, arms)
        failed, done = [], 0
        pending = list(refs)
        slots = max(1, int((gpus * runs_per_gpu) if gpus else ray.cluster_resources().get("CPU", 1)))
        begun = [time.time()] * min(slots, len(pending))  # start times: a task starts when a slot frees
        took: list[tuple[float, int]] = []  # (seconds, arms) of each finished task
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            cell, arms = refs[ready[0]]
            answer, failure = finish(cell, arms, ready[0])
            status = "ok"
            if answer is not None:
                try:
                    status = f"ok, {_install_cell(grid, root, cell, answer['files'])}"
                except SweepError as e:
                    failure = f"{cell.name} {','.join(arms)}: refused: {e}"
            if failure:
                failed.append(failure)
                status = "FAILED"
            done += 1
            now = time.time()
            begun.sort()
            took.append((now - begun.pop(0), len(arms)))  # the earliest started ends first, as far as we can tell
            if done + len(begun) < len(units):
                begun.append(now)
            left = [len(refs[r][1]) for r in pending]  # in submission order: the first len(begun) are running
            eta = time_left(seconds_per_arm(took), list(zip((now - b for b in sorted(begun)), left)),
                            left[len(begun):], slots)
            print(f"[sweep] {done}/{len(units)} {cell.name} {','.join(arms)}: {status}; about {eta / 60:.0f} min "
                  f"left", flush=True)
        return failed
    finally:
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------------------- summary
def _paired(a: dict[str, float], b: dict[str, float]) -> tuple[list[float], list[float]]:
    if a.keys() != b.keys():
        raise SweepError("two arms were evaluated on different tasks; cells of one sweep must share the held-out set")
    keys = sorted(a)
    return [a[k] for k in keys], [b[k] for k in keys]


def _pooled(scores: dict, a: tuple[str, float, str], b: tuple[str, float, str], seeds: list[int]) -> dict:
    """stats.pooled_delta of arm a against arm b, each given as (variant, learning rate, arm), over `seeds`, the
    per-task scores paired by task: the one computation behind every pooled row and the primary test."""
    from gmts_recipe.stats import pooled_delta

    pairs = [_paired(scores[(*a[:2], s, a[2])], scores[(*b[:2], s, b[2])]) for s in seeds]
    return pooled_delta([p[0] for p in pairs], [p[1] for p in pairs])


MECHANISM = ("selection/effective_answers", "selection/top_answer_weight_share", "selection/zero_advantage_kept_share",
             "update/cosine_prev", "grad_norm")


def _mechanism(train_log: list[dict]) -> dict[str, float | None]:
    """Median over the steps of how concentrated each update was: how many answers the kept tokens
    spread over, the top answer's share of the kept |omega| per group, the share of kept tokens that move nothing
    (advantage 0; logged since 2026-11-30d, None before), and how aligned successive updates were."""
    import statistics

    out = {}
    for key in MECHANISM:
        values = [row[key] for row in train_log if isinstance(row.get(key), (int, float))]
        out[key] = statistics.median(values) if values else None
    return out


LATE, EARLY = slice(-10, None), slice(None, 10)  # the last and the first 10 logged steps


def _mean_reward(train_log: list[dict], window: slice) -> float | None:
    """The mean training reward over `window` of the logged steps (None when the log has no reward)."""
    rewards = [row["reward"] for row in train_log if isinstance(row.get("reward"), (int, float))][window]
    return sum(rewards) / len(rewards) if rewards else None


def training_reward_fell(train_log: list[dict]) -> bool:
    """Training made the policy worse at its own task: the mean training reward of the last 10 steps lies below that
    of the first 10 (the training-side counterpart of collapsing below the base; windows overlap below 20 steps)."""
    late, early = _mean_reward(train_log, LATE), _mean_reward(train_log, EARLY)
    return late is not None and late < early


def summarize(grid: Grid) -> dict:
    """Every number of the sweep, from the cells' verified results files (`load`, as check.py verifies a cell) alone."""
    from gmts_recipe.stats import sd_interval, seeds_for_power

    root = Path(grid.results_dir) / grid.name
    cells, scores, seen, training = [], {}, [], {}
    base_hashes = set()
    for cell in grid.cells():
        path = root / cell.name / "results.json"
        if not path.is_file():
            continue
        results = load(path)
        seen.append(recorded(cell, results))
        s = results["summary"]
        base_hashes.add(json.dumps(sorted(task_scores(results["base"]["evals"][0], f"{cell.name} base").items())))
        arms = {}
        for arm, entry in results.get("arms", {}).items():
            scores[(cell.variant, cell.learning_rate, cell.seed, arm)] = task_scores(entry["eval"], f"{cell.name} {arm}")
            training[(cell.variant, cell.learning_rate, cell.seed, arm)] = entry.get("train_log", [])
            a = s["arms"][arm]
            arms[arm] = {"pass@1": a["pass@1"], "vs_base": a["vs_base"], "verdict": a["verdict"],
                         "late_reward": _mean_reward(entry.get("train_log", []), LATE),
                         "mechanism": _mechanism(entry.get("train_log", []))}
        cells.append({"cell": cell.name, "variant": cell.variant, "learning_rate": cell.learning_rate,
                      "seed": cell.seed, "path": str(path.relative_to(root)), "digest": results["digest"],
                      "base_mean": s["base"]["mean"], "noise_floor": s["base"]["noise_floor"], "arms": arms})
    check_together(seen)
    if len(base_hashes) > 1:
        raise SweepError("cells disagree on the base evaluation: they must share held-out tasks and base samples")
    pooled = []
    settings = sorted({(c["variant"], c["learning_rate"]) for c in cells})
    for variant, lr in settings:
        seeds = sorted(c["seed"] for c in cells if (c["variant"], c["learning_rate"]) == (variant, lr))
        for a, b in COMPARISONS:
            both = [s for s in seeds if (variant, lr, s, a) in scores and (variant, lr, s, b) in scores]
            if not both:
                continue
            d = _pooled(scores, (variant, lr, a), (variant, lr, b), both)
            pooled.append({"variant": variant, "learning_rate": lr, "comparison": f"{a} - {b}", "seeds": both,
                           "comparison_kind": "shared learning rate", **d})
            if f"{a} - {b}" in CLAIMED and len(both) >= 3:  # seeds this spread needs to detect the paper's gains
                pooled[-1]["per_seed_sd"] = dict(zip(("sd", "low", "high"), sd_interval(d["per_seed"])))
                pooled[-1]["seeds_for_power"] = {  # None: more than MAX_SEEDS
                    f"{100 * e:+.1f}": seeds_for_power(d["per_seed"], e, power=POWER, max_seeds=MAX_SEEDS)
                    for e in CLAIMED[f"{a} - {b}"]}
    best = best_stable(training)
    for variant in sorted({c["variant"] for c in cells}):
        lr_of = {row["arm"]: row["learning_rate"] for row in best if row["variant"] == variant}
        for a, b in COMPARISONS:
            if a not in lr_of or b not in lr_of or lr_of[a] == lr_of[b]:
                continue  # same learning rate: already a "shared learning rate" row
            key_a, key_b = (variant, lr_of[a]), (variant, lr_of[b])
            both = sorted({s for (v, lr, s, arm) in scores if (v, lr, arm) == (*key_a, a)}
                          & {s for (v, lr, s, arm) in scores if (v, lr, arm) == (*key_b, b)})
            if not both:
                continue
            d = _pooled(scores, (*key_a, a), (*key_b, b), both)
            pooled.append({"variant": variant, "learning_rate": None, "learning_rates": {a: lr_of[a], b: lr_of[b]},
                           "comparison": f"{a} - {b}", "seeds": both,
                           "comparison_kind": "each arm at its own best stable learning rate", **d})
    out = {"schema": SCHEMA, "kind": "sweep", "name": grid.name, "config": grid.config, "cells": cells,
           "pooled": pooled, "best_stable": best}
    if grid.primary is not None:
        out["primary"] = primary_test(grid.primary, scores)
    if grid.secondary:
        out["secondary"] = [secondary_test(spec, grid.primary, scores) for spec in grid.secondary]
    out["digest"] = digest(out)
    return out


def _planned_comparison(comparison: str, variant: str, learning_rate: float, seeds: list[int], scores: dict) -> dict:
    """A comparison over the planned seeds that have run both arms: those seeds and, from two on, the pooled delta
    with its t interval and per-seed values (None and [] before); the computation behind the primary test and each
    secondary one."""
    a, b = comparison.split(" - ")
    key = (variant, learning_rate)
    done = [s for s in seeds if (*key, s, a) in scores and (*key, s, b) in scores]
    out = {"seeds_done": done, "delta": None, "t_low": None, "t_high": None, "per_seed": []}
    if len(done) >= 2:
        d = _pooled(scores, (*key, a), (*key, b), done)
        out.update(delta=d["delta"], t_low=d["t_low"], t_high=d["t_high"], per_seed=d["per_seed"])
    return out


def primary_test(spec: dict, scores: dict) -> dict:
    """The analysis plan's primary test: its comparison over its planned seeds only (a seed counts once both arms
    have run), Student's t over the per-seed deltas, and the plan's decision, which is "interim" until every planned
    seed has run: the plan commits to running all of them whatever the interim rows show."""
    from gmts_recipe.stats import plan_decision

    out = {**spec, **_planned_comparison(spec["comparison"], spec["variant"], spec["learning_rate"], spec["seeds"],
                                         scores)}
    complete = len(out["seeds_done"]) == len(spec["seeds"])
    out["decision"] = plan_decision(100 * out["t_low"], 100 * out["t_high"], spec["reproduced_above_points"],
                                    spec["refuted_below_points"]) if complete else "interim"
    return out


def secondary_test(spec: dict, primary: dict, scores: dict) -> dict:
    """A secondary comparison of the plan: over its planned seeds that have run both arms, at the primary test's
    variant and learning rate, Student's t over the per-seed deltas; an interval, never a decision ("interim" until
    every planned seed has run)."""
    out = {**spec, "variant": primary["variant"], "learning_rate": primary["learning_rate"],
           **_planned_comparison(spec["comparison"], primary["variant"], primary["learning_rate"], spec["seeds"],
                                 scores)}
    out["status"] = "complete" if len(out["seeds_done"]) == len(spec["seeds"]) else "interim"
    return out


def _seed_span(seeds: list[int]) -> str:
    """200-299 for consecutive seeds, else the list."""
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def secondary_line(s: dict) -> str:
    """One line for a secondary comparison: where it stands, its interval, never a decision."""
    seeds = s["seeds"]
    head = f"Secondary (planned, interval only): {s['comparison']} over seeds {_seed_span(seeds)}:"
    if s["delta"] is None:
        return f"{head} {len(s['seeds_done'])} of {len(seeds)} seeds have run, no interval yet."
    return (f"{head} {'' if s['status'] == 'complete' else 'so far '}{len(s['seeds_done'])} of {len(seeds)} seeds, "
            f"{100 * s['delta']:+.1f} points, t {_bracket(s['t_low'], s['t_high'])}"
            f"{'' if s['status'] == 'complete' else ' (interim)'}.")


def primary_line(p: dict) -> str:
    """One paragraph: the primary test as the plan states it, where it stands, and its decision (or why none yet)."""
    from gmts_recipe.stats import signed

    seeds = p["seeds"]
    head = (f"Primary test (analysis plan fixed {p['fixed_on']}): {p['comparison']} at lr "
            f"{p['learning_rate']:g} ({p['variant']}) over seeds {_seed_span(seeds)}, Student's t over the per-seed deltas, 95%; "
            f"reproduced if the interval lies above {signed(p['reproduced_above_points'])} points, refuted at "
            f"{signed(p['refuted_below_points'])} if its upper end lies below that.")
    if p["delta"] is None:
        return f"{head} {len(p['seeds_done'])} of {len(seeds)} seeds have run: no interval yet."
    now = (f"{len(p['seeds_done'])} of {len(seeds)} seeds: {100 * p['delta']:+.1f} points, t "
           f"{_bracket(p['t_low'], p['t_high'])}")
    if p["decision"] == "interim":
        return f"{head} So far {now}: interim, no decision until every planned seed has run."
    return f"{head} All {now}: **{p['decision']}**."


def best_stable(training: dict[tuple[str, float, int, str], list[dict]]) -> list[dict]:
    """Each arm's best stable learning rate per variant, from the training logs alone, keyed (variant, learning rate,
    seed, arm): the held-out scores are not among the inputs (choosing on the test set would inflate the chosen arm).
    Stable: no seed's training reward fell (training_reward_fell) and every seed logged a reward. Best: among the
    stable ones, the highest late training reward (mean reward of the last 10 steps, averaged over seeds); a tie goes
    to the smaller learning rate."""
    out = []
    for variant in sorted({v for v, _, _, _ in training}):
        for arm in ARM_ORDER:
            by_lr: dict[float, list[list[dict]]] = {}
            for (v, lr, _, a), log in training.items():
                if (v, a) == (variant, arm):
                    by_lr.setdefault(lr, []).append(log)
            stable = {lr: [_mean_reward(log, LATE) for log in logs] for lr, logs in by_lr.items()
                      if all(_mean_reward(log, LATE) is not None and not training_reward_fell(log) for log in logs)}
            if stable:
                lr = max(stable, key=lambda x: (sum(stable[x]) / len(stable[x]), -x))
                out.append({"variant": variant, "arm": arm, "learning_rate": lr,
                            "late_reward": sum(stable[lr]) / len(stable[lr]), "seeds": len(stable[lr])})
    return out


def verify(path: str | Path) -> dict:
    """Recompute a sweep.json from its grid and the cells' own results files; raise SweepError on any difference."""
    p = Path(path)
    summary = json.loads(p.read_text(encoding="utf-8"))
    if summary.get("digest") != digest(summary):
        raise SweepError(f"{p}: digest mismatch: the file was edited after sweep.py wrote it")
    grid_path = p.parent / "grid.yaml"
    if not grid_path.is_file():
        raise SweepError(f"{p}: the grid it was made from ({grid_path}) is missing")
    grid = load_grid(grid_path)
    grid.results_dir = str(p.parent.parent)
    recomputed = summarize(grid)
    if not _close(recomputed, summary):
        raise SweepError(f"{p}: {_first_difference(recomputed, summary, 'sweep')}")
    return summary


def write_summary(grid: Grid, grid_path: str | Path) -> Path:
    root = Path(grid.results_dir) / grid.name
    root.mkdir(parents=True, exist_ok=True)
    (root / "grid.yaml").write_text(Path(grid_path).read_text(encoding="utf-8"), encoding="utf-8")
    summary = summarize(grid)
    path = root / "sweep.json"
    write_json(path, summary)
    plot(summary, root / "sweep.png")
    return path


def plot(summary: dict, out: Path) -> None:
    """pass@1 against learning rate per arm (each seed a point, the seed mean a line, the base a band), and each
    pooled comparison with its two-level interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cells = summary["cells"]
    variants = sorted({c["variant"] for c in cells})
    if not cells:
        return
    fig, axes = plt.subplots(len(variants), 2, figsize=(12, 4 * len(variants)), squeeze=False)
    for row, variant in zip(axes, variants):
        ax, bx = row
        mine = [c for c in cells if c["variant"] == variant]
        base, floor = mine[0]["base_mean"], mine[0]["noise_floor"]
        ax.axhspan(base - floor / 2, base + floor / 2, color="0.7", label=f"base {100 * base:.1f}% (noise floor)")
        ax.axhline(base, color="0.5", lw=0.8)
        for arm in ARM_ORDER:
            pts = sorted((c["learning_rate"], c["arms"][arm]["pass@1"]) for c in mine if arm in c["arms"])
            if not pts:
                continue
            ax.scatter(*zip(*pts), color=ARM_COLORS[arm], s=14, alpha=0.6)
            lrs = sorted({lr for lr, _ in pts})
            means = [sum(v for x, v in pts if x == lr) / sum(1 for x, _ in pts if x == lr) for lr in lrs]
            ax.plot(lrs, means, color=ARM_COLORS[arm], marker="o", label=f"{arm} (seed mean)")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("pass@1 (held-out)")
        ax.set_ylim(0, 1)
        ax.set_title(f"{summary['name']} / {variant}: pass@1 per seed")
        ax.legend(fontsize=8)
        for i, comparison in enumerate(f"{a} - {b}" for a, b in COMPARISONS):
            rows = [p for p in summary["pooled"] if p["variant"] == variant and p["comparison"] == comparison
                    and p["learning_rate"] is not None]
            if not rows:
                continue
            x = [p["learning_rate"] * (1 + 0.04 * (i - 1)) for p in rows]
            y = [100 * p["delta"] for p in rows]
            err = [[100 * (p["delta"] - p["low"]) for p in rows], [100 * (p["high"] - p["delta"]) for p in rows]]
            line = bx.errorbar(x, y, yerr=err, fmt="o", capsize=3,
                               label=f"{comparison} ({', '.join(str(len(p['seeds'])) for p in rows)} seeds)")
            t_rows = [(xi, p) for xi, p in zip(x, rows) if p.get("t_low") is not None]
            if t_rows:  # Student's t over the seeds: the honest width with few of them (thin, same colour)
                bx.errorbar([xi for xi, _ in t_rows], [100 * p["delta"] for _, p in t_rows],
                            yerr=[[100 * (p["delta"] - p["t_low"]) for _, p in t_rows],
                                  [100 * (p["t_high"] - p["delta"]) for _, p in t_rows]],
                            fmt="none", lw=0.8, alpha=0.5, color=line[0].get_color())
        bx.axhline(0, color="k", lw=0.8)
        bx.set_xscale("log")
        grid_lrs = sorted({c["learning_rate"] for c in mine})
        for axis in (ax, bx):  # the grid's learning rates as ticks: log-scale minor labels overlap at 2e-5..4e-5
            axis.set_xticks(grid_lrs, [f"{lr:g}" for lr in grid_lrs], rotation=30, fontsize=8)
            axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        bx.set_xlabel("learning rate")
        bx.set_ylabel("difference in pass@1 (points)")
        bx.set_title("pooled over seeds, 95% CI: bootstrap seeds then tasks (caps), t over seeds (thin)",
                     fontsize=9)
        if bx.get_legend_handles_labels()[0]:  # a variant with one arm has no comparison to label
            bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


# Seeds a pooled interval needs before its seed level means anything (at least 3 per arm).
MIN_SEEDS = 3
# Below this many seeds the bootstrap's seed level, which can only redraw the seeds it has, understates their spread
# (with 3 seeds it gave [+0.2, +3.7] where t over the same deltas gave [-1.8, +5.9]): the t interval is the one to read.
FEW_SEEDS = 5


def seeds_label(n: int) -> str:
    """What a pooled interval over n seeds covers: with one seed only tasks; with two the seed level of the bootstrap
    can only redraw those two, so the interval spans their values and is no estimate of seed-to-seed variance; with
    fewer than FEW_SEEDS the bootstrap is too narrow and the t interval is the honest one."""
    if n == 1:
        return "1 (interval over tasks only)"
    if n < MIN_SEEDS:
        return f"{n} (too few for the seed level: the interval spans these seeds)"
    if n < FEW_SEEDS:
        return f"{n} (few: the bootstrap understates the seed spread; read t)"
    return str(n)


def _bracket(low: float, high: float) -> str:
    return f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def _interval(p: dict) -> str:
    return f"{100 * p['delta']:+.1f} {_bracket(p['low'], p['high'])}"


def render(summary: dict, markdown: bool = False) -> str:
    """The sweep's tables: pass@1 per (variant, learning rate) and arm with every seed, then each pooled comparison
    with its two-level interval and the comparison it is (shared learning rate, or each arm at its own best)."""
    cells = summary["cells"]
    columns = [a for a in ARM_ORDER if a not in CONTROL_ARMS or any(a in c["arms"] for c in cells)]
    rows1 = []
    for variant, lr in sorted({(c["variant"], c["learning_rate"]) for c in cells}):
        mine = sorted((c for c in cells if (c["variant"], c["learning_rate"]) == (variant, lr)), key=lambda c: c["seed"])
        row = [variant, f"{lr:g}"]
        for arm in columns:
            runs = [(c["seed"], c["arms"][arm]) for c in mine if arm in c["arms"]]
            if not runs:
                row.append("-")
                continue
            mean = sum(r["pass@1"] for _, r in runs) / len(runs)
            seeds = ", ".join(f"{_pct(r['pass@1'])}" + ("*" if r["verdict"] == "collapsed" else "") for _, r in runs)
            row.append(f"{_pct(mean)} ({seeds})")
        rows1.append(row)
    head1 = ["variant", "lr", *(ARM_COLUMNS[a] for a in columns)]
    rows2 = []
    for p in summary["pooled"]:
        lr = f"{p['learning_rate']:g}" if p["learning_rate"] is not None else \
            ", ".join(f"{a} {v:g}" for a, v in p["learning_rates"].items())
        seeds = seeds_label(len(p["seeds"]))
        t = "-" if p.get("t_low") is None else _bracket(p["t_low"], p["t_high"]) + " pts"
        need = p.get("seeds_for_power") or {}
        power = " / ".join(f"{f'>{MAX_SEEDS}' if n is None else n} at {e}" for e, n in need.items()) or "-"
        sd = p.get("per_seed_sd")
        sd = "-" if sd is None else f"{100 * sd['sd']:.1f} [{100 * sd['low']:.1f}, {100 * sd['high']:.1f}]"
        rows2.append([p["variant"], p["comparison"], p["comparison_kind"], lr, seeds,
                      _interval(p) + " pts", t,
                      ", ".join(f"{100 * d:+.1f}" for d in p.get("per_seed", [])), sd, power])
    head2 = ["variant", "comparison", "which comparison", "lr", "seeds", "pooled delta (95% CI, seeds then tasks)",
             "95% CI, t over seeds", "per seed", "per-seed SD (95% CI, pts)",
             f"seeds for {POWER:.0%} power at the paper's gain (pts)"]
    rows3 = []
    for c in sorted(cells, key=lambda c: (c["variant"], c["learning_rate"], c["seed"])):
        for arm in ARM_ORDER:
            if arm in c["arms"] and "mechanism" in c["arms"][arm]:
                m = c["arms"][arm]["mechanism"]
                rows3.append([c["variant"], f"{c['learning_rate']:g}", str(c["seed"]), arm,
                              *("-" if m[k] is None else f"{m[k]:.3g}" for k in MECHANISM)])
    head3 = ["variant", "lr", "seed", "arm", "effective answers (of the batch)", "top answer's share of kept |omega|",
             "kept tokens in zero-advantage answers", "cosine with the previous update", "grad norm"]
    base = cells[0] if cells else None
    note = (f"{summary['name']}: {len(cells)} cells; base pass@1 {_pct(base['base_mean'])} (noise floor "
            f"{100 * base['noise_floor']:.1f} pts); per arm: mean over seeds (each seed); * = collapsed below the "
            f"base. Best stable lr (training logs only: the highest late training reward among the learning rates "
            f"where no seed's training reward fell; never test scores): "
            + ", ".join(f"{r['variant']}/{r['arm']} {r['learning_rate']:g}" for r in summary["best_stable"])
            + ".") if base else f"{summary['name']}: no finished cells yet."
    mechanism = "Per training step, median over the steps:\n\n" + _table(head3, rows3, markdown)
    primary = [primary_line(summary["primary"])] if "primary" in summary else []
    primary += [secondary_line(s) for s in summary.get("secondary", [])]
    return "\n\n".join([*primary, _table(head1, rows1, markdown), _table(head2, rows2, markdown), note, mechanism])


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
        return "\n".join(["| " + " | ".join(cell(x) for x in header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [header, *rows])


def parse_gpus(text: str | None, visible: int | None = None) -> list[str]:
    """The --gpus list, checked before anything runs: a typo would otherwise start every cell's process with a
    CUDA_VISIBLE_DEVICES that hides every GPU, and each would fail (or run on the CPU) only after its start-up.
    Ids are indices below the visible count (repeat one for two workers) or GPU-/MIG- UUIDs, passed through."""
    if text is None:
        return []
    ids = [g.strip() for g in text.split(",")]
    if visible is None:
        import torch

        visible = torch.cuda.device_count()
    for g in ids:
        if g.startswith(("GPU-", "MIG-")):
            continue
        if not g.isdigit():
            raise SweepError(f"--gpus {text}: {g!r} is not a GPU index (e.g. --gpus 0,1)")
        if int(g) >= visible:
            raise SweepError(f"--gpus {text}: GPU {g} is not visible here ("
                             + (f"{visible} GPU(s): 0-{visible - 1})" if visible else
                                "no GPU: leave out --gpus for one worker on this machine)"))
    return ids


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(usage="python sweep.py GRID [options] [-- recipe.py arguments]",
                                 description="Run a grid of recipe.py experiments and summarize it. Whatever follows "
                                             "-- goes to every cell's recipe.py (e.g. -- --gsm8k_path DIR).")
    ap.add_argument("grid", help="sweep file (configs/sweeps/*.yaml)")
    ap.add_argument("--gpus", default=None, help="comma-separated GPU ids, --runs_per_gpu workers each; repeat an id "
                                                 "for another worker on that GPU (default: one worker)")
    ap.add_argument("--only", default=None, help="run only the block of this name (comma-separated: these blocks, "
                                                 "in the grid's order)")
    ap.add_argument("--plan", action="store_true", help="print the jobs still to run, with the GPU time they take "
                                                      "at the pace in logs/timing.jsonl, and exit")
    ap.add_argument("--summarize", action="store_true", help="only write sweep.json and sweep.png")
    ap.add_argument("--base", action="store_true", help="only the base evaluations (cached for every cell)")
    ap.add_argument("--merge", default=None, metavar="DIR", help="bring in the cells of another tree's sweep folder "
                    "(DIR/<cell>/results.json, logs/), paired with this tree's base evaluation; nothing runs")
    ap.add_argument("--results_dir", default=None, help="parent of the sweep's folder (default: the grid's)")
    ap.add_argument("--runs_per_gpu", type=int, default=1, metavar="K",
                    help="K cells at once per GPU: K workers per --gpus id, or 1/K GPU per Ray task. Start CUDA MPS "
                         "first (nvidia-cuda-mps-control -d, with CUDA_MPS_PIPE_DIRECTORY and "
                         "CUDA_MPS_LOG_DIRECTORY set): 4 cells under MPS gave 1.55x the cells per GPU-hour on one "
                         "H200, time-slicing without it little")
    ap.add_argument("--warm_workers", action="store_true",
                    help="each worker runs its cells one after another in one Python process (the imports, the CUDA "
                         "context and the compiled generation step paid once per worker, not per cell; a process "
                         "whose cell fails is replaced); the same settings, only the scheduling differs")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run each cell as a Ray task: on the cluster at ADDRESS (HEAD:6379), else on the one "
                         "`ray start` made here, else on a new local one (" + RAY_EXTRA + ")")
    ap.add_argument("--retries", type=int, default=2, help="with --ray: times a failed or lost cell task is run "
                                                           "again (default 2)")
    ap.add_argument("--commands", action="store_true", help="print one shell line per missing cell process, the "
                    "base evaluations first (a Slurm job array: README, Scale), and exit")
    ap.add_argument("--time_limit", type=float, default=None, metavar="MINUTES",
                    help="local pool: start no arm that would end more than MINUTES after the sweep's start, at the "
                         "pace measured so far (an allocation's wall-clock limit); the arms left run when the same "
                         "command runs again")
    args, stray = ap.parse_known_args(argv)
    if stray:  # most often a recipe.py option given without the -- before it
        print(f"sweep.py: unrecognized arguments: {' '.join(stray)} (recipe.py's options go after --: python sweep.py "
              f"GRID [options] -- {' '.join(stray)})", file=sys.stderr)
        return 2
    try:
        grid = load_grid(args.grid)
        if args.results_dir is not None:
            grid.results_dir = args.results_dir
        blocks = [b["name"] for b in grid.blocks]
        unknown = [] if args.only is None else [n for n in args.only.split(",") if n not in blocks]
        if unknown:
            raise SweepError(f"no block named {unknown[0]!r}; blocks: {', '.join(blocks)}")
        if args.runs_per_gpu < 1 or args.retries < 0:
            raise SweepError("--runs_per_gpu must be 1 or more and --retries 0 or more")
        if args.ray is not None and args.warm_workers:
            raise SweepError("--warm_workers is for the local pool; a Ray task runs one cell in its own process")
        if args.warm_workers and any("deterministic_kernels" in v for v in grid.variants.values()):
            raise SweepError("--warm_workers: a variant sets deterministic_kernels, which a process can turn on only "
                             "before its first CUDA work; run this grid without --warm_workers")
        if args.time_limit is not None and not args.time_limit > 0:
            raise SweepError(f"--time_limit must be a number of minutes above 0, not {args.time_limit:g}")
        if args.time_limit is not None and args.ray is not None:
            raise SweepError("--time_limit is for the local pool; a Ray cluster's tasks are scheduled by Ray")
        if args.ray is not None and args.gpus is not None:
            raise SweepError("--gpus picks this machine's GPUs for the local pool; with --ray each node offers its "
                             "own (set CUDA_VISIBLE_DEVICES before `ray start`)")
        if not (args.summarize or args.merge is not None):  # what launches cells, or plans them
            check_recipe_keys(grid, extra)
        if args.commands:
            lines = commands(grid, extra, args.only)
            print("\n".join(lines) if lines else "# nothing to run: every job has finished")
            return 0
        if args.plan:
            todo = jobs(grid, args.only)
            for cell, arm in todo:
                print(f"{cell.name:40s} {arm}")
            logs = Path(grid.results_dir) / grid.name / "logs"
            fresh, warm = recorded_pace(logs), recorded_pace(logs, warm=True)
            estimate = "" if not todo or fresh is None else (
                f"; about {len(todo) * fresh[0] / 60:.0f} GPU-min at the pace of logs/{TIMING} ({fresh[1]} arm-runs "
                f"alone on their GPU, {fresh[0] / 60:.1f} min each with their cell's startup)")
            if todo and warm is not None:
                estimate += (f"; about {len(todo) * warm[0] / 60:.0f} GPU-min in warm workers ({warm[1]} arm-runs, "
                             f"{warm[0] / 60:.1f} min each, plus each worker's start)")
            print(f"[sweep] {len(todo)} job(s) to run{estimate}")
            return 0
        if args.merge is not None:
            for line in merge(grid, Path(args.merge)):
                print(f"[sweep] merge {line}")
            return 0
        left: list[str] = []
        if args.summarize:
            failed = []
        elif args.ray is not None:
            failed = run_ray(grid, extra, args.only, base_only=args.base, address=args.ray or None,
                             runs_per_gpu=args.runs_per_gpu, retries=args.retries)
        else:
            gpus = parse_gpus(args.gpus)
            if (args.runs_per_gpu > 1 or shares_gpus(gpus)) and not mps_running():
                print("[sweep] several cells per GPU without CUDA MPS take turns on it (little gain): start it first "
                      "with nvidia-cuda-mps-control -d (docs/scale.md)", file=sys.stderr)
            failed = run(grid, gpus, extra, args.only, base_only=args.base, runs_per_gpu=args.runs_per_gpu,
                         warm_workers=args.warm_workers, time_limit=args.time_limit, left=left)
        path = write_summary(grid, args.grid)
        print(f"[sweep] summary: {path} (verify with: python check.py {path})")
        if left:
            shown = "; ".join(left[:4]) + ("; ..." if len(left) > 4 else "")
            print(f"[sweep] time limit: {len(left)} job(s) not started ({shown}); run the same command again to run "
                  f"them")
        if failed:
            print("[sweep] failed: " + "; ".join(failed), file=sys.stderr)
            return 1
    except SweepError as e:
        print(f"sweep.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sweep.py: interrupted; run the same command again to resume (finished arms are kept)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
