"""The same paper-config GMTS step three ways, each in a process of its own on one machine: (a) TRL's own generation
(transformers' `generate`, the adapter unmerged, every generation option of this recipe off), (b) TRL with vLLM in
colocate mode (`use_vllm`, `vllm_mode="colocate"`: an LLM engine in the training process, weights pushed to it
every step), (c) this recipe's generation (configs/paper.yaml's generation levers: merged LoRA, the compiled decode
step, grouped attention, ...). Everything else is the command line's, the same for all three.

    python bench/side_by_side.py --out bench/side-by-side-h200.json --steps 5 -- --config configs/qwen.yaml \
        --gsm8k_path DIR --gradient_checkpointing false
    python bench/side_by_side.py --out F --paths vllm -- ...      # one path; the file keeps the others' entries
    python bench/side_by_side.py --out F --complete -- ...         # and a complete run (recipe.py --arm ets,gmts)
    python bench/side_by_side.py --markdown bench/side-by-side-h200.json   # the README's table
    python bench/side_by_side.py --small --out F                   # CPU: the tiny random model (bench/step.py's)

Per path: --steps training steps of the gmts arm through recipe.Run.build_trainer (what `recipe.py --arm gmts`
trains, without checkpoints), each step's wall time CUDA-synchronized at both ends; the first step (compilation, the
vLLM engine's first weight push) is reported apart, the median over the others is the step time. With --complete,
also one `bench/complete_run.py` process per path (its summary, in a results directory of its own). A path that
cannot run (vLLM not installed, an error, a crashed process) is recorded with its one-line reason; the others go on.
Each path's entry records its own --steps (`max_steps`: a path run by a later call may have another) and the
environment variables the bench set for its process (`env`): without flashinfer installed, vLLM's top-k/top-p sampler
would import it and fail, so path (b) runs with VLLM_USE_FLASHINFER_SAMPLER=0 unless the caller set that variable.
"""

from __future__ import annotations

import argparse
import importlib.util
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

PATHS = {"trl": "(a) TRL's generation", "vllm": "(b) TRL + vLLM, colocate", "ours": "(c) this recipe's generation"}
REFERENCE = "ours"  # the ratios are path / ours
ARM = "gmts"
PAPER = ROOT / "configs" / "paper.yaml"  # where (c)'s generation levers are read from
# GMTSConfig's generation fields (recipe.GENERATION_OPTIONS minus the training-side ones, which every path shares)
SHARED_OPTIONS = ("use_cpu", "cudnn_attention", "lora_autocast_inputs", "training_compile", "deterministic_kernels")
# vllm_gpu_memory_utilization: the weights (3 GB in bf16), vLLM's 4096-token profiling pass (its logits over 152k
# words: ~4 GB), the KV cache of one 32k-token sequence (0.9 GB) and 64 rows' CUDA graphs fit in 0.15 of 141 GB
VLLM_MEMORY = 0.15
FLASHINFER_SAMPLER = "VLLM_USE_FLASHINFER_SAMPLER"  # 0: vLLM samples top-k/top-p in PyTorch, not with flashinfer


def progress(message: str) -> None:
    print(f"[side_by_side] {message}", flush=True)


def one_line(text: str) -> str:
    """The last non-empty line of an error text, shortened: what a results file keeps of a failure."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:400]


def cli(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def generation_fields() -> tuple[str, ...]:
    import recipe

    return tuple(k for k in recipe.GENERATION_OPTIONS if k not in SHARED_OPTIONS)


def path_options(path: str, vllm_memory: float) -> dict:
    """The settings a path adds to the shared command line: (c) configs/paper.yaml's value of every generation field,
    (a) and (b) GMTSConfig's defaults for them (this recipe's generation off); (b) also vLLM in colocate mode."""
    import dataclasses

    from gmts_recipe.config import GMTSConfig
    from gmts_recipe.records import read_yaml_mapping

    defaults = {f.name: f.default for f in dataclasses.fields(GMTSConfig)}
    fields = generation_fields()
    if path == "ours":
        paper = read_yaml_mapping(PAPER, ValueError, "a config")
        return {k: paper.get(k, defaults[k]) for k in fields}
    options = {k: defaults[k] for k in fields}
    if path == "vllm":
        options.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=vllm_memory)
    return options


def recipe_argv(rest: list[str], options: dict, out: Path, steps: int) -> list[str]:
    """The recipe command line of one path's steps: the shared arguments, the path's settings (which win), and this
    bench's fixed fields (no checkpoints, the gmts arm, --steps steps)."""
    return [*rest, *(a for k, v in options.items() for a in (f"--{k}", cli(v))), "--results_dir", str(out),
            "--experiment", "side-by-side", "--save_strategy", "no", "--save_minutes", "0", "--arm", ARM,
            "--max_steps", str(steps)]


def small_argv(out: Path) -> list[str]:
    """--small: bench/step.py's tiny config around tests/tiny.py's random model."""
    from step import SMALL_CONFIG
    from tiny import save_tiny_model

    config = out / "tiny.yaml"
    config.write_text(SMALL_CONFIG.format(model=save_tiny_model(out / "tiny-model")))
    return ["--config", str(config)]


# ---------------------------------------------------------------------------- one path, in its own process
def measure_steps(path: str, argv: list[str]) -> dict:
    """Train --max_steps steps of the gmts arm as recipe.py would, timing each; the path's record."""
    import torch
    from transformers import TrainerCallback

    import recipe

    if path == "vllm" and importlib.util.find_spec("vllm") is None:
        return {"status": "unavailable", "reason": "vllm is not installed (import vllm: no module named 'vllm')"}
    recipe_args, train_args, model_args, name = recipe.parse(argv)
    cuda = torch.cuda.is_available() and not train_args.use_cpu
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.backends.cuda.enable_cudnn_sdp(recipe_args.cudnn_attention)  # as recipe._run_experiment does
    t0 = time.perf_counter()
    train_tasks, _, _ = recipe.load_tasks(recipe_args)
    trainer, args_used = recipe.Run(recipe_args, train_args, model_args, name).build_trainer(ARM, train_tasks)
    setup_s = time.perf_counter() - t0

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
    progress(f"{path}: {train_args.max_steps} steps (setup {setup_s:.1f} s)")
    trainer.train()
    steps = clock.seconds
    trl_step = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    rows = args_used.per_device_train_batch_size * args_used.gradient_accumulation_steps
    record = {"status": "ok", "setup_s": setup_s, "step_s": steps, "first_step_s": steps[0] if steps else None,
              "median_step_s": statistics.median(steps[1:]) if len(steps) > 1 else None,
              "trl_step_time_s": trl_step, "rows": rows, "max_completion_length": args_used.max_completion_length,
              "entropy_source": trainer.entropy_source_used,
              "rewards": [row["reward"] for row in trainer.state.log_history if "reward" in row]}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        record["gpu_memory_gib"] = {"torch_peak_allocated": torch.cuda.max_memory_allocated() / 2**30,
                                    "used_at_end": (total - free) / 2**30}
    if path == "vllm":
        import vllm

        record["vllm"] = {"version": vllm.__version__,
                          "importance_sampling": {k: getattr(args_used, k) for k in (
                              "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                              "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max")}}
    return record


def run_one(path: str, record_file: Path, argv: list[str]) -> int:
    """The child process: measure one path and write its record, an error as its one-line reason."""
    try:
        record = measure_steps(path, argv)
    except Exception as err:  # noqa: BLE001 - any failure of a path is a result of the comparison, not a crash
        import traceback

        traceback.print_exc()
        record = {"status": "failed", "reason": one_line(f"{type(err).__name__}: {err}")}
    record_file.write_text(json.dumps(record, indent=1, default=str))
    return 0


# ---------------------------------------------------------------------------- the parent: every path, one file
def env_overrides(path: str) -> dict[str, str]:
    """The environment a path's processes get beyond ours: for vLLM without flashinfer installed, its PyTorch
    sampler (vLLM's default top-k/top-p sampler imports flashinfer), unless the caller chose one. Nothing where
    vLLM itself is not installed: the path is recorded as unavailable."""
    if (path == "vllm" and FLASHINFER_SAMPLER not in os.environ and importlib.util.find_spec("vllm") is not None
            and importlib.util.find_spec("flashinfer") is None):
        return {FLASHINFER_SAMPLER: "0"}
    return {}


def child(cmd: list[str], record_file: Path, env: dict[str, str] | None = None) -> dict:
    """Run a child process (env: variables added to ours); its record, or the reason it left none (exit status
    and its last error line)."""
    # VLLM_NO_USAGE_STATS: vLLM would otherwise report usage over the network
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env=env)
    sys.stderr.write(proc.stderr[-20000:])
    if record_file.is_file():
        return json.loads(record_file.read_text())
    return {"status": "failed", "reason": f"exited {proc.returncode}: {one_line(proc.stderr)}"}


def complete_run(path: str, rest: list[str], options: dict, work: Path, env: dict[str, str] | None = None) -> dict:
    """One bench/complete_run.py process with this path's settings, in a results directory of its own."""
    summary = work / f"complete-{path}.json"
    cmd = [sys.executable, str(ROOT / "bench" / "complete_run.py"), "--out", str(summary), "--", *rest,
           *(a for k, v in options.items() for a in (f"--{k}", cli(v))), "--results_dir", str(work / f"run-{path}")]
    if path == "vllm" and importlib.util.find_spec("vllm") is None:
        return {"status": "unavailable", "reason": "vllm is not installed (import vllm: no module named 'vllm')"}
    record = child(cmd, summary, env)
    if "status" not in record:  # complete_run.py's summary
        record = {"status": "ok" if record.get("returncode") == 0 else "failed", **record}
        if record["status"] == "failed":
            record["reason"] = f"recipe.py exited {record.get('returncode')}"
    return record


def run_paths(args: argparse.Namespace, rest: list[str]) -> dict:
    import recipe

    out = Path(args.out)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="side-by-side-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.small:
        rest = [*small_argv(work), *rest]
    result = json.loads(out.read_text()) if out.is_file() else {}
    if result and result.get("recipe_argv") != rest:
        raise recipe.RecipeError(f"{out} holds paths measured with other arguments ({result.get('recipe_argv')}); "
                                 f"write to another --out")
    result.pop("steps", None)  # files before each path recorded its own: the last call's, wrong for the others
    result.update({"versions": recipe.versions(), "recipe_argv": rest, "arm": ARM,
                   "reference": REFERENCE, "small": args.small, "vllm_gpu_memory_utilization": args.vllm_memory})
    result.setdefault("paths", {})
    for path in args.paths:
        options = path_options(path, args.vllm_memory)
        progress(f"{PATHS[path]}: {' '.join(f'--{k} {cli(v)}' for k, v in options.items())}")
        record_file = work / f"steps-{path}.json"
        record_file.unlink(missing_ok=True)
        argv = recipe_argv(rest, options, work / f"steps-{path}", args.steps)
        env = env_overrides(path)
        if env:
            progress(f"{PATHS[path]}: flashinfer is not installed: " + " ".join(f"{k}={v}" for k, v in env.items())
                     + " (vLLM's top-k/top-p sampler in PyTorch)")
        entry = {"label": PATHS[path], "options": options, "max_steps": args.steps, "env": env,
                 "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "steps": child([sys.executable, str(Path(__file__).resolve()), "--one", path, "--record",
                                 str(record_file), "--", *argv], record_file, env)}
        if args.complete:
            progress(f"{PATHS[path]}: a complete run (bench/complete_run.py)")
            entry["complete_run"] = complete_run(path, rest, options, work, env)
        result["paths"][path] = entry
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")  # after each path: a cut run keeps its part
        s = entry["steps"]
        progress(f"{PATHS[path]}: " + (f"median step {s['median_step_s']:.3f} s" if s["status"] == "ok" and
                                      s["median_step_s"] is not None else f"{s['status']}: {s.get('reason', '')}"))
    return result


# ---------------------------------------------------------------------------- the table
def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ratio(value: float | None, reference: float | None) -> str:
    return "-" if value is None or not reference else f"{value / reference:.2f}x"


def _timed(path_entry: dict) -> int | None:
    """How many steps a path timed: its step times (files of every age have them), else the steps it was asked
    for."""
    steps = path_entry["steps"].get("step_s")
    return len(steps) if steps is not None else path_entry.get("max_steps")


def markdown(result: dict) -> str:
    """One row per path, (a), (b), (c): median step, first step, setup, the steps it timed, and with --complete the
    run's GPU minutes; each with its ratio to (c). A path that did not run says why."""
    paths, ref = result.get("paths", {}), result.get("reference", REFERENCE)
    ref_steps = paths.get(ref, {}).get("steps", {})
    ref_complete = paths.get(ref, {}).get("complete_run", {})
    complete = any("complete_run" in p for p in paths.values())
    header = ("| path | median step (s) | vs (c) | first step (s) | setup (s) | steps timed | "
              "rewards (mean of the steps) |")
    if complete:
        header += " complete run (GPU-min) | vs (c) |"
    lines = [header, "|---" * header.count(" | ") + "|---|"]
    for path, label in PATHS.items():
        if path not in paths:
            continue
        s = paths[path]["steps"]
        if s["status"] != "ok":
            row = f"| {label} | {s['status']}: {s.get('reason', '')} | | | | | |"
        else:
            med, first, rewards = s["median_step_s"], s["first_step_s"], s.get("rewards") or []
            row = (f"| {label} | {_number(med, '.2f')} | {_ratio(med, ref_steps.get('median_step_s'))} | "
                   f"{_number(first, '.1f')} | {s['setup_s']:.1f} | {_number(_timed(paths[path]), 'd')} | "
                   f"{_number(sum(rewards) / len(rewards) if rewards else None, '.2f')} |")
        if complete:
            c = paths[path].get("complete_run")
            if c is None:
                row += " - | - |"
            elif c["status"] != "ok":
                row += f" {c['status']}: {c.get('reason', '')} | - |"
            else:
                ref_min = ref_complete.get("gpu_minutes") if ref_complete.get("status") == "ok" else None
                row += f" {c['gpu_minutes']:.2f} | {_ratio(c['gpu_minutes'], ref_min)} |"
        lines.append(row)
    v = result.get("versions", {})
    any_ok = next((p["steps"] for p in paths.values() if p["steps"]["status"] == "ok"), {})
    lines += ["", f"{v.get('gpu') or 'CPU'}; torch {v.get('torch')}, transformers {v.get('transformers')}, trl "
              f"{v.get('trl')}; arm {result.get('arm')}, {any_ok.get('rows', '-')} rollouts x <= "
              f"{any_ok.get('max_completion_length', '-')} tokens per step; per path the median over the steps it "
              f"timed but the first (which compiles); one process per path; vLLM's share of the GPU "
              f"{result.get('vllm_gpu_memory_utilization')}."]
    ref_median = ref_steps.get("median_step_s") if ref_steps.get("status") == "ok" else None
    faster = [f"{_ratio(paths[k]['steps']['median_step_s'], ref_median)} as fast as {PATHS[k].split(' ', 1)[0]}"
              for k in PATHS if k != ref and k in paths and paths[k]["steps"]["status"] == "ok"
              and paths[k]["steps"].get("median_step_s") and ref_median]
    if faster:
        lines.append(f"Per step, {PATHS[ref].split(' ', 1)[0]} is {' and '.join(faster)}.")
    env = {PATHS[k].split(" ", 1)[0]: p["env"] for k, p in paths.items() if p.get("env")}
    if env:
        lines.append("Set for a path's process: " + "; ".join(
            f"{k} {' '.join(f'{n}={x}' for n, x in e.items())}" for k, e in env.items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the results file (bench/side-by-side-h200.json); paths not run keep their entries")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)} (default: all)")
    ap.add_argument("--steps", type=int, default=5, help="training steps per path (the first compiles; default 5)")
    ap.add_argument("--complete", action="store_true", help="also a complete run per path (bench/complete_run.py)")
    ap.add_argument("--vllm_memory", type=float, default=VLLM_MEMORY,
                    help=f"vllm_gpu_memory_utilization for path vllm (default {VLLM_MEMORY})")
    ap.add_argument("--small", action="store_true", help="the tiny random model and config (CPU, seconds)")
    ap.add_argument("--work", help="folder for the runs (default: a new temporary folder)")
    ap.add_argument("--markdown", metavar="RESULTS", help="print a results file as the README's table (nothing runs)")
    ap.add_argument("--one", choices=list(PATHS), help=argparse.SUPPRESS)  # the child process of one path
    ap.add_argument("--record", help=argparse.SUPPRESS)
    args = ap.parse_args(ours)
    if args.one:
        return run_one(args.one, Path(args.record), rest)
    if args.markdown:
        if not Path(args.markdown).is_file():
            print(f"side_by_side.py: no such file: {args.markdown}", file=sys.stderr)
            return 2
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    if not args.out:
        ap.error("--out is required (or --markdown FILE)")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown or not args.paths:
        ap.error(f"--paths: {', '.join(unknown) or 'empty'}: not among {', '.join(PATHS)}")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    import recipe

    try:
        run_paths(args, rest)
    except recipe.RecipeError as err:
        print(f"side_by_side.py: {err}", file=sys.stderr)
        return 2
    progress(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
