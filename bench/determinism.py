"""Do training steps repeat when another run shares the GPU, with and without `deterministic_kernels`? For each
setting of the option: one process alone, then two identical processes at once (separate processes on one GPU: under
CUDA MPS when its daemon runs, as the 2026-12-01 pairs ran), each training --steps steps of the gmts arm (recipe.Run's
trainer, as side_by_side.py does; no evaluation, no checkpoints). Per step it records whether the rollouts (digests),
the loss, grad_norm and every other logged metric (bench/repeat.py's, wall-clock fields left out) agree between the
runs, and each run's step times: the option's cost is the median step with it against without.

    python bench/determinism.py --out bench/determinism-h200.json --steps 12 -- --config configs/qwen.yaml \
        --gsm8k_path DIR
    python bench/determinism.py --small --out F     # CPU: the tiny random model (bench/step.py's config)
    python bench/determinism.py --markdown bench/determinism-h200.json bench/determinism-h200-on.json   # the table

configs/paper.yaml's generation levers and its sampling_noise come first on every command line (what the recipe's
runs use; the arguments after -- win). `--settings off` or `on` runs one setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from gmts_recipe.records import json_file  # noqa: E402
from repeat import WALL_CLOCK  # noqa: E402
from side_by_side import PAPER, cli, one_line, path_options, small_argv  # noqa: E402

ARM = "gmts"
SETTINGS = ("off", "on")  # deterministic_kernels false / true
TRACKED = ("loss", "grad_norm", "reward")  # shown per step in the results, besides the verdicts


def progress(message: str) -> None:
    print(f"[determinism] {message}", flush=True)


# ---------------------------------------------------------------------------- one run, in its own process
def measure(argv: list[str]) -> dict:
    """Train --max_steps steps of the gmts arm as recipe.py would (deterministic_kernels applied before any CUDA
    work, as recipe.py does); each step's logged metrics, rollout digests and synchronized wall time."""
    import torch
    from transformers import TrainerCallback

    import recipe
    from gmts_recipe import determinism

    recipe_args, train_args, model_args, name = recipe.parse(argv)
    recipe.deterministic_kernels(train_args)
    cuda = torch.cuda.is_available() and not train_args.use_cpu
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.backends.cuda.enable_cudnn_sdp(recipe_args.cudnn_attention)  # as recipe._run_experiment does
    train_tasks, _, _ = recipe.load_tasks(recipe_args)
    trainer, _ = recipe.Run(recipe_args, train_args, model_args, name).build_trainer(ARM, train_tasks)

    class StepClock(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []
            self.began = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            self.seconds.append(time.perf_counter() - self.began)

    clock = StepClock()
    trainer.add_callback(clock)
    began = time.time()
    trainer.train()
    log = [row for row in trainer.state.log_history if "step" in row and "loss" in row]
    steps = clock.seconds
    return {"status": "ok", "began": began, "ended": time.time(), "step_s": steps,
            "median_step_s": statistics.median(steps[1:]) if len(steps) > 1 else None,
            "train_log": log, "rollout_digests": trainer.rollout_digests,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "nondeterministic_ops": determinism.reported()}


def run_one(record_file: Path, argv: list[str]) -> int:
    """The child process: one run's record, an error as its one-line reason."""
    try:
        record = measure(argv)
    except Exception as err:  # noqa: BLE001 - a failed run is a result of the comparison, not a crash
        import traceback

        traceback.print_exc()
        record = {"status": "failed", "reason": one_line(f"{type(err).__name__}: {err}")}
    record_file.write_text(json.dumps(record, indent=1, default=str))
    return 0


# ---------------------------------------------------------------------------- the comparison
def _metrics(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(w in k for w in WALL_CLOCK)}


def compare_steps(a: dict, b: dict) -> dict:
    """Step by step, whether two runs' rollouts and logged metrics agree; the first step where each differs."""
    rows_a = {row["step"]: row for row in a["train_log"]}
    rows_b = {row["step"]: row for row in b["train_log"]}
    digests_a, digests_b = a.get("rollout_digests", {}), b.get("rollout_digests", {})
    steps = []
    for step in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(step, {}), rows_b.get(step, {})
        ma, mb = _metrics(ra), _metrics(rb)
        # rollout digests are keyed by the global step at generation: step s's update trained step s - 1's rollouts
        key = str(step - 1)
        steps.append({"step": step, "rollouts_same": digests_a.get(key) == digests_b.get(key),
                      "metrics_same": ma == mb,
                      "metrics_differing": sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k)),
                      **{k: [ra.get(k), rb.get(k)] for k in TRACKED}})
    first = lambda key: next((s["step"] for s in steps if not s[key]), None)  # noqa: E731
    return {"identical": all(s["rollouts_same"] and s["metrics_same"] for s in steps) and bool(steps),
            "first_step_rollouts_differ": first("rollouts_same"), "first_step_metrics_differ": first("metrics_same"),
            "steps": steps}


def comparisons(setting: dict) -> dict:
    """Each shared run against the run alone, and the two shared runs against each other."""
    alone, shared = setting.get("alone"), setting.get("shared", [])
    ok = lambda r: r is not None and r.get("status") == "ok"  # noqa: E731
    pairs = {f"shared-{i + 1} vs alone": (alone, r) for i, r in enumerate(shared)}
    if len(shared) == 2:
        pairs["shared-2 vs shared-1"] = (shared[0], shared[1])
    return {label: compare_steps(a, b) if ok(a) and ok(b) else {"identical": None, "reason": "a run failed"}
            for label, (a, b) in pairs.items()}


def cost(runs: dict) -> dict:
    """Median step (all but the first, which compiles) alone and shared, per setting, and on/off ratios."""
    def median(setting: str, mode: str) -> float | None:
        records = runs.get(setting, {}).get(mode)
        records = records if isinstance(records, list) else [records]
        values = [r["median_step_s"] for r in records if r and r.get("status") == "ok" and r["median_step_s"]]
        return statistics.mean(values) if values else None

    out = {f"{s}_{m}_median_step_s": median(s, m) for s in SETTINGS for m in ("alone", "shared")}
    for m in ("alone", "shared"):
        off, on = out[f"off_{m}_median_step_s"], out[f"on_{m}_median_step_s"]
        out[f"on_over_off_{m}"] = on / off if on and off else None
    return out


# ---------------------------------------------------------------------------- the parent
def start(argv: list[str], record_file: Path, log_file: Path) -> subprocess.Popen:
    record_file.unlink(missing_ok=True)
    log = log_file.open("w")
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--one", "--record", str(record_file),
                             "--", *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, record_file: Path, log_file: Path) -> dict:
    code = proc.wait()
    if record_file.is_file():
        return json.loads(record_file.read_text())
    return {"status": "failed", "reason": f"exited {code}: {one_line(log_file.read_text())}", "log": str(log_file)}


def run_argv(rest: list[str], setting: str, work: Path, label: str, steps: int) -> list[str]:
    """The paper's levers, the shared arguments (which win), the setting and this bench's fixed fields."""
    from gmts_recipe.records import read_yaml_mapping

    paper = read_yaml_mapping(PAPER, ValueError, "a config")  # its sampling_noise: rollouts of (seed, step) only
    levers = {**path_options("ours", 0.0), "sampling_noise": paper.get("sampling_noise", "stream")}
    return [*rest[:2], *(a for k, v in levers.items() for a in (f"--{k}", cli(v))), *rest[2:],
            "--deterministic_kernels", cli(setting == "on"), "--results_dir", str(work / label),
            "--experiment", "determinism", "--save_strategy", "no", "--save_minutes", "0", "--arm", ARM,
            "--max_steps", str(steps)]


def run_settings(args: argparse.Namespace, rest: list[str]) -> dict:
    import recipe

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="determinism-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.small:
        rest = [*small_argv(work), *rest]
    if rest[:1] != ["--config"]:
        raise recipe.RecipeError("give the recipe's arguments after --, starting with --config FILE")
    result = {"versions": recipe.versions(), "recipe_argv": rest, "steps": args.steps, "arm": ARM,
              "small": args.small, "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    for setting in args.settings:
        runs = result["runs"].setdefault(setting, {})
        progress(f"deterministic_kernels {setting}: one run alone ({args.steps} steps)")
        argv = run_argv(rest, setting, work, f"{setting}-alone", args.steps)
        files = (work / f"{setting}-alone.json", work / f"{setting}-alone.log")
        runs["argv"] = argv
        runs["alone"] = finish(start(argv, *files), *files)
        progress(f"deterministic_kernels {setting}: two runs at once")
        procs = []
        for i in (1, 2):
            files = (work / f"{setting}-shared-{i}.json", work / f"{setting}-shared-{i}.log")
            procs.append((start(run_argv(rest, setting, work, f"{setting}-shared-{i}", args.steps), *files), *files))
        runs["shared"] = [finish(*p) for p in procs]
        shared = [r for r in runs["shared"] if r.get("status") == "ok"]
        runs["overlap_s"] = (min(r["ended"] for r in shared) - max(r["began"] for r in shared)
                             if len(shared) == 2 else None)  # how long the two trained at the same time
        result.setdefault("comparison", {})[setting] = comparisons(runs)
        result["cost"] = cost(result["runs"])
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")  # a cut run keeps its part
        for label, c in result["comparison"][setting].items():
            progress(f"deterministic_kernels {setting}, {label}: " + (
                "identical" if c["identical"] else f"differs (a run failed)" if c["identical"] is None else
                f"differs from step {c['first_step_metrics_differ']} (rollouts from step "
                f"{c['first_step_rollouts_differ']})"))
    return result


# ---------------------------------------------------------------------------- the table (bench/README.md)
def _verdict(c: dict) -> str:
    if c.get("identical") is None:
        return "not compared (a run failed)"
    if c["identical"]:
        return f"identical ({len(c['steps'])} steps)"
    rollouts = c["first_step_rollouts_differ"]
    return (f"differs from step {c['first_step_metrics_differ']} ("
            + (f"rollouts from step {rollouts})" if rollouts is not None else "rollouts the same)"))


def markdown(paths: list[str]) -> str:
    """One row per results file and setting: each run's status, the median step alone and per run when two share the
    GPU, and each shared run against the run alone."""
    rows = ["| file | deterministic_kernels | measured | median step alone (s) | median step, two at once (s) | "
            "shared-1 vs alone | shared-2 vs alone | failed run |", "|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
    for path in paths:
        result = json.loads(Path(path).read_text())
        for setting, runs in result["runs"].items():
            comparison = result.get("comparison", {}).get(setting, {})
            cost_ = cost({setting: runs})
            failed = [r.get("reason", "") for r in [runs.get("alone"), *runs.get("shared", [])]
                      if r and r.get("status") != "ok"]
            rows.append(f"| {Path(path).name} | {setting} | {result['measured']} | "
                        f"{fmt(cost_[f'{setting}_alone_median_step_s'])} | "
                        f"{fmt(cost_[f'{setting}_shared_median_step_s'])} | "
                        f"{_verdict(comparison.get('shared-1 vs alone', {}))} | "
                        f"{_verdict(comparison.get('shared-2 vs alone', {}))} | "
                        f"{(failed[0][:160] + (f' ({len(failed)} runs)' if len(failed) > 1 else '')) if failed else '-'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the results file (bench/determinism-h200.json)")
    ap.add_argument("--steps", type=int, default=4, help="training steps per run (the first compiles; default 4)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="deterministic_kernels settings: off,on (default)")
    ap.add_argument("--small", action="store_true", help="the tiny random model and config (CPU, seconds)")
    ap.add_argument("--work", help="folder for the runs and their logs (default: a new temporary folder)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the child process of one run
    ap.add_argument("--record", help=argparse.SUPPRESS)
    ap.add_argument("--markdown", nargs="+", metavar="FILE", type=json_file,
                    help="print the table of these results files and stop")
    args = ap.parse_args(ours)
    if args.markdown:
        print(markdown(args.markdown))
        return 0
    if args.one:
        return run_one(Path(args.record), rest)
    if not args.out:
        ap.error("--out is required")
    args.settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not args.settings or any(s not in SETTINGS for s in args.settings):
        ap.error(f"--settings: {','.join(args.settings) or 'empty'}: use off, on or off,on")
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first step compiles; step 1 is the first that trains on updated weights)")
    import recipe

    try:
        run_settings(args, rest)
    except recipe.RecipeError as err:
        print(f"determinism.py: {err}", file=sys.stderr)
        return 2
    progress(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
