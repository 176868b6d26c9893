"""One complete run timed as a user pays for it: the wall time of one `recipe.py --arm
ets,gmts` process from start to exit, i.e. model loading, the 3 base evaluations, the ETS and GMTS arms (40 steps
each, every compilation included) and their full-test evaluations, in a results directory of its own (refused when
it already holds the run or cached base evaluations: reusing them would time an incomplete run).

    python bench/complete_run.py --out bench/complete-run-h200.json -- --config configs/qwen.yaml --gsm8k_path DIR \
        --results_dir /tmp/complete-run --generation_deferred_stop true --gradient_checkpointing false \
        --generation_decode_kernel matmul --generation_decode_loop compiled_step --training_compile true

Everything after `--` goes to recipe.py (which arms run is this script's: no --arm there). The one-time conversion of
a GGUF model into the cache (models.resolve_model) is not part of a run: do it first. bench/costs.py reads every
bench/complete-run-h200*.json into its table. Beside the wall time, the file says how much of it was compiling (per
phase and in all: compile_phases) and how long each arm's first training step took (it compiles the update).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from gmts_recipe.records import current_record, json_file, read_json  # noqa: E402
from tables import markdown_row, markdown_table  # noqa: E402 - bench/tables.py, beside this script

ARMS = "ets,gmts"  # a complete run: the base evaluations and the two arms the paper compares


def median_step_s(train_log: list[dict]) -> float:
    """The median `step_time` of a train_log (recipe.py's rows, step 1 first) after its first step: the first step
    compiles (torch.compile's graphs, the CUDA graphs' capture), so it times the compiler, not a step. costs.py
    and repeat.py import it from here, so every bench table means the same by a step. A log of one step or
    none has no such median (statistics.StatisticsError); a row without `step_time` is a KeyError."""
    return statistics.median(row["step_time"] for row in train_log[1:])


def run_dir(recipe_argv: list[str]) -> tuple[Path, Path]:
    """(the run's results.json, the base-evaluation cache folder) as recipe.py will place them; refuses a directory
    that already holds either, and an --arm of the caller's."""
    import recipe

    if any(a == "--arm" or a.startswith("--arm=") for a in recipe_argv):
        raise recipe.RecipeError(f"no --arm after '--': a complete run is --arm {ARMS}")
    recipe_args, _, _, name = recipe.parse(["--arm", ARMS, *recipe_argv])
    results_dir = Path(recipe_args.results_dir)
    path, cache = results_dir / name / "results.json", results_dir / "base-evals"
    for taken in (path.parent, cache):
        if taken.exists():
            raise recipe.RecipeError(f"{taken} exists: a complete run needs a results directory of its own (pass "
                                     f"--results_dir to a new folder)")
    return path, cache


def compile_phases(results: dict) -> tuple[list, dict, float | None]:
    """The seconds the process spent compiling per phase (eval.compile_seconds: torch.compile's frame and backward
    compiles, not CUDA-graph recording, which happens at a graph's first replay): each base evaluation, each arm's
    training and evaluation; and their sum, None when a phase lacks the field (a run of a recipe.py before it)."""
    base = [e.get("compile_seconds") for e in results.get("base", {}).get("evals", [])]
    arms = {arm: {"train": a.get("train_compile_seconds"), "eval": a["eval"].get("compile_seconds")}
            for arm, a in results.get("arms", {}).items()}
    phases = [*base, *(s for arm in arms.values() for s in arm.values())]
    return base, arms, (sum(phases) if phases and None not in phases else None)


def evaluations(results: dict) -> list[dict]:
    """Every full evaluation of the run in the order it ran (3 base, then each arm's): samples, seconds (generation +
    scoring, as the recipe's cached base evaluations count them) and its compile seconds where recorded. The first of
    them compiles the decode step; bench/costs.py reads them into the full-test evaluation row."""
    def row(phase: str, e: dict) -> dict:
        return {"phase": phase, "seed": e.get("seed"), "samples": len(e["records"]) * e["k"],
                "seconds": e["seconds"]["generation"] + e["seconds"]["scoring"],
                "compile_seconds": e.get("compile_seconds")}
    return [row("base", e) for e in results.get("base", {}).get("evals", [])] + \
        [row(arm, a["eval"]) for arm, a in results.get("arms", {}).items()]


def summary(results: dict, wall_s: float, returncode: int, recipe_argv: list[str]) -> dict:
    """What bench/costs.py reads: the model, rows per step, the process's wall time and GPU minutes (wall x GPUs), and
    the run's own account of its parts (base evaluation seconds, each arm's wall minutes, first training step and
    speed options; the compile seconds of each phase and of the process, their sum: compile_phases)."""
    cfg, versions = results["config"], results["versions"]
    gpus = versions.get("gpus", 1)
    arms = results.get("arms", {})
    base_compile_s, arm_compile_s, compile_s = compile_phases(results)
    evals = evaluations(results)
    return {"model": cfg["model_name_or_path"], "device": versions.get("gpu"), "gpus": gpus,
            "rows": cfg["per_device_train_batch_size"] * cfg["gradient_accumulation_steps"] * gpus,
            "gradient_checkpointing": bool(next(iter(arms.values()), {}).get("generation_options", {}).get(
                "gradient_checkpointing", cfg.get("gradient_checkpointing", True))),  # an arm's record, or the config's
            "wall_s": wall_s, "gpu_minutes": wall_s / 60 * gpus, "returncode": returncode,
            "base_eval_s": [e["seconds"] for e in evals if e["phase"] == "base"],
            "arm_wall_minutes": {arm: a["wall_minutes"] for arm, a in arms.items()},
            "first_step_s": {arm: next((r["step_time"] for r in a.get("train_log", []) if r.get("step") == 1), None)
                             for arm, a in arms.items()},
            "training_steps": {arm: len(a.get("train_log", [])) for arm, a in arms.items()},
            "median_step_s": {arm: median_step_s(a["train_log"]) if len(a.get("train_log", [])) > 1 else None
                              for arm, a in arms.items()},  # an arm of one step or none has none: null
            "compile_s": compile_s, "base_eval_compile_s": base_compile_s, "arm_compile_s": arm_compile_s,
            "generation_options": next(iter(arms.values()), {}).get("generation_options", {}),
            "pass@1": {arm: a["eval"]["pass@1"] for arm, a in arms.items()}, "evaluations": evals,
            "recipe_argv": ["--arm", ARMS, *recipe_argv], "versions": versions}


def compile_cache() -> dict:
    """torch.compile's on-disk cache for this run (inductor's folder: $TORCHINDUCTOR_CACHE_DIR or its default) and
    whether it already held compiled graphs: a warm cache (a machine that has run the recipe before) skips inductor's
    code generation and the Triton builds of every graph it holds, not dynamo's tracing, so a first run on a machine
    (cold) and a later one (warm) are different numbers and the file says which it timed."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    folder = Path(cache_dir())  # also pins the folder in the environment the recipe process inherits
    graphs = folder / "fxgraph"
    return {"dir": str(folder), "warm": graphs.is_dir() and any(graphs.iterdir())}


def resummarize(out: Path, results_path: Path) -> int:
    """--from_results: the summary of a run timed earlier, recomputed from its results.json with this script's fields;
    what only the timing process knew (wall time, exit status, arguments, compile cache) is kept from the old file."""
    try:
        old, results = read_json(out, ValueError), read_json(results_path, ValueError)
    except ValueError as err:
        print(f"complete_run.py: {err} (--from_results needs --out's earlier summary and the run's results.json)",
              file=sys.stderr)
        return 2
    argv = old["recipe_argv"]
    recipe_argv = argv[2:] if argv[:2] == ["--arm", ARMS] else argv
    new = summary(results, old["wall_s"], old["returncode"], recipe_argv)
    if "compile_cache" in old:
        new["compile_cache"] = old["compile_cache"]
    out.write_text(json.dumps(new, indent=1) + "\n")
    print(f"complete_run.py: {out} summarized again from {results_path}")
    return 0


TABLE_HEADER = ["run", "training_compile", "compile regions", "compile cache", "GPU min", "compiling (s)",
                "first base evaluation (s)", "first step (s)", "median step (s)", "arms (min)", "pass@1 (%)",
                "GMTS - ETS (pts)"]
TABLE_NOTE = "Two values in a cell: ETS, GMTS."  # the columns of one value per arm, kept short


def table(paths: list[Path]) -> str:
    """The timed runs side by side (a markdown table, one row per file in the order given; a run that did not exit
    cleanly says so): the README's table of them, so no number of it is typed by hand. GMTS - ETS: one run's
    difference, the same seed in every run, so the column shows how far runs of one seed spread."""
    def pair(d: dict, fmt: str) -> str:
        return ", ".join("-" if d.get(arm) is None else format(d[arm], fmt) for arm in ARMS.split(","))

    lines = markdown_table(TABLE_HEADER)
    for path in paths:
        d = json.loads(path.read_text())
        if d["returncode"] != 0:
            lines.append(f"| {path.name} | recipe.py exited {d['returncode']}: not a complete run |")
            continue
        cache = d.get("compile_cache")
        compiling = "-" if d.get("compile_s") is None else f"{d['compile_s']:.0f}"
        pass_at_1 = {a: 100 * v for a, v in d["pass@1"].items()}
        switch = {k: "on" if d["generation_options"].get(k) else "off"
                  for k in ("training_compile", "generation_compile_regions")}
        lines.append(markdown_row([path.name, switch["training_compile"], switch["generation_compile_regions"],
                                   "-" if cache is None else ("warm" if cache["warm"] else "cold"),
                                   f"{d['gpu_minutes']:.2f}", compiling, f"{d['base_eval_s'][0]:.0f}",
                                   pair(d["first_step_s"], ".1f"), pair(d.get("median_step_s", {}), ".2f"),
                                   pair(d["arm_wall_minutes"], ".2f"), pair(pass_at_1, ".1f"),
                                   f"{pass_at_1['gmts'] - pass_at_1['ets']:+.1f}"]))
    return "\n".join([*lines, "", TABLE_NOTE])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, recipe_argv = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="the JSON file to write (bench/complete-run-h200.json)")
    ap.add_argument("--table", nargs="+", default=None, metavar="RUN_JSON", type=json_file,
                    help="print the markdown table of these timed runs (nothing runs)")
    ap.add_argument("--from_results", default=None, metavar="RESULTS_JSON",
                    help="summarize an earlier run again from its results.json, after this script gained fields: "
                         "--out's wall time, exit status, recipe arguments and compile cache are kept, the rest is "
                         "recomputed (nothing runs)")
    args = ap.parse_args(ours)
    if args.table:  # each read as JSON already by its argparse type: a missing or broken file is argparse's error
        print(table([Path(p) for p in args.table]))
        return 0
    if args.out is None:
        ap.error("--out is required (or --table FILES)")
    if args.from_results:
        return resummarize(Path(args.out), Path(args.from_results))
    import recipe

    try:
        path, _ = run_dir(recipe_argv)
    except recipe.RecipeError as err:
        print(f"complete_run.py: {err}", file=sys.stderr)
        return 2
    cache = compile_cache()
    t0 = time.perf_counter()
    returncode = subprocess.run([sys.executable, str(ROOT / "recipe.py"), "--arm", ARMS, *recipe_argv],
                                cwd=ROOT).returncode
    wall_s = time.perf_counter() - t0
    if not path.is_file():
        print(f"complete_run.py: recipe.py exited {returncode} without writing {path}", file=sys.stderr)
        return returncode or 1
    # of any format, as today's holds it (a new run's per-task records are in its samples files)
    out = {**summary(current_record(json.loads(path.read_text()), path.parent), wall_s, returncode, recipe_argv),
           "compile_cache": cache}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    compiling = "unrecorded" if out["compile_s"] is None else f"{out['compile_s']:.0f} s"
    print(f"complete run: {wall_s / 60:.2f} min wall ({out['gpu_minutes']:.2f} GPU-min; compiling {compiling}, "
          f"{'warm' if cache['warm'] else 'cold'} compile cache {cache['dir']}), "
          f"recipe.py exit {returncode}, {len(out['base_eval_s'])} base evaluations, arms "
          f"{', '.join(out['arm_wall_minutes'])}: {args.out}")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
