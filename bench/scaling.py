"""Two GPUs, three ways, from the step times the runs logged themselves.

Every paper-config step (configs/qwen.yaml: Qwen2.5-Coder-1.5B-Instruct, GSM8K, 64 rollouts x <= 256 tokens) logs
`step_time`; this script reads them from committed files and compares, at the same global batch:

- alone: one arm per H200 (`sweep.py --gpus 0,1`, the run of results/qwen/logs/sweep-2026-11-30.log);
- shared: two arms on each H200 (`--gpus 0,0` and `1,1`, results/qwen/logs/h200-2026-11-30b.log);
- alone, grouped: one arm per H200 again, after grouped-query decoding (attention.py) and static compile shapes
  (results/qwen/logs/h200-2026-11-30c.log, and 1.5e-4 seeds 18-19 of h200-2026-11-30d.log); the three ways
  above ran before them, so they compare with each other;
- data parallel: one arm over two H200s (`accelerate launch --num_processes 2`, 32 rollouts per device and no
  accumulation, so 64 per step as above; bench/logs/h200x2-accelerate-2proc.log). Stopped after 12 steps: its
  evaluation is the same code as an arm's.
- data parallel, grouped: the same after grouped-query decoding, end to end (ETS then GMTS in one process pair,
  fresh base evaluations on the main process, results/qwen-accelerate/; 2026-11-30d).
- one cell per GPU, every lever: configs/paper.yaml's levers and counter noise (the coupled pilot, results/coupled/,
  2026-12-01, one H200): s100 on a cold compile cache, s105 on a warm one, each the only process on the GPU;
- four cells per GPU under CUDA MPS: s101-s104 of the same pilot, four recipe.py processes at once on the one H200
  (`sweep.py --gpus 0,0,0,0` with the MPS daemon started; warm cache). The sweep's own minutes per cell process
  (model loading included) are in bench/logs/shared-gpu-h200-{alone,4way}.log.
- four cells per GPU under CUDA MPS, as Ray tasks: s106-s109 of the same pilot (2026-12-01 evening, one H200,
  `sweep.py --ray --runs_per_gpu 4`, 0.25 GPU per task); each cell process's start and end in
  bench/logs/shared-gpu-h200-ray4-timing.jsonl, the sweep's log bench/logs/shared-gpu-h200-ray4.log;
- two cells per GPU under CUDA MPS: s100 and s105 run again, two recipe.py processes at once after the Ray sweep
  (bench/logs/shared-gpu-h200-2way-s10{0,5}-results.json and .log); no sweep timed them, so a process's minutes run
  from the driver's mark before they started to its own end mark (bench/logs/shared-gpu-h200-ray4-2way-marks.log,
  lines `<unix time> <event>`, which also time the Ray sweep as a whole).
- one warm worker on one H200, and one warm worker per GPU on two H200s of one host: cells of the confirmatory grid
  (results/confirm/, 2026-12-04), `sweep.py --warm_workers --gpus 0` and `--gpus 0,1`, every lever of
  configs/paper.yaml, a compile cache carried from the machine before. Each worker's first cell (its model load and
  compilation) is left out: s252-258, s260-266 and s268-274 on one H200 (three machines), s277-288 on two. Each cell
  process's start and end are in the sweep's results/confirm/logs/timing.jsonl.

Per way sharing one GPU, a second table counts whole cell processes (model loading, both arms, their evaluations) by
the clock that timed them: cells per GPU-hour against one cell alone on a warm cache (s105), as the shared groups ran.

What does not scale: bench/step.py's profile of one process's share (32 rows per step, no accumulation:
bench/step-profile-h200-rows32.json) beside the 64-row step on one GPU (bench/step-profile-h200-on.json), part by part.

The first step of each run compiles and is left out of its median. Which run was alone and which shared is a fact of
the runs (the logs above), written here once as RUNS.

    python bench/scaling.py              # writes bench/scaling-h200.json and prints the table
    python bench/scaling.py --markdown   # the README's table (read-only: from the results file)
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(1, str(ROOT))
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose
from complete_run import median_step_s  # noqa: E402 - the median step after the compiling first, written once there

OUT = ROOT / "bench" / "scaling-h200.json"
CELLS = ROOT / "results" / "qwen"
# The confirmatory grid's cells in warm workers (2026-12-04), each worker's first cell left out: one H200 (three
# machines), then two H200s of one host, one worker per GPU
WARM_ONE = (*range(252, 259), *range(260, 267), *range(268, 275))
WARM_TWO = tuple(range(277, 289))
TIMING = "results/confirm/logs/timing.jsonl"
RUNS = {
    "alone": [("paper-lr0.0001-s17", "ets"), ("paper-lr0.0001-s17", "gmts"), ("paper-lr0.0002-s17", "ets"),
              ("paper-lr0.0002-s17", "gmts")],
    "shared": [("paper-lr0.0001-s17", "grpo"), ("paper-lr0.0001-s18", "ets"), ("paper-lr0.0001-s18", "gmts"),
               ("paper-lr0.0001-s18", "grpo")],
    "data_parallel": [("bench/logs/h200x2-accelerate-2proc-ets-train_log.jsonl", "ets")],
    "alone_grouped": [(f"paper-lr0.0001-s{seed}", arm) for seed in (19, 20, 21) for arm in ("ets", "gmts", "grpo")]
                     + [("paper-lr0.00015-s17", "ets"), ("paper-lr0.00015-s17", "gmts"), ("paper-lr5e-05-s17", "ets"),
                        ("paper-lr5e-05-s17", "gmts"), ("paper-lr5e-05-s17", "grpo"), ("paper-lr2e-05-s17", "grpo")]
                     + [(f"paper-lr0.00015-s{seed}", arm) for seed in (18, 19) for arm in ("ets", "gmts")],  # 2026-11-30d
    "data_parallel_grouped": [("results/qwen-accelerate/paper-lr0.0001-s17", "ets"),
                              ("results/qwen-accelerate/paper-lr0.0001-s17", "gmts")],
    "alone_levers": [(f"results/coupled/coupled-lr0.0001-s{seed}", arm) for seed in (100, 105)
                     for arm in ("ets", "gmts")],  # 2026-12-01
    "mps_four": [(f"results/coupled/coupled-lr0.0001-s{seed}", arm) for seed in (101, 102, 103, 104)
                 for arm in ("ets", "gmts")],  # 2026-12-01, one H200, four processes at once under CUDA MPS
    "ray_four": [(f"results/coupled/coupled-lr0.0001-s{seed}", arm) for seed in (106, 107, 108, 109)
                 for arm in ("ets", "gmts")],  # 2026-12-01 evening, the same, as Ray tasks (sweep.py --ray)
    "mps_two": [(f"bench/logs/shared-gpu-h200-2way-s{seed}-results.json", arm) for seed in (100, 105)
                for arm in ("ets", "gmts")],  # 2026-12-01 evening, two processes at once under CUDA MPS
    "warm_one": [(f"results/confirm/coupled-lr0.0001-s{seed}", arm) for seed in WARM_ONE for arm in ("ets", "gmts")],
    "warm_two": [(f"results/confirm/coupled-lr0.0001-s{seed}", arm) for seed in WARM_TWO for arm in ("ets", "gmts")],
}
GPUS = {"alone": 1, "shared": 0.5, "data_parallel": 2, "alone_grouped": 1, "data_parallel_grouped": 2,
        "alone_levers": 1, "mps_four": 0.25, "ray_four": 0.25, "mps_two": 0.5, "warm_one": 1,
        "warm_two": 1}  # per arm (and per cell process)
LABEL = {"alone": "one arm per GPU", "shared": "two arms per GPU",
         "data_parallel": "one arm on 2 GPUs (accelerate, 2 processes)",
         "alone_grouped": "one arm per GPU, grouped-query decoding",
         "data_parallel_grouped": "one arm on 2 GPUs, grouped-query decoding (end to end)",
         "alone_levers": "one cell per GPU, every lever", "mps_four": "four cells per GPU under CUDA MPS",
         "ray_four": "four cells per GPU under CUDA MPS, as Ray tasks", "mps_two": "two cells per GPU under CUDA MPS",
         "warm_one": "one warm worker, one H200", "warm_two": "one warm worker per GPU, two H200s of one host"}
MARKS = "bench/logs/shared-gpu-h200-ray4-2way-marks.log"
# Whole cell processes: (clock, file, cell, event the process started after): "sweep", the sweep's own line
# `[sweep] i/n CELL ARMS on gpu G: ok, M min`; "ray" and "timing", the start and end of the cell's arms process in the
# Ray timing file or the local sweep's (its base-evaluation process apart); "marks", the driver's mark before the
# processes started to the cell's own end mark `B rerun-<seed> rc=0`.
PROCESSES = {
    # s105, on a warm compile cache as every shared group ran (s100's cold process, 4.7 min, is in the 4way log)
    "alone_levers": [("sweep", "bench/logs/shared-gpu-h200-alone.log", "coupled-lr0.0001-s105", None)],
    "mps_four": [("sweep", "bench/logs/shared-gpu-h200-4way.log", f"coupled-lr0.0001-s{seed}", None)
                 for seed in (101, 102, 103, 104)],
    "ray_four": [("ray", "bench/logs/shared-gpu-h200-ray4-timing.jsonl", f"coupled-lr0.0001-s{seed}", None)
                 for seed in (106, 107, 108, 109)],
    "mps_two": [("marks", MARKS, f"coupled-lr0.0001-s{seed}", "A sweep rc=0") for seed in (100, 105)],
    "warm_one": [("timing", TIMING, f"coupled-lr0.0001-s{seed}", None) for seed in WARM_ONE],
    "warm_two": [("timing", TIMING, f"coupled-lr0.0001-s{seed}", None) for seed in WARM_TWO],
}
REFERENCE_CELL = "coupled-lr0.0001-s105"  # one cell alone on a warm compile cache, as every shared group ran
# A group's whole time by the driver's marks: (first event, last events); the Ray sweep's includes Ray's start and
# s106's base-evaluation process.
GROUPS = {"ray_four": ("start", ("A sweep rc=0",)),
          "mps_two": ("A sweep rc=0", ("B rerun-s100 rc=0", "B rerun-s105 rc=0"))}
SWEEP_LINE = re.compile(r"\[sweep\] \d+/\d+ (?P<cell>\S+) \S+ on gpu \S+: ok, (?P<minutes>[\d.]+) min")
PROFILES = {"one GPU, 64 rows": "bench/step-profile-h200-on.json",
            "one of 2 processes, 32 rows": "bench/step-profile-h200-rows32.json"}
PARTS = ("generation", "forward", "backward")  # the rest of the step is "other"


def _results_file(source: str) -> Path:
    """A run's results.json: a file named as such (a re-run kept in bench/logs), or in a cell folder (a bare name:
    under results/qwen)."""
    path = ROOT / source if source.startswith(("results/", "bench/")) else CELLS / source
    return path if path.suffix == ".json" else path / "results.json"


def _run(source: str, arm: str) -> dict:
    """Step times and (for a finished arm) minutes of one run."""
    if source.endswith(".jsonl"):
        log = [json.loads(line) for line in (ROOT / source).read_text().splitlines() if line.strip()]
        minutes = {}
    else:
        entry = json.loads(_results_file(source).read_text())["arms"][arm]
        log = entry["train_log"]
        minutes = {k: entry[k] for k in ("train_minutes", "eval_minutes", "wall_minutes")}
        minutes["eval_generation_s"] = entry["eval"]["seconds"]["generation"]
    steps = [row["step_time"] for row in log]
    return {"source": source, "arm": arm, "steps": len(steps), "first_step_s": steps[0],
            "median_step_s": median_step_s(log), **minutes}


def _marks(path: str) -> dict[str, float]:
    """The driver's marks file: event -> unix time (lines `<unix time> <event>`)."""
    marks = {}
    for line in (ROOT / path).read_text().splitlines():
        time, _, event = line.strip().partition(" ")
        if event:
            marks[event] = float(time)
    return marks


def _process_minutes(clock: str, path: str, cell: str, after: str | None) -> float:
    """Minutes of one whole cell process (model loading, both arms, their evaluations) by the clock that timed it."""
    if clock == "sweep":
        found = [float(m["minutes"]) for m in map(SWEEP_LINE.search, (ROOT / path).read_text().splitlines())
                 if m and m["cell"] == cell]
    elif clock in ("ray", "timing"):  # the same lines: sweep.py writes them for a Ray task and a local worker alike
        rows = [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]
        found = [(r["end"] - r["start"]) / 60 for r in rows if r["cell"] == cell and "base" not in r["arms"]]
    else:
        marks = _marks(path)
        end = f"B rerun-{cell.rsplit('-', 1)[1]} rc=0"
        found = [(marks[end] - marks[after]) / 60] if end in marks and after in marks else []
    if len(found) != 1:
        raise ValueError(f"{path}: {len(found)} timings of {cell}'s process, expected 1")
    return found[0]


def processes() -> dict:
    """Per way that PROCESSES times: its cell processes' minutes, GPU-minutes per cell and cells per GPU-hour
    against one cell alone (REFERENCE_CELL); where the marks time the group as a whole, the same from its time."""
    out = {}
    for way, specs in PROCESSES.items():
        rows = [{"cell": cell, "clock": clock, "source": path, "minutes": _process_minutes(clock, path, cell, after)}
                for clock, path, cell, after in specs]
        minutes = statistics.median(r["minutes"] for r in rows)
        out[way] = {"label": LABEL[way], "gpus_per_cell": GPUS[way], "processes": rows, "cell_minutes": minutes,
                    "gpu_minutes_per_cell": minutes * GPUS[way]}
        if way in GROUPS:
            first, lasts = GROUPS[way]
            marks = _marks(MARKS)
            group = (max(marks[e] for e in lasts) - marks[first]) / 60
            out[way].update(group_minutes=group, group_source=MARKS, group_marks=[first, *lasts],
                            gpu_minutes_per_cell_of_group=group / len(rows))
    reference = next(r["minutes"] for r in out["alone_levers"]["processes"] if r["cell"] == REFERENCE_CELL)
    for entry in out.values():
        entry["cells_per_gpu_hour_vs_alone"] = reference / entry["gpu_minutes_per_cell"]
        if "group_minutes" in entry:
            entry["cells_per_gpu_hour_vs_alone_of_group"] = reference / entry["gpu_minutes_per_cell_of_group"]
    return {"reference_cell": REFERENCE_CELL, "reference_minutes": reference, "ways": out}


def measure() -> dict:
    """Per way of using the GPUs: its runs, the median of their median step times, and throughput per H200."""
    out = {"model": "qwen2.5-coder-1.5b-instruct", "config": "configs/qwen.yaml", "rows": 64, "ways": {}}
    for way, runs in RUNS.items():
        rows = [_run(*r) for r in runs]
        step = statistics.median(r["median_step_s"] for r in rows)
        walls = [r["wall_minutes"] for r in rows if "wall_minutes" in r]  # finished arms: training + evaluation
        wall = statistics.median(walls) if walls else None
        out["ways"][way] = {"label": LABEL[way], "gpus_per_arm": GPUS[way], "runs": rows, "total_s": step,
                            "steps_per_s_per_gpu": 1 / step / GPUS[way], "arm_wall_minutes": wall,
                            "gpu_minutes_per_arm": None if wall is None else wall * GPUS[way]}
    alone, shared, dp = (out["ways"][w]["total_s"] for w in ("alone", "shared", "data_parallel"))
    out["data_parallel_speedup"] = alone / dp  # one arm's steps per second, 2 GPUs vs 1 (target >= 1.8)
    out["sharing_throughput"] = 2 * alone / shared  # steps per second of one GPU with two arms vs one
    grouped, dp_grouped = (out["ways"][w]["total_s"] for w in ("alone_grouped", "data_parallel_grouped"))
    out["grouped_speedup"] = alone / grouped  # same way, after attention.py
    out["data_parallel_grouped_speedup"] = grouped / dp_grouped
    one, four = (out["ways"][w]["gpu_minutes_per_arm"] for w in ("alone_levers", "mps_four"))
    out["mps_four_throughput"] = one / four  # arms per GPU-hour, four processes under MPS vs one (target >= 1.8)
    out["ray_four_throughput"] = one / out["ways"]["ray_four"]["gpu_minutes_per_arm"]  # the same, as Ray tasks
    out["mps_two_throughput"] = one / out["ways"]["mps_two"]["gpu_minutes_per_arm"]  # two processes under MPS vs one
    out["cell_processes"] = processes()
    # cells per hour of a two-GPU machine, one warm worker per GPU, against one warm worker on one GPU
    warm = out["cell_processes"]["ways"]
    out["warm_two_gpus_throughput"] = 2 * warm["warm_one"]["cell_minutes"] / warm["warm_two"]["cell_minutes"]
    out["breakdown"] = breakdown()
    return out


def breakdown() -> dict:
    """Seconds per part of the median step: one GPU at 64 rows vs one process's 32 rows (what 2 processes each do).
    A part that does not shrink with the rows does not scale with the GPUs."""
    out = {}
    for label, path in PROFILES.items():
        step = json.loads((ROOT / path).read_text())["step"]
        parts = {p: step["median_step"][p] for p in PARTS}
        out[label] = {"source": path, "rows": step["rows"], "total_s": step["total_s"], **parts,
                      "other": step["total_s"] - sum(parts.values())}
    return out


def table(m: dict, markdown: bool = False) -> str:
    head = ["how the arms use the GPUs", "median step (s)", "first step (s)", "steps/s per GPU",
            "arm incl. full-test eval (min)", "GPU-min per arm", "runs"]
    minutes = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    rows = [[w["label"], f"{w['total_s']:.2f}", f"{statistics.median(r['first_step_s'] for r in w['runs']):.0f}",
             f"{w['steps_per_s_per_gpu']:.3f}", minutes(w["arm_wall_minutes"]), minutes(w["gpu_minutes_per_arm"]),
             str(len(w["runs"]))] for w in m["ways"].values()]
    lines = (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
             if markdown else ["  ".join(head)] + ["  ".join(r) for r in rows])
    lines += ["", f"{m['model']}, {m['config']}, {m['rows']} rollouts per step on H200s. One arm on 2 GPUs: "
              f"{m['data_parallel_speedup']:.2f}x the steps per second of one GPU. Two arms on one GPU: "
              f"{m['sharing_throughput']:.2f}x one arm's throughput (these three before grouped-query decoding). "
              f"With it, one arm per GPU: {m['grouped_speedup']:.2f}x the steps per second of before; one arm on 2 "
              f"GPUs: {m['data_parallel_grouped_speedup']:.2f}x one GPU's. With every lever, four cells at once under "
              f"CUDA MPS: {m['mps_four_throughput']:.2f}x the arms per GPU-hour of one cell alone; as Ray tasks: "
              f"{m['ray_four_throughput']:.2f}x; two cells at once under CUDA MPS: {m['mps_two_throughput']:.2f}x "
              f"(arms' training and evaluation minutes, the process start not counted)."]
    p = m["cell_processes"]
    head = ["whole cell processes", "processes", "min per process", "GPU-min per cell",
            "cells per GPU-hour vs one alone", "the group, first mark to last (min)", "the same from the group's time"]
    body = [[w["label"], str(len(w["processes"])), ", ".join(f"{r['minutes']:.1f}" for r in w["processes"]),
             f"{w['gpu_minutes_per_cell']:.2f}", f"{w['cells_per_gpu_hour_vs_alone']:.2f}x",
             minutes(w.get("group_minutes")),
             "-" if "group_minutes" not in w else f"{w['cells_per_gpu_hour_vs_alone_of_group']:.2f}x"]
            for w in p["ways"].values()]
    lines += [""] + (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in body] if markdown
                     else ["  ".join(head)] + ["  ".join(r) for r in body])
    lines += ["", f"A cell process: model loading, both arms (ETS, GMTS) and their full-test evaluations, base "
              f"evaluations read from the cache; its minutes by the sweep's log, the Ray timing file (start to end of "
              f"the arms' process) or, for the two at once, the driver's marks (a mark before both started to each "
              f"one's end). Against {p['reference_cell']} alone on a warm compile cache "
              f"({p['reference_minutes']:.1f} min), as every shared group ran. The group's time (the driver's marks) "
              f"adds what lies between the processes: Ray's start and a base-evaluation process for the Ray sweep. "
              f"In a warm worker a cell is a job of the worker's process, its model already loaded and compiled (each "
              f"worker's first cell left out), timed by the sweep's timing file: two H200s of one host, one warm "
              f"worker each, ran {m['warm_two_gpus_throughput']:.2f}x the cells per hour of one H200's warm worker "
              f"(median cell {p['ways']['warm_two']['cell_minutes']:.2f} min against "
              f"{p['ways']['warm_one']['cell_minutes']:.2f})."]
    b = m["breakdown"]
    cols = list(b)
    head = ["part of the median step (s)"] + [f"{c} ({b[c]['source']})" for c in cols]
    body = [[p] + [f"{b[c][p]:.2f}" for c in cols] for p in (*PARTS, "other", "total_s")]
    lines += [""] + (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in body] if markdown
                     else ["  ".join(head)] + ["  ".join(r) for r in body])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the table of the committed results file")
    args = ap.parse_args(argv)
    if args.markdown:
        print(fill_lines(table(json.loads(OUT.read_text()), markdown=True)))
        return 0
    m = measure()
    OUT.write_text(json.dumps(m, indent=1) + "\n")
    print(table(m))
    print(f"written {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
