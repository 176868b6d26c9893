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
    python bench/side_by_side.py --out F --paths vllm --arm ets -- ...   # another arm: an entry of its own

Per path and arm: --steps training steps of the --arm arm (default gmts) through recipe.Run.build_trainer (what
`recipe.py --arm gmts` trains, without checkpoints), each step's wall time CUDA-synchronized at both ends; entries are
keyed "path:arm" (files from before --arm, keyed by path, are read as their file-wide arm). Each entry also keeps, per
step, the trainer's selection metrics and TRL's vLLM importance-sampling ones from its log (`selection`), what a
SelectionProbe saw of each ranked generation batch (`selection_probe`: kept and valid tokens, omega as ranked against
advantage x TRL's weight recomputed, the kept set recomputed), and a `selection_check` of both: kept tokens =
ceil(ratio x valid) every step, and for vLLM the weight logged and finite and carried by omega; each claim ok,
failed or not verified with its reason. The first step (compilation, the
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
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]
from gmts_recipe.arms import arms  # noqa: E402
from gmts_recipe.records import json_file  # noqa: E402
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose

PATHS = {"trl": "(a) TRL's generation", "vllm": "(b) TRL + vLLM, colocate", "ours": "(c) this recipe's generation"}
REFERENCE = "ours"  # the ratios are path / ours (of the same arm)
ARM = "gmts"  # the default --arm, and the arm of every entry in files from before --arm
ARM_ORDER = arms()  # the arms (gmts_recipe/arms.py), in the table's order
# What a path's entry keeps of trainer.state.log_history per step: this recipe's selection metrics and TRL's vLLM
# importance-sampling ones (sampling/importance_sampling_ratio/{min,mean,max}, the weight over valid tokens, and
# sampling/sampling_logp_difference/{mean,max}, |trainer - vLLM| log-prob), which TRL logs with use_vllm only.
LOGGED_PREFIXES = ("selection/", "sampling/importance_sampling_ratio/", "sampling/sampling_logp_difference/")
IS_METRICS = tuple(f"sampling/importance_sampling_ratio/{k}" for k in ("min", "mean", "max"))
OMEGA_TOLERANCE = 1e-5  # relative: omega as ranked vs advantage x weight recomputed here (float32 products)
PAPER = ROOT / "configs" / "paper.yaml"  # where (c)'s generation levers are read from
# FastGMTSConfig's generation fields (recipe.GENERATION_OPTIONS minus the training-side ones, which every path shares)
SHARED_OPTIONS = ("use_cpu", "cudnn_attention", "lora_autocast_inputs", "training_compile", "deterministic_kernels",
                  "gradient_checkpointing", "counter_noise_version")
# The generation fields that act on transformers' generate (compile it, or replace it by the compiled step), which
# FastGMTSConfig refuses beside use_vllm; path (b) keeps them at their defaults
VLLM_REPLACED = ("generation_compile", "generation_decode_loop", "generation_compile_regions",
                 "generation_fused_projections")
# vllm_gpu_memory_utilization: the weights (3 GB in bf16), vLLM's 4096-token profiling pass (its logits over 152k
# words: ~4 GB), the KV cache of one 32k-token sequence (0.9 GB) and 64 rows' CUDA graphs fit in 0.15 of an H200's
# 141 GB (measured). vLLM takes a share of the card, so a smaller card gets a larger share of the same ~21 GB.
VLLM_MEMORY = 0.15
VLLM_MEMORY_BYTES = 21 * 2**30
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


def vllm_share(total_bytes: int | None = None) -> float:
    """vLLM's share of the GPU for VLLM_MEMORY_BYTES: at least VLLM_MEMORY, rounded up to a hundredth. The card's
    memory is read from nvidia-smi (no CUDA context in this parent process); without one, VLLM_MEMORY."""
    if total_bytes is None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i",
                                  "0"], capture_output=True, text=True, timeout=30, check=True).stdout
            total_bytes = int(float(out.split()[0]) * 2**20)  # MiB
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return VLLM_MEMORY
    return max(VLLM_MEMORY, math.ceil(100 * VLLM_MEMORY_BYTES / total_bytes) / 100)


def path_options(path: str, vllm_memory: float) -> dict:
    """The settings a path adds to the shared command line: (c) configs/paper.yaml's value of every generation field;
    (a) FastGMTSConfig's defaults for them (this recipe's generation off); (b) vLLM in colocate mode with paper.yaml's
    values of the fields that still act beside it (VLLM_REPLACED at their defaults): vLLM generates the rollouts
    either way, so they change only how the recipe's evaluations decode, which vLLM does not do."""
    import dataclasses

    from gmts_recipe.fast_config import FastGMTSConfig
    from gmts_recipe.records import read_yaml_mapping

    defaults = {f.name: f.default for f in dataclasses.fields(FastGMTSConfig)}
    fields = generation_fields()
    if path == "trl":
        return {k: defaults[k] for k in fields}
    paper = read_yaml_mapping(PAPER, ValueError, "a config")
    options = {k: paper.get(k, defaults[k]) for k in fields}
    if path == "vllm":
        options.update({k: defaults[k] for k in VLLM_REPLACED})
        options.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=vllm_memory)
    return options


def recipe_argv(rest: list[str], options: dict, out: Path, steps: int, arm: str = ARM) -> list[str]:
    """The recipe command line of one path's steps: the shared arguments, the path's settings (which win), and this
    bench's fixed fields (no checkpoints, the arm, --steps steps)."""
    return [*rest, *(a for k, v in options.items() for a in (f"--{k}", cli(v))), "--results_dir", str(out),
            "--experiment", "side-by-side", "--save_strategy", "no", "--save_minutes", "0", "--arm", arm,
            "--max_steps", str(steps)]


def small_argv(out: Path) -> list[str]:
    """--small: bench/step.py's tiny config around tests/tiny.py's random model."""
    from step import SMALL_CONFIG
    from tiny import save_tiny_model

    config = out / "tiny.yaml"
    config.write_text(SMALL_CONFIG.format(model=save_tiny_model(out / "tiny-model")))
    return ["--config", str(config)]


# ---------------------------------------------------------------------------- what the selection did, per step
def selection_log(log_history: list[dict]) -> dict:
    """The training steps' selection and vLLM importance-sampling metrics (LOGGED_PREFIXES) from a trainer's
    log_history: {"step": [...], name: [value per step, None where that step did not log it]}. Eval rows (eval_...)
    and the final summary row carry none of these names and are left out."""
    rows = [row for row in log_history if any(k.startswith(LOGGED_PREFIXES) for k in row)]
    names = sorted({k for row in rows for k in row if k.startswith(LOGGED_PREFIXES)})
    return {"step": [row.get("step") for row in rows], **{n: [row.get(n) for row in rows] for n in names}}


class SelectionProbe:
    """Records, for every generation batch the trainer ranks (batch scope, one process), what went into its ranking:
    the valid and kept token counts, and omega as ranked against advantage x TRL's importance-sampling weight
    recomputed here from the batch, and whether the weight changed the kept set. The trainer does not log omega;
    this wraps two of its methods (their inputs and outputs only: the numbers trained on are the trainer's)."""

    def __init__(self, trainer):
        self.trainer, self.batches, self._seen = trainer, [], {}
        select_across, select_batch = trainer._select_across_processes, trainer._select_generation_batch

        def across(entropy, omega, mask, *args, **kwargs):
            keep, kept_global = select_across(entropy, omega, mask, *args, **kwargs)
            self._seen = {"entropy": entropy.detach(), "omega": omega.detach(), "mask": mask.bool(), "keep": keep}
            return keep, kept_global

        def batch(output, *args, **kwargs):
            self._seen = {}
            select_batch(output, *args, **kwargs)
            if self._seen:
                self.batches.append(self.inspect(output, **self._seen))

        trainer._select_across_processes, trainer._select_generation_batch = across, batch

    def inspect(self, output: dict, entropy, omega, mask, keep) -> dict:
        import torch

        from selection import RULES, kept_count

        t, args = self.trainer, self.trainer.args
        valid = mask
        n_valid, n_kept = int(valid.sum()), int((keep.bool() & valid).sum())
        rule, ratio = args.token_selection, args.selection_ratio
        row = {"step": t.state.global_step + 1, "valid_tokens": n_valid, "kept_tokens": n_kept,
               "expected_kept_tokens": kept_count(n_valid, ratio) if args.selection_scope == "batch" else None}
        w = output.get("importance_sampling_ratio")
        if w is None:
            row["omega"] = "no importance_sampling_ratio in the batch (TRL's vLLM correction off or vLLM not used)"
            return row
        if t.beta != 0.0 or args.delta is not None or t.accelerator.num_processes > 1:
            row["omega"] = "not recomputed: beta != 0, delta or several processes (omega has more terms)"
            return row
        adv = output["advantages"].float().reshape(-1, 1)
        wide = w.float().expand_as(omega)
        by_hand, without = adv * wide, adv.expand_as(omega)
        scale = by_hand[valid].abs().max().clamp(min=1e-30) if n_valid else torch.tensor(1.0)
        row.update(
            weight_finite=bool(torch.isfinite(wide[valid]).all()),
            weight_not_one_tokens=int((valid & (wide != 1) & (adv != 0)).sum()),  # tokens where the weight can matter
            omega_max_relative_error=float(((omega.float() - by_hand).abs()[valid].max() / scale) if n_valid else 0.0),
            omega_max_relative_error_without_weight=float(
                ((omega.float() - without).abs()[valid].max() / scale) if n_valid else 0.0))
        if RULES[rule].score is not None and args.selection_scope == "batch":
            mine = RULES[rule].select(entropy, by_hand, valid, ratio)
            unweighted = RULES[rule].select(entropy, without, valid, ratio)
            row.update(kept_set_matches_recomputed=bool(torch.equal(mine, keep.bool() & valid)),
                       kept_tokens_changed_by_weight=int((mine != unweighted).sum()) // 2)
        return row


def selection_record(trainer, probe: SelectionProbe) -> dict:
    """What a path's record keeps of the selection after training: the rule, ratio and scope the trainer used, the
    logged metrics per step (selection_log) and the probe's rows."""
    args = trainer.args
    return {"token_selection": args.token_selection, "selection_ratio": args.selection_ratio,
            "selection_scope": args.selection_scope, "selection": selection_log(trainer.state.log_history),
            "selection_probe": probe.batches}


def importance_sampling_settings(args) -> dict:
    """TRL's vLLM importance-sampling settings of a trainer's config."""
    return {k: getattr(args, k) for k in ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                                          "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max")}


def _finite(values: list) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def selection_check(record: dict, path: str, arm: str) -> dict:
    """What a path's steps show about the selection, computed from its record (selection: the logged metrics,
    selection_probe: SelectionProbe's rows): each claim "ok", "failed: why" or "not verified: why"; ok is True when
    nothing failed. Old records without these keys: every claim not verified."""
    from gmts_recipe.arms import ARMS
    from selection import kept_count

    rule = ARMS[arm].rule if arm in ARMS else None
    logged, probe = record.get("selection") or {}, record.get("selection_probe") or []
    ratio, scope = record.get("selection_ratio"), record.get("selection_scope")
    claims: dict[str, str] = {}
    kept, valid = logged.get("selection/kept_tokens"), logged.get("selection/valid_tokens")
    claim = "kept_tokens = ceil(ratio x valid tokens) every step (logged)"
    if record.get("status") != "ok":
        return {"ok": None, "claims": {"all": f"not verified: the path did not run ({record.get('status')})"}}
    if not kept or not valid or ratio is None:
        claims[claim] = "not verified: the trainer logged no token counts (a trainer from before kept_tokens)"
    elif scope != "batch":
        claims[claim] = f"not verified: selection_scope {scope} (per group or per microbatch: logged counts averaged)"
    elif any(k is None or v is None or k != int(k) or v != int(v) for k, v in zip(kept, valid)) or any(
            [r["step"] for r in probe].count(step) > 1 for step in logged["step"]):
        claims[claim] = "not verified: a step made several selections, whose logged counts are averaged"
    else:
        want = [kept_count(int(v), 1.0 if rule == "all" else ratio) for v in valid]
        bad = [f"step {s}: {int(k)} of {int(v)}, want {w}" for s, k, v, w in zip(logged["step"], kept, valid, want)
               if int(k) != w]
        claims[claim] = f"failed: {'; '.join(bad)}" if bad else f"ok ({len(want)} steps)"
        fractions = logged.get("selection/kept_fraction") or []
        off = [s for s, f, k, v in zip(logged["step"], fractions, kept, valid) if f is None or
               abs(f - k / v) > 1e-6]
        claims["kept_fraction = kept_tokens / valid_tokens (logged)"] = (
            f"failed: steps {off}" if off else f"ok ({len(fractions)} steps)")
    if probe and ratio is not None and scope == "batch":
        bad = [f"step {r['step']}: {r['kept_tokens']} of {r['valid_tokens']}" for r in probe
               if r["kept_tokens"] != kept_count(r["valid_tokens"], 1.0 if rule == "all" else ratio)]
        claims["kept set size = ceil(ratio x valid tokens) every generation batch (recomputed)"] = (
            f"failed: {'; '.join(bad)}" if bad else f"ok ({len(probe)} batches)")
    is_claim = "TRL's importance-sampling weight logged every step and finite"
    if path == "vllm":
        present = [n for n in IS_METRICS if n in logged]
        values = [v for n in present for v in logged[n]]
        if not record.get("vllm", {}).get("importance_sampling", {}).get("vllm_importance_sampling_correction"):
            claims[is_claim] = "not verified: vllm_importance_sampling_correction is off"
        elif len(present) < len(IS_METRICS) or not logged.get("step"):
            claims[is_claim] = f"failed: logged {present or 'none'} of {list(IS_METRICS)}"
        else:
            claims[is_claim] = ("ok" if _finite(values) else "failed: a value is missing or not finite") + \
                f" (weight min {min(logged[IS_METRICS[0]], default=float('nan')):.4g}, " \
                f"max {max(logged[IS_METRICS[2]], default=float('nan')):.4g} over {len(logged['step'])} steps)"
        omega_claim = "omega as ranked = advantage x TRL's weight on every valid token (recomputed, not logged)"
        reasons = {r["omega"] for r in probe if "omega" in r}
        if not probe:
            claims[omega_claim] = "not verified: no batch-scope selection was probed (the trainer logs no omega)"
        elif reasons:
            claims[omega_claim] = f"not verified: {'; '.join(sorted(reasons))}"
        else:
            err = max(r["omega_max_relative_error"] for r in probe)
            moved = sum(r["weight_not_one_tokens"] for r in probe)
            if not all(r["weight_finite"] for r in probe):
                claims[omega_claim] = "failed: a weight on a valid token is not finite"
            elif err > OMEGA_TOLERANCE:
                claims[omega_claim] = f"failed: max relative difference {err:.3g}"
            elif moved == 0:
                claims[omega_claim] = ("not verified: the weight was 1 on every token with a nonzero advantage, "
                                       "so omega with and without it are the same")
            else:
                claims[omega_claim] = f"ok (max relative difference {err:.2g}; {moved} tokens with weight != 1)"
            if all("kept_set_matches_recomputed" in r for r in probe):
                same = all(r["kept_set_matches_recomputed"] for r in probe)
                changed = sum(r["kept_tokens_changed_by_weight"] for r in probe)
                claims["kept set = top of the arm's score with that omega (recomputed)"] = (
                    f"ok ({changed} kept tokens differ from a ranking without the weight)" if same else "failed")
    not_verified = ("that omega is the loss's gradient coefficient (tests/test_vllm_selection.py checks it by autograd "
                    "on the CPU); vLLM's own log-probs (TRL's weight is taken as TRL computes it)")
    return {"ok": not any(v.startswith("failed") for v in claims.values()), "claims": claims,
            "not_checked_here": not_verified}


# ---------------------------------------------------------------------------- one path, in its own process
def measure_steps(path: str, argv: list[str]) -> dict:
    """Train --max_steps steps of the arm as recipe.py would, timing each; the path's record."""
    import torch
    from transformers import TrainerCallback

    import recipe

    if path == "vllm" and importlib.util.find_spec("vllm") is None:
        return {"status": "unavailable", "reason": "vllm is not installed (import vllm: no module named 'vllm')"}
    recipe_args, train_args, model_args, name = recipe.parse(argv)
    recipe.deterministic_kernels(train_args)  # as recipe.py does, before any CUDA work of the run
    cuda = torch.cuda.is_available() and not train_args.use_cpu
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.backends.cuda.enable_cudnn_sdp(recipe_args.cudnn_attention)  # as recipe._run_experiment does
    t0 = time.perf_counter()
    train_tasks, _, _ = recipe.load_tasks(recipe_args)
    arm = recipe.trained_arms(recipe_args.arm)[0]
    trainer, args_used = recipe.Run(recipe_args, train_args, model_args, name).build_trainer(arm, train_tasks)
    setup_s = time.perf_counter() - t0
    probe = SelectionProbe(trainer)

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
              "rewards": [row["reward"] for row in trainer.state.log_history if "reward" in row],
              "arm": arm, **selection_record(trainer, probe)}
    if cuda:
        free, total = torch.cuda.mem_get_info()
        record["gpu_memory_gib"] = {"torch_peak_allocated": torch.cuda.max_memory_allocated() / 2**30,
                                    "used_at_end": (total - free) / 2**30}
    if path == "vllm":
        import vllm

        record["vllm"] = {"version": vllm.__version__, "importance_sampling": importance_sampling_settings(args_used)}
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


def entries(result: dict) -> dict[str, dict]:
    """A file's entries keyed "path:arm", each with its path and arm. Files from before --arm keyed them by path
    alone, every one of the file-wide arm."""
    out = {}
    for key, entry in result.get("paths", {}).items():
        path, _, arm = key.partition(":")
        arm = entry.get("arm") or arm or result.get("arm", ARM)
        out[f"{path}:{arm}"] = {**entry, "path": path, "arm": arm}
    return out


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
    result["paths"] = entries(result)  # an older file's layout: one entry per path, all of its file-wide arm
    result.pop("arm", None)  # each entry says its own
    result.update({"versions": recipe.versions(), "recipe_argv": rest,
                   "reference": REFERENCE, "small": args.small, "vllm_gpu_memory_utilization": args.vllm_memory})
    for path in args.paths:
        options = path_options(path, args.vllm_memory)
        progress(f"{PATHS[path]}: {' '.join(f'--{k} {cli(v)}' for k, v in options.items())}")
        record_file = work / f"steps-{path}-{args.arm}.json"
        record_file.unlink(missing_ok=True)
        argv = recipe_argv(rest, options, work / f"steps-{path}-{args.arm}", args.steps, args.arm)
        env = env_overrides(path)
        if env:
            progress(f"{PATHS[path]}: flashinfer is not installed: " + " ".join(f"{k}={v}" for k, v in env.items())
                     + " (vLLM's top-k/top-p sampler in PyTorch)")
        entry = {"label": PATHS[path], "path": path, "arm": args.arm, "options": options, "max_steps": args.steps,
                 "env": env,
                 "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "steps": child([sys.executable, str(Path(__file__).resolve()), "--one", path, "--record",
                                 str(record_file), "--", *argv], record_file, env)}
        entry["selection_check"] = selection_check(entry["steps"], path, args.arm)
        if args.complete:
            progress(f"{PATHS[path]}: a complete run (bench/complete_run.py)")
            entry["complete_run"] = complete_run(path, rest, options, work, env)
        result["paths"][f"{path}:{args.arm}"] = entry
        out.write_text(json.dumps(result, indent=1, default=str) + "\n")  # after each path: a cut run keeps its part
        s = entry["steps"]
        progress(f"{PATHS[path]}, {args.arm}: " + (
            f"median step {s['median_step_s']:.3f} s" if s["status"] == "ok" and s["median_step_s"] is not None
            else f"{s['status']}: {s.get('reason', '')}"))
        for claim, verdict in entry["selection_check"]["claims"].items():
            progress(f"{PATHS[path]}, {args.arm}: {claim}: {verdict}")
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


def _short(path: str) -> str:
    return PATHS[path].split(" ", 1)[0]


def _check_cell(entry: dict) -> str:
    """failed (any claim), ok (every claim), else how many of the claims were verified."""
    check = entry.get("selection_check")
    if not check or check.get("ok") is None:
        return "-"
    verdicts = list(check["claims"].values())
    verified = sum(v.startswith("ok") for v in verdicts)
    if not check["ok"]:
        return "failed"
    return "ok" if verified == len(verdicts) else f"{verified} of {len(verdicts)} verified"


def _evaluation_minutes(complete: dict) -> float | None:
    """The minutes a complete run spent in its full-test evaluations (3 base, one per arm), from its summary."""
    evals = complete.get("evaluations")
    return sum(e["seconds"] for e in evals) / 60 if evals else None


def _complete_notes(paths: dict, keys: list[str], ref: str) -> list[str]:
    """Below the table: how each complete run evaluated, and for a path with steps but no complete run, what its
    training steps alone take at its median step (an estimate, said to be one: the run itself was not timed)."""
    notes = []
    for key in keys:
        entry, c = paths[key], paths[key].get("complete_run")
        if c and c.get("status") == "ok":
            o = c.get("generation_options", {})
            notes.append(f"{PATHS[entry['path']]}: evaluations decoded with grouped attention "
                         f"{_on(o.get('generation_grouped_attention'))}, decode loop "
                         f"{o.get('generation_decode_loop', '-')}, compile cache "
                         f"{'warm' if c.get('compile_cache', {}).get('warm') else 'cold'}.")
    for key in keys:
        entry, s = paths[key], paths[key]["steps"]
        ref_c = paths.get(f"{ref}:{entry['arm']}", {}).get("complete_run") or {}
        steps = sum((ref_c.get("training_steps") or {}).values())
        if entry.get("complete_run") is None and s["status"] == "ok" and s.get("median_step_s") and steps:
            notes.append(f"{PATHS[entry['path']]}: no complete run timed; an estimate, not a measurement: at its "
                         f"median step the {steps} training steps of one take {steps * s['median_step_s'] / 60:.1f} "
                         f"min before any evaluation.")
    return notes


def _on(value) -> str:
    return "-" if value is None else ("on" if value else "off")


def markdown(result: dict) -> str:
    """One row per path and arm, (a), (b), (c): median step, first step, setup, the steps it timed, the selection
    check, and with --complete the run's GPU minutes; each with its ratio to (c) of the same arm. A path that did not
    run says why; below, each checked entry's claims."""
    paths, ref = entries(result), result.get("reference", REFERENCE)
    keys = [f"{p}:{a}" for p in PATHS for a in (*ARM_ORDER, *sorted({e["arm"] for e in paths.values()} -
                                                                       set(ARM_ORDER))) if f"{p}:{a}" in paths]
    complete = any("complete_run" in p for p in paths.values())
    header = ("| path | arm | median step (s) | vs (c) | first step (s) | setup (s) | steps timed | "
              "rewards (mean of the steps) | selection check |")
    if complete:
        header += " complete run (GPU-min) | vs (c) | of which evaluations (min) |"
    lines = [header, "|---" * header.count(" | ") + "|---|"]
    for key in keys:
        entry = paths[key]
        label, arm, s = PATHS[entry["path"]], entry["arm"], entry["steps"]
        ref_entry = paths.get(f"{ref}:{arm}", {})
        ref_steps = ref_entry.get("steps", {})
        if s["status"] != "ok":
            row = f"| {label} | {arm} | {s['status']}: {s.get('reason', '')} | | | | | | {_check_cell(entry)} |"
        else:
            med, first, rewards = s["median_step_s"], s["first_step_s"], s.get("rewards") or []
            row = (f"| {label} | {arm} | {_number(med, '.2f')} | {_ratio(med, ref_steps.get('median_step_s'))} | "
                   f"{_number(first, '.1f')} | {s['setup_s']:.1f} | {_number(_timed(entry), 'd')} | "
                   f"{_number(sum(rewards) / len(rewards) if rewards else None, '.2f')} | {_check_cell(entry)} |")
        if complete:
            c, ref_complete = entry.get("complete_run"), ref_entry.get("complete_run", {})
            if c is None:
                row += " not run | - | - |"
            elif c["status"] != "ok":
                row += f" {c['status']}: {c.get('reason', '')} | - | - |"
            else:
                ref_min = ref_complete.get("gpu_minutes") if ref_complete.get("status") == "ok" else None
                row += (f" {c['gpu_minutes']:.2f} | {_ratio(c['gpu_minutes'], ref_min)} | "
                        f"{_number(_evaluation_minutes(c), '.2f')} |")
        lines.append(row)
    v = result.get("versions", {})
    any_ok = next((p["steps"] for p in paths.values() if p["steps"]["status"] == "ok"), {})
    arms = ", ".join(dict.fromkeys(paths[k]["arm"] for k in keys)) or "-"
    lines += ["", f"{v.get('gpu') or 'CPU'}; torch {v.get('torch')}, transformers {v.get('transformers')}, trl "
              f"{v.get('trl')}; arm {arms}, {any_ok.get('rows', '-')} rollouts x <= "
              f"{any_ok.get('max_completion_length', '-')} tokens per step; per path the median over the steps it "
              f"timed but the first (which compiles); one process per path; vLLM's share of the GPU "
              f"{result.get('vllm_gpu_memory_utilization')}."]
    for arm in dict.fromkeys(paths[k]["arm"] for k in keys):
        ref_steps = paths.get(f"{ref}:{arm}", {}).get("steps", {})
        ref_median = ref_steps.get("median_step_s") if ref_steps.get("status") == "ok" else None
        faster = [f"{_ratio(paths[k]['steps']['median_step_s'], ref_median)} as fast as {_short(paths[k]['path'])}"
                  for k in keys if paths[k]["arm"] == arm and paths[k]["path"] != ref
                  and paths[k]["steps"]["status"] == "ok" and paths[k]["steps"].get("median_step_s") and ref_median]
        if faster:
            lines.append(f"Per step, {PATHS[ref].split(' ', 1)[0]} is {' and '.join(faster)}"
                         + (f" ({arm})." if len(arms.split(", ")) > 1 else "."))
    if complete:
        lines += _complete_notes(paths, keys, ref)
    env = {_short(p["path"]): p["env"] for p in paths.values() if p.get("env")}
    if env:
        lines.append("Set for a path's process: " + "; ".join(
            f"{k} {' '.join(f'{n}={x}' for n, x in e.items())}" for k, e in env.items()) + ".")
    for key in keys:
        check = paths[key].get("selection_check") or {}
        if check.get("ok") is not None:
            lines.append(f"Selection, {_short(paths[key]['path'])} {paths[key]['arm']}: " + "; ".join(
                f"{claim}: {verdict}" for claim, verdict in check["claims"].items()) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the results file (bench/side-by-side-h200.json); paths not run keep their entries")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma list of {', '.join(PATHS)} (default: all)")
    ap.add_argument("--arm", default=ARM, choices=ARM_ORDER,
                    help=f"the arm each path trains (default {ARM}); each path and arm has its own entry")
    ap.add_argument("--steps", type=int, default=5, help="training steps per path (the first compiles; default 5)")
    ap.add_argument("--complete", action="store_true", help="also a complete run per path (bench/complete_run.py)")
    ap.add_argument("--vllm_memory", type=float,
                    help=f"vllm_gpu_memory_utilization for path vllm (default: {VLLM_MEMORY_BYTES / 2**30:.0f} GiB "
                    f"of the card, at least {VLLM_MEMORY})")
    ap.add_argument("--small", action="store_true", help="the tiny random model and config (CPU, seconds)")
    ap.add_argument("--work", help="folder for the runs (default: a new temporary folder)")
    ap.add_argument("--markdown", metavar="RESULTS", type=json_file,
                    help="print a results file as the README's table (nothing runs)")
    ap.add_argument("--one", choices=list(PATHS), help=argparse.SUPPRESS)  # the child process of one path
    ap.add_argument("--record", help=argparse.SUPPRESS)
    args = ap.parse_args(ours)
    if args.one:
        return run_one(args.one, Path(args.record), rest)
    if args.markdown:  # read as JSON already by its argparse type: a missing or broken file is argparse's error
        print(fill_lines(markdown(json.loads(Path(args.markdown).read_text()))))
        return 0
    if not args.out:
        ap.error("--out is required (or --markdown FILE)")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown or not args.paths:
        ap.error(f"--paths: {', '.join(unknown) or 'empty'}: not among {', '.join(PATHS)}")
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.vllm_memory is not None and not 0 < args.vllm_memory <= 1:
        ap.error(f"--vllm_memory must be a share of the GPU in (0, 1], not {args.vllm_memory}")
    if args.vllm_memory is None:
        args.vllm_memory = vllm_share() if "vllm" in args.paths else VLLM_MEMORY
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
