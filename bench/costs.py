"""The cost of one experiment on one H200, from measurements already committed.

Why a script: every real-model row it puts in bench/results-h200.json is recomputed from the committed file it names
(its `source`), so tests/test_bench_costs.py fails on a hand-edited number. It reads:

- bench/step-profile-h200-*.json (bench/step.py, Qwen2.5-Coder-1.5B-Instruct): the median step and one 880-row
  evaluation batch, each with the speed options it ran with: grouped attention off ("off"), on ("on"), on with
  deferred stop and no gradient checkpointing ("all-levers"), and those with the two-matmul decode attention kernel
  ("all-levers-matmul"); the 32-row profile (one process of two) is
  the scaling study's (bench/docs/scaling.md), not a row of this table;
- results/qwen/<cell>/results.json (the sweep): per arm, the median `step_time` of its train_log (first step, which
  compiles, apart), its full-test evaluation (generation + scoring seconds) and its wall minutes; an arm whose
  generation_options lack `generation_grouped_attention` ran before that switch existed, so with it off;
- results/qwen/base-evals/*.json: the cached base evaluations (measured before the switch: off);
- bench/complete-run-h200*.json (bench/complete_run.py): complete runs timed as one recipe.py process, start to exit,
  in a results directory of their own (no cached base evaluations), with the speed options they ran with and, where
  the run recorded it, the time it spent compiling (torch.compile's, summed over its phases) and each arm's first step.

Which arms shared a GPU with another arm is SHARED (a fact of the H200 run logs); their times are kept as rows but
left out of the medians. A complete run (3 base evaluations, ETS and GMTS arms of 40 steps with their
full-test evaluations) is estimated per cell that ran ETS and GMTS alone: the arms' wall minutes (training +
evaluation, not the process start) plus 3 base evaluations, each estimated as the mean of the cell's ETS and GMTS
evaluation seconds (the cells reused base evaluations cached from an older run).

    python bench/costs.py              # rewrites its rows of bench/results-h200.json and prints the table
    python bench/costs.py --markdown   # the README's table (read-only: from the results file)
    python bench/costs.py --targets    # where the speed targets stand, each against its best committed measure
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results-h200.json"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(1, str(ROOT))
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose
from complete_run import median_step_s  # noqa: E402 - the median step after the compiling first, written once there
from tables import entries, markdown_row, markdown_table  # noqa: E402 - a side-by-side file's entries; tables

# (cell, arm) pairs that ran two arms on one GPU (results/qwen/logs/h200-2026-11-30b.log: `sweep.py --gpus 0,0`, `1,1`)
SHARED = {("paper-lr0.0001-s17", "grpo"), ("paper-lr0.0001-s18", "ets"), ("paper-lr0.0001-s18", "gmts"),
          ("paper-lr0.0001-s18", "grpo")}
TARGETS = {"step_s": 1.5, "full_test_s": 45.0, "complete_run_min": 5.0}  # the targets set for one experiment's cost
# the next targets, twice the experiments per GPU-hour (`python bench/costs.py --targets`: each vs its best measure)
SPEED_TARGETS = {"step_s": 1.0, "complete_run_warm_min": 3.0, "complete_run_cold_min": 3.5, "runs_per_gpu_hour_x": 1.8}


def _source(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


LEVER_KEYS = ("grouped_attention", "deferred_stop", "gradient_checkpointing", "decode_kernel", "decode_loop",
              "training_compile", "compile_regions", "fused_projections", "deterministic_kernels")  # each row records


def _options(gen: dict, grouped: bool, checkpointing: bool) -> dict:
    """A run's switches from its recorded generation options (a switch absent from them: before it existed, off);
    grouped attention and gradient checkpointing from wherever that kind of run records them."""
    return dict(zip(LEVER_KEYS, (grouped, bool(gen.get("generation_deferred_stop", False)), checkpointing,
                                 gen.get("generation_decode_kernel", "sdpa"),
                                 gen.get("generation_decode_loop", "transformers"),
                                 bool(gen.get("training_compile", False)),
                                 bool(gen.get("generation_compile_regions", False)),
                                 bool(gen.get("generation_fused_projections", False)),
                                 bool(gen.get("deterministic_kernels", False)))))


def step_profile_rows(path: Path, root: Path) -> tuple[dict, dict | None]:
    """The end-to-end row (median step) and the evaluation row (one batch, second call: compiled) of a step profile;
    no evaluation row where its evaluation failed (the file says why). The recipe's decoding switches govern training
    generation and evaluation alike; profiles older than a switch ran with it off (and with gradient checkpointing,
    the config's setting)."""
    d = json.loads(path.read_text())
    step, ev, gen = d["step"], d["eval"], d["step"].get("generation_options", {})
    grouped = ev["grouped_attention"] if "grouped_attention" in ev else gen.get("generation_grouped_attention", False)
    options = _options(gen, bool(grouped), bool(gen.get("gradient_checkpointing", True)))
    e2e = {"model": step["model"], "rows": step["rows"], "total_s": step["total_s"],
           "first_step_s": step["first_step_s"], "steps": step["steps_in_median"],
           **({"step_times_s": [s["total_s"] for s in step["steps"]]} if "steps" in step else {}),
           "generation_s": step["median_step"]["generation"], "forward_s": step["median_step"]["forward"],
           "backward_s": step["median_step"]["backward"], **options,
           "source": _source(path, root), "measured_by": "bench/step.py"}
    if "error" in ev:
        return e2e, None
    evaluation = {"model": ev["model"], "samples": ev["samples"], "seconds": ev["seconds"],
                  "first_call_s": ev["first_call_s"], "full_test_estimate_s": ev["full_test_estimate_s"], **options,
                  "rows": step["rows"], "source": _source(path, root),
                  "measured_by": "bench/step.py (one batch of the full test: its longest prompts)"}
    return e2e, evaluation


def arm_rows(path: Path, root: Path) -> tuple[list[dict], list[dict]]:
    """Per arm of a sweep cell: its end-to-end row (median training step, wall minutes) and its evaluation row."""
    d = json.loads(path.read_text())
    cell, cfg, gpus = path.parent.name, d["config"], d["versions"]["gpus"]
    rows = cfg["per_device_train_batch_size"] * cfg["gradient_accumulation_steps"] * gpus
    e2e, evaluations = [], []
    for arm, a in d["arms"].items():
        gen = a.get("generation_options", {})
        where = {**_options(gen, bool(gen.get("generation_grouped_attention", False)),
                            bool(gen.get("gradient_checkpointing", cfg.get("gradient_checkpointing", True)))),
                 "arms_per_gpu": 2 if (cell, arm) in SHARED else 1, "source": _source(path, root), "cell": cell,
                 "arm": arm}
        steps = [s["step_time"] for s in a["train_log"]]
        e2e.append({"model": cfg["model_name_or_path"], "rows": rows, "total_s": median_step_s(a["train_log"]),
                    "first_step_s": steps[0], "steps": len(steps) - 1, "wall_minutes": a["wall_minutes"], **where,
                    "measured_by": "train_log step_time"})
        ev = a["eval"]
        evaluations.append({"model": cfg["model_name_or_path"], "samples": len(ev["records"]) * ev["k"],
                            "seconds": ev["seconds"]["generation"] + ev["seconds"]["scoring"], **where,
                            "measured_by": "arm evaluation (generation + scoring)"})
    return e2e, evaluations


def base_eval_rows(path: Path, root: Path) -> list[dict]:
    """The cached base evaluations: measured before the grouped-attention switch existed (off)."""
    d = json.loads(path.read_text())
    return [{"model": d["eval_config"]["model"]["model_name_or_path"], "samples": len(e["records"]) * e["k"],
             "seconds": e["seconds"]["generation"] + e["seconds"]["scoring"], "grouped_attention": False,
             "arms_per_gpu": 1, "source": _source(path, root), "arm": "base", "seed": e["seed"],
             "measured_by": "base evaluation (generation + scoring)"} for e in d["evals"]]


def complete_run_rows(path: Path, root: Path) -> tuple[dict | None, list[dict]]:
    """A bench/complete_run.py file as (its row, its evaluation rows), both with the run's switches; (None, []) when
    recipe.py did not exit cleanly: not a complete run. The row carries the time it spent compiling in GPU minutes and
    each arm's first step where the run recorded them; the evaluation rows are its full evaluations (3 base, then each
    arm's), its first (compiling) one included: the full-test evaluation as a complete run pays it. Files from before
    complete_run.py listed them have none."""
    d = json.loads(path.read_text())
    if d["returncode"] != 0:
        return None, []
    gen = d["generation_options"]
    options = _options(gen, bool(gen.get("generation_grouped_attention", False)), d["gradient_checkpointing"])
    source = _source(path, root)
    compiling = {} if d.get("compile_s") is None else {
        "compile_gpu_minutes": d["compile_s"] / 60 * d["gpus"], "first_step_s": d["first_step_s"]}
    # files from before complete_run.py recorded its compile cache ran on a fresh machine (2026-11-30, the first timed run): cold
    cache = "warm" if d.get("compile_cache", {}).get("warm") else "cold"
    row = {"model": d["model"], "rows": d["rows"], "gpu_minutes": d["gpu_minutes"], "wall_s": d["wall_s"], **compiling,
           "compile_cache": cache, **options, "source": source,
           "measured_by": "bench/complete_run.py (one recipe.py process, wall)"}
    evaluations = [{"model": d["model"], "samples": e["samples"], "seconds": e["seconds"], **options, "arms_per_gpu": 1,
                    "arm": e["phase"], "seed": e["seed"], "source": source,
                    "measured_by": "bench/complete_run.py (generation + scoring, in one recipe.py process)"}
                   for e in d.get("evaluations", [])]
    return row, evaluations


def complete_runs(e2e: list[dict], evaluations: list[dict]) -> list[dict]:
    """Per cell whose ETS and GMTS arms ran alone at 64 rows per step with the same switches: their wall minutes plus
    3 estimated base evaluations (each the mean of the two arms' evaluation seconds)."""
    out = []
    for cell in sorted({r["cell"] for r in e2e if "cell" in r}):
        arms = {r["arm"]: r for r in e2e if r.get("cell") == cell and r["arms_per_gpu"] == 1 and r["rows"] == 64}
        evals = {r["arm"]: r["seconds"] for r in evaluations if r.get("cell") == cell}
        if not {"ets", "gmts"} <= set(arms) or levers(arms["ets"]) != levers(arms["gmts"]):
            continue
        base_s = (evals["ets"] + evals["gmts"]) / 2
        arm_minutes = arms["ets"]["wall_minutes"] + arms["gmts"]["wall_minutes"]
        out.append({"cell": cell, "source": arms["ets"]["source"],
                    **{k: arms["ets"][k] for k in LEVER_KEYS},
                    "ets_wall_minutes": arms["ets"]["wall_minutes"], "gmts_wall_minutes": arms["gmts"]["wall_minutes"],
                    "base_evals": 3, "base_eval_estimate_s": base_s, "gpu_minutes": arm_minutes + 3 * base_s / 60,
                    "base_evals_estimated": "each as the mean of this cell's ETS and GMTS evaluation seconds"})
    return out


def measure(root: Path = ROOT) -> dict:
    """All real-model rows, recomputed from the committed files under root."""
    e2e, evaluations = [], []
    for path in sorted(root.glob("bench/step-profile-h200-*.json")):
        row, ev = step_profile_rows(path, root)
        e2e.append(row)
        evaluations += [ev] if ev is not None else []
    for path in sorted(root.glob("results/qwen/*/results.json")):
        rows, evs = arm_rows(path, root)
        e2e += rows
        evaluations += evs
    for path in sorted(root.glob("results/qwen/base-evals/*.json")):
        evaluations += base_eval_rows(path, root)
    timed = []
    for path in sorted(root.glob("bench/complete-run-h200*.json")):
        row, evs = complete_run_rows(path, root)
        timed += [row] if row is not None else []
        evaluations += evs
    return {"e2e": e2e, "evaluation": evaluations, "complete_run": complete_runs(e2e, evaluations),
            "complete_run_timed": timed}


def merged(results: dict, measured: dict) -> dict:
    """The results file with this script's rows replaced: e2e rows with a `source` are ours (the selection-cost
    study's rows have none), `evaluation`, `complete_run` and `complete_run_timed` wholly."""
    out = dict(results)
    out["e2e"] = [r for r in results["e2e"] if "source" not in r] + measured["e2e"]
    out["evaluation"] = measured["evaluation"]
    out["complete_run"] = measured["complete_run"]
    out["complete_run_timed"] = measured["complete_run_timed"]
    return out


def _median_range(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    med = format(statistics.median(values), fmt)
    return med if len(values) == 1 else f"{med} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def _verdict(values: list[float], target: float | None) -> str:
    if target is None or not values:
        return "-"
    if max(values) <= target:
        return "met"
    return "met by the median, not by the slowest" if statistics.median(values) <= target else "not met"


LEVERS = ("off", "on", "all", "matmul", "loop", "compiled", "regions")  # the table's columns
HEADERS = ("grouped attention off", "on", "all levers", "all + matmul kernel", "+ compiled decode loop",
           "+ training compile", "loop + compile regions")


def levers(row: dict) -> str | None:
    """Which column a row belongs to: grouped attention off; on; on with deferred stop and gradient checkpointing
    off (every speed lever); those with the two-matmul decode kernel; those with the compiled decode loop
    (`generation_decode_loop: compiled_step`); those with the decoder layers compiled for the update too
    (`training_compile`). Each of those columns adds its switch to the one before. The last column is the compiled
    decode loop with its decoder layers as nested compile regions (`generation_compile_regions`, training compile
    off): it adds its switch to the loop column, not to training compile. Other mixes (none measured) belong to no
    column, nor does a row with `generation_fused_projections` (off in every config; measured against its own
    run without it in bench/README.md's lever table, so that it enters no other column's median) or with
    `deterministic_kernels` (repeatability bought with time). Rows from before a switch existed ran with it off."""
    grouped, deferred, checkpointing = row["grouped_attention"], row.get("deferred_stop", False), \
        row.get("gradient_checkpointing", True)
    every_lever = grouped and deferred and not checkpointing
    matmul = row.get("decode_kernel", "sdpa") != "sdpa"
    loop = row.get("decode_loop", "transformers") != "transformers"
    if row.get("fused_projections", False) or row.get("deterministic_kernels", False):
        return None  # off in every config / slower by design (bench/README.md, deterministic_kernels): no speed column
    if row.get("compile_regions", False):
        return "regions" if every_lever and matmul and loop and not row.get("training_compile", False) else None
    if row.get("training_compile", False):
        return "compiled" if every_lever and matmul and loop else None
    if loop:
        return "loop" if every_lever and matmul else None
    if matmul:
        return "matmul" if every_lever else None
    if not grouped:
        return "off" if not deferred else None
    if not deferred and checkpointing:
        return "on"
    return "all" if every_lever else None


def best_values(values: dict[str, list[float]]) -> list[float]:
    """The values of the column with the lowest median: the fastest setting measured. Not always the last column: a
    lever can cost more than it saves (training_compile on a 40-step run compiles longer than it saves)."""
    return min((values[c] for c in LEVERS if values[c]), key=statistics.median, default=[])


def _by_switch(rows: list[dict], key: str) -> dict[str, list[float]]:
    """The values of key per column (LEVERS)."""
    return {col: [r[key] for r in rows if levers(r) == col] for col in LEVERS}


def estimated_complete_run_min(step: dict, evaluation: dict) -> float:
    """A complete run (one process: 3 base evaluations, 2 arms x 40 steps, 2 arm evaluations) from one step profile,
    every compilation counted once: each measured step as it ran (the first compiles, a later one may recompile), the
    rest of the 80 steps at the median, 5 full-test evaluations each estimated from the profile's 880-row batch, and
    the evaluation's own compilation (its first call minus its second). Profiles from before the per-step times were
    recorded count their first step only."""
    times = step.get("step_times_s") or [step["first_step_s"]]
    steps_s = sum(times) + (80 - len(times)) * step["total_s"]
    eval_compile_s = max(0.0, evaluation["first_call_s"] - evaluation["seconds"])
    return (steps_s + 5 * evaluation["full_test_estimate_s"] + eval_compile_s) / 60


def table(results: dict) -> str:
    """Off / on columns: medians (and ranges) of the rows that ran alone on their GPU; targets from TARGETS."""
    alone = [r for r in results["e2e"] if r.get("arms_per_gpu") == 1 and r["rows"] == 64]
    bench = [r for r in results["e2e"] if r.get("measured_by") == "bench/step.py" and r["rows"] == 64]
    batch = [r for r in results["evaluation"] if r.get("measured_by", "").startswith("bench/step.py")
             and r.get("rows", 64) == 64]
    estimates = [{**s, "gpu_minutes": estimated_complete_run_min(s, e)} for s in bench for e in batch
                 if e["source"] == s["source"]]
    timed = [r for r in results.get("complete_run_timed", []) if r["rows"] == 64]
    compiling = [r for r in timed if "compile_gpu_minutes" in r]  # runs of a recipe.py that records it
    full = [r for r in results["evaluation"] if r.get("arms_per_gpu") == 1 and r["samples"] == 5276]
    rows = [("step, bench/step.py (s, 64 rows)", _by_switch(bench, "total_s"), ".2f", TARGETS["step_s"]),
            ("step, the arms' training logs (s, 64 rows)", _by_switch(alone, "total_s"), ".2f", TARGETS["step_s"]),
            ("880-row evaluation batch (s)", _by_switch(batch, "seconds"), ".2f", None),
            ("full-test evaluation, 5276 samples (s)", _by_switch(full, "seconds"), ".0f", TARGETS["full_test_s"]),
            ("one arm: 40 steps + full-test evaluation (min)", _by_switch(alone, "wall_minutes"), ".1f", None),
            ("complete run: 3 base evaluations + ETS + GMTS (GPU min)",
             _by_switch(results["complete_run"], "gpu_minutes"), ".1f", TARGETS["complete_run_min"]),
            ("complete run estimated from the bench/step.py row (GPU min)", _by_switch(estimates, "gpu_minutes"),
             ".1f", TARGETS["complete_run_min"])]
    for cache, label in (("cold", "cold compile cache (a first run on a machine)"),
                         ("warm", "warm compile cache (a machine that ran it before)")):
        runs = [r for r in timed if r["compile_cache"] == cache]
        if cache == "cold" or runs:  # the cold row always: the number a first-time user pays
            rows.append((f"complete run timed, {label}: one recipe.py process, start to exit (GPU min)",
                         _by_switch(runs, "gpu_minutes"), ".1f", TARGETS["complete_run_min"]))
        recorded = [r for r in runs if "compile_gpu_minutes" in r]
        if recorded:
            rows.append(("of which compiling: torch.compile's own time, every phase (GPU min)",
                         _by_switch(recorded, "compile_gpu_minutes"), ".1f", None))
    out = markdown_table(["qwen2.5-coder-1.5b-instruct, one H200", *HEADERS, "target", "best: target"])
    for label, values, fmt, target in rows:
        out.append(markdown_row([label, *(_median_range(values[c], fmt) for c in LEVERS),
                                 "-" if target is None else f"<= {target:g}", _verdict(best_values(values), target)]))
    out += ["", "Medians, (min-max) over the runs; the first step of every run (compilation) is left out of its "
            "median. Columns: grouped-query decoding off; on; on with deferred stop (decoding checks for finished "
            "answers one token late) and without gradient checkpointing (\"all levers\": measured by bench/step.py "
            "only, no sweep cell ran with them); \"all + matmul kernel\": those with "
            "`generation_decode_kernel: matmul`, decoding attention as two matrix products instead of PyTorch's "
            "memory-efficient kernel (other bf16 rounding, so other sampled tokens: bench/decode-kernel-h200.json); "
            "\"+ compiled decode loop\": those with `generation_decode_loop: compiled_step`, the whole token step as one "
            "CUDA graph in training generation and evaluation (other random numbers: bench/decode-loop-880-h200.json); "
            "\"+ training compile\": those with `training_compile: true`, the decoder layers compiled for the update "
            "(other rounding in the update); \"loop + compile regions\": the compiled decode loop (training compile "
            "off) with `generation_compile_regions: true`, each decoder layer a nested compile region, so inductor "
            "compiles one layer instead of 28 unrolled copies, once per number of rows (other rounding: "
            "bench/compile-regions-64-h200.json). "
            "The bench/step.py rows change only those switches; the sweep's rows compare arms run before the "
            "grouped switch existed with arms run after it, so other changes between those runs count too. The "
            "last column judges the column with the lowest median (not always the last: a lever can cost more than it "
            "saves). The estimate, from the profile alone: every measured "
            "step as it ran (compilations included), the rest of the 80 steps at the median, 5 full-test evaluations "
            "(six 880-row batches each) and the evaluation's compilation (its first call minus its second)."]
    names = {"on": "With grouped attention", "all": "With all levers",
             "matmul": "With all levers and the matmul kernel", "loop": "Adding the compiled decode loop",
             "compiled": "Adding training compile"}
    for step in bench:
        if levers(step) in names:
            share = step["generation_s"] / step["total_s"]
            out.append(f"{names[levers(step)]} the step is "
                       f"{step['total_s']:.2f} s: generation {step['generation_s']:.2f} s ({100 * share:.0f}%), "
                       f"forward + backward {step['forward_s'] + step['backward_s']:.2f} s (gradient checkpointing "
                       f"{'on' if step['gradient_checkpointing'] else 'off'}).")
    for r in compiling:
        first = ", ".join(f"{arm.upper()} {s:.1f} s" for arm, s in r["first_step_s"].items() if s is not None)
        out.append(f"Of the timed run {r['source']} ({r['gpu_minutes']:.2f} GPU min, {r['compile_cache']} compile "
                   f"cache), compiling took "
                   f"{r['compile_gpu_minutes']:.2f}: the seconds the process spent in torch.compile (dynamo's frame "
                   "compiles with their forward code, and the backward compiles: torch._dynamo's "
                   "calculate_time_spent) summed over its phases (3 base evaluations, each arm's training and "
                   "evaluation); CUDA-graph recording happens at a graph's first replay and is not in it. The first "
                   f"training step of each arm, which compiles the update: {first}.")
    cells = {col: [r["cell"] for r in results["complete_run"] if levers(r) == col] for col in ("on", "off")}
    out.append(f"Complete run per cell (on: {', '.join(cells['on'])}; off: {', '.join(cells['off'])}): the ETS and "
               "GMTS arms' wall minutes (training + evaluation; the process start is not counted) plus 3 base "
               "evaluations, each ESTIMATED as the mean of the cell's ETS and GMTS evaluations: the cells reused base "
               "evaluations cached from an older run.")
    base = [r["seconds"] for r in results["evaluation"] if r.get("arm") == "base"]
    if base:
        out.append(f"The cached base evaluations themselves (grouped attention off): {_median_range(base, '.0f')} s.")
    shared = sorted({f"{r['cell']} {r['arm']}" for r in results["e2e"] if r.get("arms_per_gpu") == 2})
    if shared:
        out.append("Left out of the medians (two arms shared one GPU): " + ", ".join(shared) + ".")
    return "\n".join(out)


def _met(value: float | None, target: float, at_least: bool = False) -> str:
    if value is None:
        return "not measured"
    return "met" if (value >= target if at_least else value <= target) else "not met"


def targets(root: Path = ROOT) -> str:
    """Where the speed targets stand, each against the best committed measure of it (read-only, from the files it
    names): the step (bench/step.py), a complete run on a warm and on a cold compile cache (bench/complete_run.py), the
    arm-runs per GPU-hour of the confirmatory grid in warm workers against one fresh process per cell
    (its logs/timing.jsonl, gmts_recipe.sweep.schedule.recorded_pace) and of cells sharing a GPU
    (bench/scaling-h200.json), and the side-by-side ratios to TRL (bench/side-by-side-*.json)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from gmts_recipe.sweep.schedule import recorded_pace  # the recorded pace is computed once, there

    def lowest(label: str, measures: list[tuple[float, str]], target: float, unit: str) -> tuple[str, ...]:
        """A row for a target to stay under: the lowest (value, file) measured, or none."""
        best = min(measures, default=None)
        if best is None:
            return label, "-", "-", _met(None, target)
        return label, f"{best[0]:.2f} {unit}", best[1], _met(best[0], target)

    steps = [(r["total_s"], p.name) for p in sorted(root.glob("bench/step-profile-h200-*.json"))
             if (r := step_profile_rows(p, root)[0])["rows"] == 64]
    rows = [lowest(f"paper-config step at 64 rollouts <= {SPEED_TARGETS['step_s']:g} s", steps,
                   SPEED_TARGETS["step_s"], "s")]
    timed = [r for r in (complete_run_rows(p, root)[0] for p in sorted(root.glob("bench/complete-run-h200*.json")))
             if r and r["rows"] == 64]
    for cache in ("warm", "cold"):
        target = SPEED_TARGETS[f"complete_run_{cache}_min"]
        rows.append(lowest(f"complete run (3 base evaluations, ETS, GMTS) on a {cache} compile cache <= {target:g} "
                           "GPU-min", [(r["gpu_minutes"], Path(r["source"]).name) for r in timed
                                       if r["compile_cache"] == cache], target, "GPU-min"))
    logs = root / "results" / "confirm" / "logs"
    fresh, warm = recorded_pace(logs), recorded_pace(logs, warm=True, steady=False)  # starts included
    gain = fresh[0] / warm[0] if fresh and warm else None
    rows.append((f"arm-runs per GPU-hour >= {SPEED_TARGETS['runs_per_gpu_hour_x']:g}x one fresh process per cell",
                 "-" if gain is None else f"{gain:.2f}x in warm workers ({warm[0] / 60:.2f} min per arm, starts "
                 f"included, {warm[1]} arm-runs; fresh {fresh[0] / 60:.2f}, {fresh[1]})",
                 "results/confirm/logs/timing.jsonl", _met(gain, SPEED_TARGETS["runs_per_gpu_hour_x"], at_least=True)))
    scaling = root / "bench" / "scaling-h200.json"
    if scaling.exists():  # cells sharing one GPU (bench/docs/scaling.md): more per GPU-hour, but no bit-for-bit repeat
        d = json.loads(scaling.read_text())
        shared = {n: d.get(f"mps_{n}_throughput") for n in ("two", "four")}
        best = max((x for x in shared.values() if x), default=None)
        rows.append((f"arm-runs per GPU-hour >= {SPEED_TARGETS['runs_per_gpu_hour_x']:g}x one per GPU, cells sharing "
                     "a GPU under CUDA MPS (their runs do not repeat a cell run alone)",
                     ", ".join(f"{n} at once {x:.2f}x" for n, x in shared.items() if x) or "-", scaling.name,
                     _met(best, SPEED_TARGETS["runs_per_gpu_hour_x"], at_least=True)))
    for sbs in sorted((root / "bench").glob("side-by-side-*.json")):  # the side-by-side study's files, of any card
        if "selection" in sbs.name:  # the vLLM selection check: a few steps of each arm, no timing question
            continue
        paths = {e["path"]: e for e in entries(json.loads(sbs.read_text())).values() if e["arm"] == "gmts"}
        step = {k: v.get("steps", {}).get("median_step_s") for k, v in paths.items()
                if v.get("steps", {}).get("status") == "ok"}
        done = {k: v["complete_run"]["gpu_minutes"] for k, v in paths.items()
                if v.get("complete_run", {}).get("status") == "ok"}
        if step.get("ours"):
            ratios = ", ".join(f"{paths[k]['label']} {step[k] / step['ours']:.2f}x"
                               for k in ("trl", "vllm") if step.get(k))
            rows.append(("side by side: the step of TRL's paths over this recipe's", ratios, sbs.name, "measured"))
        missing = [paths[k]["label"] for k in paths if k not in done]
        rows.append(("side by side: a complete run of each path",
                     ", ".join(f"{paths[k]['label']} {m:.2f} GPU-min" + (
                         f" ({m / done['ours']:.2f}x)" if k != "ours" and done.get("ours") else "")
                         for k, m in done.items()) or "-", sbs.name,
                     "measured" if not missing else f"not measured: {', '.join(missing)}"))
    return "\n".join(markdown_table(["target", "best measured", "from", "verdict"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the table of the committed results file")
    ap.add_argument("--targets", action="store_true", help="print where the speed targets stand (read-only)")
    args = ap.parse_args(argv)
    if args.targets:
        print(fill_lines(targets()))
        return 0
    results = json.loads(OUT.read_text())
    if not args.markdown:
        results = merged(results, measure())
        OUT.write_text(json.dumps(results, indent=1))  # the selection-cost study's format
    print(fill_lines(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
