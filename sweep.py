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
    python sweep.py GRID --claim 6 --who NAME     # claim the next 6 free seeds (a file under <sweep folder>/claims/)
    python sweep.py GRID --who NAME -- ...        # run only the seeds NAME's claims hold
    python sweep.py GRID --pack DIR --who NAME    # the cells this machine ran, in one archive in DIR
    python sweep.py GRID --merge ARCHIVE          # every cell checked first; one that fails refuses the archive
    python sweep.py configs/sweeps/qwen.yaml --runs_per_gpu 4     # 4 cells at once per GPU (start CUDA MPS first)
    python sweep.py configs/sweeps/qwen.yaml --warm_workers       # a worker's cells in one process (startup once)
    python sweep.py configs/sweeps/qwen.yaml --ray                # cells as Ray tasks (a local cluster, or `ray start`'s)
    python sweep.py configs/sweeps/qwen.yaml --ray HEAD:6379      # cells on the workers of that Ray cluster
    python sweep.py configs/sweeps/qwen.yaml --commands           # one shell line per missing cell (Slurm job arrays)
    python sweep.py my_grid.yaml --rules my_rules.py              # arms of your own rules (each cell loads them too)
    python check.py results/confirm/sweep.json                    # verify: every cell recomputed from its results.json

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
and the compile are paid once per worker, not per cell. A sequential plan's cells run whole (`--overwrite`), in the
local pool, on a card the plan names (another is refused before anything starts); a cell process that fails leaves
the failure.json the plan's `failures:` read (gmts_recipe.sequential.failures). The summary pools each comparison over the
seeds of a (variant, learning rate) with a two-level bootstrap (seeds, then tasks: stats.pooled_delta), so its interval
includes seed-to-seed variance, and gives Student's t over the seeds beside it.

`--merge DIR` brings in cells that another machine ran (DIR: its sweep folder), without running anything: each
incoming results.json must verify, be the cell it is merged into (as above), and match the local cell's config hash
and held-out tasks and this tree's base evaluation hash; its arms join the local ones (an arm in both must be
identical), and the cell keeps this tree's shared base evaluation, the one every local cell carries. A base
evaluated again elsewhere (bf16 is not bit-exact) is replaced, and the file's `merges` says so with that base's
pass@1. Its absent logs are copied; then --summarize.
The samples files the merged cell names (its arms', the kept base's) are verified and re-scored and copied if absent.
`--merge ARCHIVE` (a file `--pack` wrote) checks every cell of it first, as check.py does and against the plan
(gmts_recipe.verify.plan.incoming_problems), and merges none unless all pass. Seeds are claimed so that two machines
never run the same ones (gmts_recipe.sweep.claims; how anyone adds seeds: docs/contribute-seeds.md).

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
import sys
from pathlib import Path

import recipe  # its field list: a typo in a variant or after -- is refused before any cell runs
from gmts_recipe.records import ResultsError
from gmts_recipe.sweep.grid import Grid, SweepError, check_recipe_keys, jobs, load_grid
from gmts_recipe.sequential.cards import refuse_cards
from gmts_recipe.sweep.local import commands, mps_running, parse_gpus, run, shares_gpus
from gmts_recipe.sweep import claims, pace
from gmts_recipe.sweep.archive import merge_archive, pack
from gmts_recipe.sweep.merge import merge
from gmts_recipe.sweep.ray_tasks import RAY_EXTRA, run_ray
from gmts_recipe.sweep.report import write_summary
from gmts_recipe.sweep.schedule import TIMING, recorded_pace
from gmts_recipe.user_rules import RULES_HELP, RULES_OPTION, RulesError, rules_arguments, take_rules


def parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--merge", default=None, metavar="DIR|ARCHIVE", help="bring in the cells of another tree's sweep "
                    "folder (DIR/<cell>/results.json, logs/), or of an archive of --pack, every cell checked first "
                    "(one that fails refuses the archive), paired with this tree's base evaluation; nothing runs")
    ap.add_argument("--pack", default=None, metavar="DIR", help="write the cells this machine ran (not committed here, "
                    "whole) with their samples and logs into one archive in DIR, to send for --merge; nothing runs")
    ap.add_argument("--claim", type=int, default=None, metavar="N", help="claim the next N free seeds of the plan for "
                    "--who (a file in <sweep folder>/claims/ to commit); nothing runs")
    ap.add_argument("--who", default=None, metavar="NAME", help="whose claims: a run takes only NAME's seeds, --claim "
                    "and --pack write NAME (without it a run leaves every claimed seed to its claimant)")
    ap.add_argument("--hours", type=float, default=claims.HOURS, help="how long a --claim holds (default "
                    f"{claims.HOURS:g} hours); its seeds are free again after")
    ap.add_argument("--results_dir", default=None, help="parent of the sweep's folder (default: the grid's)")
    ap.add_argument("--runs_per_gpu", type=int, default=1, metavar="K",
                    help="K cells at once per GPU: K workers per --gpus id, or 1/K GPU per Ray task. Start CUDA MPS "
                         "first (nvidia-cuda-mps-control -d, with CUDA_MPS_PIPE_DIRECTORY and "
                         "CUDA_MPS_LOG_DIRECTORY set): without it the processes take turns and gain little "
                         "(measurements: bench/docs/scaling.md)")
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
                    "base evaluations first (a Slurm job array: docs/scale.md), and exit")
    ap.add_argument("--time_limit", type=float, default=None, metavar="MINUTES",
                    help="local pool: start no arm that would end more than MINUTES after the sweep's start, at the "
                         "pace measured so far (an allocation's wall-clock limit); the arms left run when the same "
                         "command runs again")
    ap.add_argument(RULES_OPTION, metavar="FILE", help=RULES_HELP + "; passed on to every cell's recipe.py")
    return ap


def checked_grid(args: argparse.Namespace) -> Grid:
    """The grid file and the options together, each conflict one SweepError line before anything runs."""
    grid = load_grid(args.grid)
    if args.results_dir is not None:
        grid.results_dir = args.results_dir
    blocks = [b["name"] for b in grid.blocks]
    unknown = [] if args.only is None else [n for n in args.only.split(",") if n not in blocks]
    if unknown:
        raise SweepError(f"no block named {unknown[0]!r}; blocks: {', '.join(blocks)}")
    if args.runs_per_gpu < 1 or args.retries < 0:
        raise SweepError("--runs_per_gpu must be 1 or more and --retries 0 or more")
    if args.ray is not None and grid.sequential is not None:
        raise SweepError("--ray: a sequential plan's cells run in the local pool, whose runner records their failures "
                         "as the plan says (a Ray task's retries would run an arm's own failure again)")
    if args.ray is not None and args.warm_workers:
        raise SweepError("--warm_workers is for the local pool; a Ray task runs one cell in its own process")
    if args.warm_workers and any("deterministic_kernels" in v for v in grid.variants.values()):
        raise SweepError("--warm_workers: a variant sets deterministic_kernels, which a process can turn on only "
                         "before its first CUDA work; run this grid without --warm_workers")
    if args.time_limit is not None and not args.time_limit > 0:
        raise SweepError(f"--time_limit must be a number of minutes above 0, not {args.time_limit:g}")
    if args.claim is not None and args.who is None:
        raise SweepError("--claim N needs --who NAME: whose claim it is")
    if args.time_limit is not None and args.ray is not None:
        raise SweepError("--time_limit is for the local pool; a Ray cluster's tasks are scheduled by Ray")
    if args.ray is not None and args.gpus is not None:
        raise SweepError("--gpus picks this machine's GPUs for the local pool; with --ray each node offers its "
                         "own (set CUDA_VISIBLE_DEVICES before `ray start`)")
    return grid


def check_keys(grid: Grid, extra: list[str]) -> None:
    """The grid's variants and the options after -- against recipe.py's fields (the list a run here kept, else the
    config classes', a few seconds to import): only before cells are launched or planned, so --summarize and --merge,
    which launch nothing, leave it out."""
    check_recipe_keys(grid, recipe.known_field_names() or recipe.field_names(), list(recipe.cli_values(extra)))


def print_plan(grid: Grid, only: str | None, whole: Grid | None = None, minutes: float | None = None) -> None:
    """--plan: the jobs still to run, and the GPU time they take at the pace of logs/timing.jsonl; then the pace per
    card (the first seed, each seed after it, what a machine of `minutes` runs) and the claims of `whole` (the plan,
    where `grid` is the part of it this machine may run)."""
    todo = jobs(grid, only)
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
    left = len({cell for cell, _ in todo})
    for line in (pace.plan_lines(grid, left, minutes or 30.0) if left else []):
        print(f"[sweep] {line}")
    for line in claims.plan_lines(whole or grid, Path(grid.results_dir) / grid.name):
        print(f"[sweep] {line}")


def run_cells(grid: Grid, args: argparse.Namespace, extra: list[str], left: list[str]) -> list[str]:
    """The missing cells, as Ray tasks or in the local pool (nothing with --summarize); the failed ones."""
    if args.summarize:
        return []
    if args.ray is not None:
        return run_ray(grid, extra, args.only, base_only=args.base, address=args.ray or None,
                       runs_per_gpu=args.runs_per_gpu, retries=args.retries)
    gpus = parse_gpus(args.gpus)
    if grid.sequential is not None:  # before any cell starts, and the base evaluations with it
        refuse_cards(grid.sequential["cards"], gpus)
    if (args.runs_per_gpu > 1 or shares_gpus(gpus)) and not mps_running():
        print("[sweep] several cells per GPU without CUDA MPS take turns on it (little gain): start it first "
              "with nvidia-cuda-mps-control -d (docs/scale.md)", file=sys.stderr)
    return run(grid, gpus, extra, args.only, base_only=args.base, runs_per_gpu=args.runs_per_gpu,
               warm_workers=args.warm_workers, time_limit=args.time_limit, left=left)


def run_command(args: argparse.Namespace, extra: list[str], rules: list[str] = ()) -> int:
    """What the options ask for, once they are checked; a SweepError is the caller's one line. `rules`: the --rules
    options, passed on to every cell's recipe.py."""
    grid = checked_grid(args)
    folder = Path(grid.results_dir) / grid.name
    if args.claim is not None:
        print(f"[sweep] claim written: {claims.claim(grid, folder, args.claim, args.who, args.hours).line()}; commit "
              f"it (git add {folder / claims.FOLDER}) and send it (a pull request) before the run")
        return 0
    if args.pack is not None:
        for line in pack(grid, Path(args.grid), Path(args.pack), args.who)[1]:
            print(f"[sweep] pack {line}")
        return 0
    if args.merge is not None:
        incoming = Path(args.merge)
        lines = merge_archive(grid, Path(args.grid), incoming, recipe.cli_values(extra).get("gsm8k_path")) \
            if incoming.is_file() else merge(grid, incoming)
        for line in lines:
            print(f"[sweep] merge {line}")
        return 0
    if not args.summarize:  # what launches cells, or plans them
        check_keys(grid, extra)
    extra = [*extra, *rules]
    mine, said = (grid, []) if args.summarize else claims.runnable(grid, folder, args.who)  # what may run here
    for line in said:  # beside --commands' shell lines, not among them
        print(f"[sweep] claims: {line}", file=sys.stderr if args.commands else sys.stdout)
    if args.commands:
        lines = commands(mine, extra, args.only)
        print("\n".join(lines) if lines else "# nothing to run: every job has finished")
        return 0
    if args.plan:
        print_plan(mine, args.only, grid, args.time_limit)
        return 0
    left: list[str] = []
    failed = run_cells(mine, args, extra, left)
    path = write_summary(grid, args.grid)
    print(f"[sweep] summary: {path} (verify with: python check.py {path})")
    if left:
        shown = "; ".join(left[:4]) + ("; ..." if len(left) > 4 else "")
        print(f"[sweep] time limit: {len(left)} job(s) not started ({shown}); run the same command again to run "
              f"them")
    if failed:
        print("[sweep] failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the user's own rules (--rules FILE): this process reads the grid's arms, each cell's recipe.py trains them
        rules, argv = rules_arguments(argv), take_rules(argv)
    except RulesError as e:
        print(f"sweep.py: {e}", file=sys.stderr)
        return 2
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args, stray = parser().parse_known_args(argv)
    if stray:  # most often a recipe.py option given without the -- before it
        print(f"sweep.py: unrecognized arguments: {' '.join(stray)} (recipe.py's options go after --: python sweep.py "
              f"GRID [options] -- {' '.join(stray)})", file=sys.stderr)
        return 2
    try:
        return run_command(args, extra, rules)
    except (SweepError, ResultsError) as e:  # a cell's file refused as check.py refuses it: one line, no traceback
        print(f"sweep.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sweep.py: interrupted; run the same command again to resume (finished arms are kept)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
