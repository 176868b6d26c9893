"""One real training step and one real evaluation batch, broken down: where the time goes.

    python bench/step.py --config configs/qwen.yaml --gsm8k_path /root/m/gsm8k --steps 4 --out OUT   # one GPU
    python bench/step.py --small --out /tmp/step-small          # CPU: tiny random model, tiny shapes, seconds
    python bench/step.py --compare OFF/step-profile.json ON/step-profile.json   # a lever off then on, as a table
    python bench/step.py --decode_table bench/decode-loop-64-h200.json   # one decoding option off and on, a table
    python bench/step.py --task_table results/offline-task-tuning.json   # the offline task's tuning, a table

Every argument besides this script's own (--out, --steps, --arm, --small, --eval_first, --profile_tokens,
--host_profile, --skip_guard_eval) is a recipe.py override,
parsed by recipe.parse; the trainer is recipe.Run.build_trainer's, the data recipe.load_tasks', so what runs is what
`python recipe.py --arm gmts ...` trains, minus checkpoints (save_strategy no) and with max_steps = --steps + 1.

1. Training: --steps steps; the first (compilation) is reported apart, the median over the others is the step time.
   Each step is cut into parts, CUDA-synchronized at every boundary (the syncs cost a little, and remove whatever
   overlap of host and GPU work the unsynchronized step has): dataloader, generation (TRL's _generate_single_turn),
   reward (_calculate_rewards), the rest of _generate_and_score_completions (advantages, selection, any scoring pass),
   forward (compute_loss, per microbatch), backward, gradient clipping, optimizer step, log/save, and host/other =
   total - parts, so the parts of every step sum to its total.
2. One more step runs under torch.profiler from the end of its generation to its end (a whole decode of 64 x 256
   tokens is ~300k kernel events: too slow to capture and parse); generation is profiled apart, through the same
   _generate_single_turn with the last step's prompts, at two lengths (--profile_tokens): the difference gives GPU busy
   time, kernels and wall per token step free of the prefill, which the intercept holds, and the kernels of one token
   step by name (the census: each name's count and busy time, long minus short), which says what to fuse.
3. Evaluation: eval.generate_samples (fast, the recipe's sampler and eval_batch_size) on the prompts of the full test's
   first batch (its longest prompts: the same padded length and static-cache size), called twice (the first compiles),
   then profiled at the two lengths with the full call's cache length (so nothing recompiles). torch._dynamo counters
   around each call say whether decoding ran compiled, recompiled or broke its graph, and the profiles count CUDA graph
   launches per token step. Default: the trainer's model after training (an arm's evaluation); --eval_first: a freshly
   loaded base model before training (the recipe's order: base evaluations first, so the training's compiled decoder
   meets the evaluation's shapes first).
4. --host_profile (off by default): the training generation at the same two lengths once more, under cProfile alone
   (never inside the torch profiler): per token step, the Python functions' calls and own and cumulative time
   (transformers' _sample loop, its compiled call, the logits processors, ...). cProfile inflates every Python call:
   its times are shares of the cProfile wall, reported beside them.
5. --skip_guard_eval (off by default; a bench-only A/B, no trainer option): the generation calls after the first
   (compiling) step run under torch.compiler.set_stance("default", skip_guard_eval_unsafe=True), to measure whether
   torch._dynamo's guard evaluation is part of the host time per token step. Unsafe if a new shape arrives after the
   warmup, so a call enters it only with rows and a static cache that a guarded call compiled.
6. --step_graph whole_step (default cudagraph_trees; bench only): the compiled decode step recorded into one
   torch.cuda.CUDAGraph per decode buffers and replayed with no Python between token steps (decode_loop.STEP_GRAPH),
   against torch.compile's cudagraph trees, which check every input before each replay: the same kernels, so the
   same tokens are expected (`--compare`'s last column shows whether each step's mean completion length is kept).
   The training generation only: the evaluation's sampler is not the counter one, so it keeps cudagraph trees.
Writes OUT/step-profile.json and OUT/step-profile.txt, and prints a progress line per phase.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import re
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]
from gmts_recipe.records import read_json  # noqa: E402
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose
from tables import markdown_row, markdown_table  # noqa: E402 - bench/tables.py, beside this script

PARTS = ("dataloader", "generation", "reward", "scoring_rest", "forward", "backward", "grad_clip", "optimizer",
         "log_save", "host_other")
SUM_TOLERANCE_S = 1e-6  # parts of a step sum to its total up to float rounding: host_other is the remainder
PHASE = "phase::"  # prefix of the profiler ranges that mark the parts
# work in a profile outside every part's range: in the profiled step, the rest of _generate_and_score_completions
# (its range opened before the profiler started), TRL's shuffle and split of the batch, and host work between parts
UNMARKED = "unmarked (scoring_rest, shuffle/split, between parts)"
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::linear",
              "aten::matmul", "aten::_efficient_attention_forward", "aten::_flash_attention_forward",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_cudnn_attention", "aten::scaled_dot_product_attention")
# host-side CUDA runtime calls counted in every profile: one cudaGraphLaunch and few kernel launches per token step
# means decoding replays a CUDA graph; hundreds of launches per token step mean it runs eagerly
RUNTIME_CALLS = ("cudaGraphLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                 "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMalloc", "cudaFree")
SMALL_CONFIG = """# bench/step.py --small: the tiny random model (tests/tiny.py), every stage of configs/qwen.yaml, tiny shapes
model_name_or_path: {model}
use_peft: true
lora_r: 4
lora_alpha: 8
lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
task: arithmetic
difficulty: 0
n_train: 16
n_heldout: 6
system_prompt: Solve
eval_samples: 2
eval_max_new_tokens: 8
eval_batch_size: 8
num_generations: 4
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
max_completion_length: 8
learning_rate: 1.0e-3
beta: 0.0
loss_type: dapo
selection_scope: batch
gradient_checkpointing: true
generation_merge_adapter: true
use_cpu: true
logging_steps: 1
report_to: none
"""


def sync(device: torch.device) -> None:
    """CUDA-synchronize (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def progress(message: str) -> None:
    print(f"[step.py {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------- timing the real step
class StepClock:
    """Wall time of the parts of each training step, CUDA-synchronized at both ends of every part. Trainer methods
    are wrapped by instance attribute; each part also opens a profiler range `phase::<part>` so a profiled step can
    be cut the same way."""

    def __init__(self, device: torch.device):
        self.device = device
        self.steps: list[dict] = []
        self.open: dict | None = None
        self.last_prompts = None
        self.profile_step: int | None = None  # 1-based index of the step profiled from the end of its generation
        self.profiler = None
        self.counters_after_first_step: dict | None = None  # torch._dynamo counters: recompiles after step 1?

    def timed(self, part: str, fn, after=None):
        def wrapper(*args, **kwargs):
            sync(self.device)
            t0 = time.perf_counter()
            with torch.profiler.record_function(PHASE + part):
                out = fn(*args, **kwargs)
                sync(self.device)
            if self.open is not None:
                self.open.setdefault(part, []).append(time.perf_counter() - t0)
            if after is not None:
                after(args, out)
            return out
        return wrapper

    def instrument(self, trainer) -> None:
        def begin(fn):  # get_batch_samples opens each optimizer step
            def wrapper(*args, **kwargs):
                sync(self.device)
                self.open = {"t0": time.perf_counter()}
                return self.timed("dataloader", fn)(*args, **kwargs)
            return wrapper

        def generated(args, out):
            prompt_ids, completion_ids = args[0], out[0]
            self.last_prompts = (prompt_ids, args[3] if len(args) > 3 else trainer.num_generations)
            if self.open is not None:
                self.open["generation_info"] = {
                    "rows": len(completion_ids), "prompt_tokens_max": max(len(p) for p in prompt_ids),
                    "prompt_tokens_mean": statistics.mean(len(p) for p in prompt_ids),
                    "decode_steps": max(len(c) for c in completion_ids),
                    "completion_tokens_mean": statistics.mean(len(c) for c in completion_ids)}
                if len(self.steps) + 1 == self.profile_step:  # profile the rest of this step
                    self.profiler = torch.profiler.profile(activities=activities(self.device), record_shapes=True)
                    self.profiler.__enter__()

        def end(fn):
            def wrapper(*args, **kwargs):
                out = self.timed("log_save", fn)(*args, **kwargs)
                if self.open is not None:  # the epoch-end call after the loop has no open step
                    step, self.open = self.open, None
                    step["total_s"] = time.perf_counter() - step.pop("t0")
                    if self.profiler is not None:
                        self.profiler.__exit__(None, None, None)
                        step["profiler"], step["profiled"], self.profiler = self.profiler, True, None
                    self.steps.append(step)
                    if len(self.steps) == 1:
                        self.counters_after_first_step = dynamo_counters()
                    progress(f"training step {len(self.steps)} took {step['total_s']:.2f} s"
                             + (" (profiled from the end of its generation)" if step.get("profiled") else ""))
                return out
            return wrapper

        trainer.get_batch_samples = begin(trainer.get_batch_samples)
        trainer._generate_single_turn = self.timed("generation", trainer._generate_single_turn, after=generated)
        trainer._calculate_rewards = self.timed("reward", trainer._calculate_rewards)
        trainer._generate_and_score_completions = self.timed("generate_and_score",
                                                             trainer._generate_and_score_completions)
        trainer.compute_loss = self.timed("forward", trainer.compute_loss)
        trainer.accelerator.backward = self.timed("backward", trainer.accelerator.backward)
        trainer._clip_grad_norm = self.timed("grad_clip", trainer._clip_grad_norm)
        trainer._maybe_log_save_evaluate = end(trainer._maybe_log_save_evaluate)
        trainer.add_callback(OptimizerClock(self))  # last of the callbacks: UpdateCosine's work stays in host_other


def skip_guard_eval_after_first_step(trainer, clock: StepClock) -> dict:
    """--skip_guard_eval (a bench-only A/B, not a trainer option): every generation call after the first (compiling)
    step runs under torch.compiler.set_stance("default", skip_guard_eval_unsafe=True), which skips torch._dynamo's
    guards but those that already told two compiled entries apart. Unsafe when a shape arrives that has not compiled:
    the wrong graph would run silently. So a call enters the stance only with the rows and no more static cache than
    the calls that ran with guards compiled (transformers keeps the largest cache it made: see compile_cache_length);
    any other runs with guards and its shape counts as compiled from then on. Returns the record it fills."""
    record = {"calls_with_guards": 0, "calls_in_stance": 0, "calls_with_a_new_shape": 0, "compiled": {}}
    generate = trainer._generate_single_turn

    def wrapper(prompt_ids, *args, **kwargs):
        rows, cache = len(prompt_ids), static_cache_length(trainer, prompt_ids) or 0
        compiled = record["compiled"]  # rows -> the largest static cache the guarded calls compiled
        if clock.steps and cache <= compiled.get(rows, -1):
            record["calls_in_stance"] += 1
            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                return generate(prompt_ids, *args, **kwargs)
        record["calls_with_guards"] += 1
        if clock.steps:  # after the first step: a shape no guarded call had compiled
            record["calls_with_a_new_shape"] += 1
        compiled[rows] = max(cache, compiled.get(rows, -1))
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = wrapper
    return record


class OptimizerClock(TrainerCallback):
    """optimizer.step between Trainer's on_pre_optimizer_step and on_optimizer_step, synchronized."""

    def __init__(self, clock: StepClock):
        self.clock, self.t0, self.range = clock, 0.0, None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        sync(self.clock.device)
        self.range = torch.profiler.record_function(PHASE + "optimizer")
        self.range.__enter__()
        self.t0 = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        sync(self.clock.device)
        self.range.__exit__(None, None, None)
        if self.clock.open is not None:
            self.clock.open.setdefault("optimizer", []).append(time.perf_counter() - self.t0)


def breakdown(step: dict) -> dict:
    """One step's parts in seconds (PARTS; forward and backward summed over microbatches), host_other the remainder."""
    total = lambda name: sum(step.get(name, []))  # noqa: E731
    parts = {"dataloader": total("dataloader"), "generation": total("generation"), "reward": total("reward"),
             "scoring_rest": total("generate_and_score") - total("generation") - total("reward"),
             "forward": total("forward"), "backward": total("backward"), "grad_clip": total("grad_clip"),
             "optimizer": total("optimizer"), "log_save": total("log_save")}
    parts["host_other"] = step["total_s"] - sum(parts.values())
    return {**parts, "total_s": step["total_s"], "forward_per_microbatch_s": step.get("forward", []),
            "backward_per_microbatch_s": step.get("backward", []), "generation_info": step.get("generation_info")}


def summarize_steps(steps: list[dict]) -> dict:
    """First step apart; the median step (by total, the lower one for an even count) among the others, whose parts
    sum to its total, and each part's own median."""
    rows = [breakdown(s) for s in steps if not s.get("profiled")]
    later = rows[1:] or rows
    median_step = sorted(later, key=lambda r: r["total_s"])[(len(later) - 1) // 2]
    info = median_step["generation_info"] or {}
    generation = {**info, "wall_s": median_step["generation"],
                  "ms_per_token_step": 1000 * median_step["generation"] / max(info.get("decode_steps", 1), 1)}
    return {"rows": info.get("rows"), "total_s": median_step["total_s"], "first_step_s": rows[0]["total_s"],
            "steps_in_median": len(later), "median_step": median_step,
            "part_medians_s": {p: statistics.median(r[p] for r in later) for p in PARTS},
            "steps": rows, "generation": generation}


# ---------------------------------------------------------------------------- profiles
def activities(device: torch.device) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    return acts + [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else acts


def device_events(events, on_gpu: bool) -> list:
    """The work items of a profile: CUDA kernels (and memcpy/memset) on a GPU, CPU operators without one; never the
    phase ranges or other user annotations."""
    want = torch.autograd.DeviceType.CUDA if on_gpu else torch.autograd.DeviceType.CPU
    annotations = {e.name for e in events if getattr(e, "is_user_annotation", False)}  # record_function ranges
    return [e for e in events if e.device_type == want and not getattr(e, "is_user_annotation", False)
            and e.name not in annotations and not e.name.startswith(PHASE) and not e.name.startswith("ProfilerStep")]


def busy_us(e, on_gpu: bool) -> float:
    return e.time_range.end - e.time_range.start if on_gpu else e.self_cpu_time_total


def by_phase(events, on_gpu: bool) -> dict:
    """Busy seconds and work items per part: each item goes to the innermost phase range it starts in (every part
    ends with a sync inside its range, so its kernels run inside it)."""
    ranges = sorted(((e.time_range.start, e.time_range.end, e.name[len(PHASE):]) for e in events
                     if e.name.startswith(PHASE) and e.device_type == torch.autograd.DeviceType.CPU),
                    key=lambda r: r[0])
    out: dict[str, dict] = {}
    for e in device_events(events, on_gpu):
        start, phase = e.time_range.start, UNMARKED
        for lo, hi, name in ranges:  # sorted by start: the last range that holds it is the innermost
            if lo <= start <= hi:
                phase = name
        row = out.setdefault(phase, {"busy_s": 0.0, "items": 0})
        row["busy_s"] += busy_us(e, on_gpu) / 1e6
        row["items"] += 1
    return out


def top_items(by_name: dict[str, list], limit: int = 25) -> list[dict]:
    """The work items with the most busy time, by name (`items_by_name`'s table): count, total and mean, with the gemm
    dtype read from the name."""
    rows = sorted(({"name": name[:160], "count": count, "total_ms": ms} for name, (count, ms) in by_name.items()),
                  key=lambda r: -r["total_ms"])[:limit]
    for r in rows:
        r["mean_us"] = 1000 * r["total_ms"] / r["count"]
        r["gemm_dtype"] = gemm_dtype(r["name"])
    return rows


def gemm_dtype(name: str) -> str | None:
    """The dtype a matrix-multiply kernel's name states (cuBLAS/CUTLASS naming), None for a kernel that is not one.
    'triton' where the name cannot tell (an inductor template: see the CPU-side matmul op dtypes)."""
    n = name.lower()
    if not re.search(r"gemm|nvjet|xmma|cutlass|matmul|cublas|triton_tem|_mm_|splitk", n):
        return None
    nvjet = re.match(r"nvjet_([a-z]{3})_", n)
    if nvjet:  # cuBLASLt's nvjet kernels: the first letter is the input type (guess from the naming scheme)
        return {"b": "bf16", "h": "fp16/bf16", "t": "tf32", "s": "fp32", "e": "fp8"}.get(nvjet.group(1)[0],
                                                                                          f"nvjet_{nvjet.group(1)}")
    if "bf16" in n:
        return "bf16"
    for tag, marks in (("fp16", ("fp16", "f16", "h16816", "h1688", "hgemm", "half")),
                       ("tf32", ("tf32", "s1688", "s16816")), ("fp32", ("f32f32", "sgemm", "fp32", "f32_"))):
        if any(m in n for m in marks):
            return tag
    return "triton" if "triton" in n else "unknown"


def matmul_ops(events) -> list[dict]:
    """Matmul and attention operators seen on the CPU side (eager code: the update, the prefill) with their input
    dtypes (record_shapes); a CUDA-graph replay shows no operators, only kernels."""
    table: dict[tuple, dict] = {}
    for e in events:
        if e.name in MATMUL_OPS and e.device_type == torch.autograd.DeviceType.CPU:
            dtypes = tuple(d for d in (getattr(e, "input_dtypes", None) or []) if d)[:3]
            row = table.setdefault((e.name, dtypes), {"op": e.name, "input_dtypes": list(dtypes), "count": 0,
                                                      "device_ms": 0.0, "cpu_ms": 0.0})
            row["count"] += 1
            row["device_ms"] += e.self_device_time_total / 1e3
            row["cpu_ms"] += e.self_cpu_time_total / 1e3
    return sorted(table.values(), key=lambda r: -(r["device_ms"] or r["cpu_ms"]))


def profile_summary(prof, device: torch.device, wall_s: float) -> dict:
    on_gpu = device.type == "cuda"
    events = prof.events()
    items = device_events(events, on_gpu)
    by_name = items_by_name(items, on_gpu)
    runtime = {name: 0 for name in RUNTIME_CALLS}
    for e in events:
        if e.name in runtime:
            runtime[e.name] += 1
    return {"work_items": "CUDA kernels" if on_gpu else "CPU operators (no CUDA here)", "wall_s": wall_s,
            "busy_s": sum(busy_us(e, on_gpu) for e in items) / 1e6, "items": len(items),
            "graph_launches": runtime["cudaGraphLaunch"], "runtime_calls": runtime,
            "by_phase": by_phase(events, on_gpu), "top": top_items(by_name), "matmul_ops": matmul_ops(events),
            "by_name": by_name}


def items_by_name(items, on_gpu: bool) -> dict[str, list]:
    """Every work item's name -> [count, busy ms]: the top items of one profile, and two profiled lengths' tables give
    the kernels of one token step (kernel_census)."""
    table: dict[str, list] = {}
    for e in items:
        row = table.setdefault(e.name, [0, 0.0])
        row[0] += 1
        row[1] += busy_us(e, on_gpu) / 1e3
    return table


def profiled(fn, device: torch.device):
    """(fn's result, profile summary) of one call under the profiler, synchronized."""
    sync(device)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=activities(device), record_shapes=True) as prof:
        out = fn()
        sync(device)
    wall = time.perf_counter() - t0
    return out, profile_summary(prof, device, wall)


def host_profiled(fn, device: torch.device):
    """(fn's result, cProfile's count, own and cumulative seconds of every Python function in one call), synchronized
    like `profiled` and never nested in it: cProfile and the torch profiler each slow what the other measures."""
    profiler = cProfile.Profile()
    sync(device)
    t0 = time.perf_counter()
    profiler.enable()
    try:
        out = fn()
        sync(device)
    finally:
        profiler.disable()
    wall = time.perf_counter() - t0
    functions = {function_name(key): {"calls": calls, "own_s": own, "cumulative_s": cumulative}
                 for key, (_, calls, own, cumulative, _) in pstats.Stats(profiler).stats.items()}
    return out, {"wall_s": wall, "functions": functions}


def function_name(key: tuple[str, int, str]) -> str:
    """cProfile's (file, line, function) as file:line(function), the file relative to site-packages or this
    repository; C functions (file '~') by their own name, e.g. <method 'item' of 'torch._C.TensorBase' objects>."""
    file, line, name = key
    if file == "~":
        return name
    file = file.split("site-packages/", 1)[-1]
    return f"{file.removeprefix(str(ROOT) + '/')}:{line}({name})"


HOST_TOP_OWN, HOST_TOP_CUMULATIVE = 25, 15  # functions reported per token step, by own and by cumulative time
HOST_NOTE = ("cProfile slows every Python call, so its times are inflated: read them as shares of the profiled wall "
             "per token step beside them, not as the milliseconds the loop spends unprofiled. Native work that no "
             "Python frame owns counts as own time of the Python function that called it: torch._dynamo's guard "
             "checks (C++, before a compiled frame starts) show as own time of torch/_dynamo/eval_frame.py's "
             "compile_wrapper, which --skip_guard_eval shrinks.")


def host_per_token_step(points: list[dict]) -> dict:
    """Each Python function's calls, own and cumulative time per token step: the difference of the two profiled
    calls over the decode steps the long one added, as per_token_step does for the profiler's numbers; the top
    HOST_TOP_OWN by own time and HOST_TOP_CUMULATIVE by cumulative time."""
    try:
        a, b, steps = short_long(points)
    except ValueError as err:
        return {"error": str(err)}
    zero = {"calls": 0, "own_s": 0.0, "cumulative_s": 0.0}  # a function only one of the two calls ran

    def slope(name: str, key: str) -> float:
        return (b["functions"].get(name, zero)[key] - a["functions"].get(name, zero)[key]) / steps

    rows = [{"function": name, "calls": slope(name, "calls"), "own_ms": 1000 * slope(name, "own_s"),
             "cumulative_ms": 1000 * slope(name, "cumulative_s")} for name in set(a["functions"]) | set(b["functions"])]
    return {"profiled_wall_ms": 1000 * (b["wall_s"] - a["wall_s"]) / steps,
            "own_ms_all_functions": sum(r["own_ms"] for r in rows), "functions": len(rows),
            "top_own": sorted(rows, key=lambda r: -r["own_ms"])[:HOST_TOP_OWN],
            "top_cumulative": sorted(rows, key=lambda r: -r["cumulative_ms"])[:HOST_TOP_CUMULATIVE]}


# a runtime call per token step is the difference of two runs divided by the extra token steps: calls made at other
# times (the caching allocator freeing in one run and not the other, a one-off sync) make it negative or fractional;
# below one call every two token steps it does not scale with tokens
RUNTIME_NOISE_CALLS = 0.5
RUNTIME_NOISE_NOTE = (f"(a difference of the two runs over the extra token steps; below {RUNTIME_NOISE_CALLS} per "
                      "token step, negative included, a count does not scale with tokens: shown as ~0 with its raw "
                      "value, e.g. the allocator freeing at another time; raw numbers in the JSON)")
POINT_KEYS = ("busy_s", "items", "wall_s", "graph_launches", "runtime_calls", "by_name")  # each profiled length's
CENSUS_MIN_COUNT = 0.5  # a name whose count grows by less per token step is not part of the step (noise, the prefill)


def short_long(points: list[dict]) -> tuple[dict, dict, int]:
    """The short and the long profiled point and the decode steps the long one added (the divisor of every per token
    step number); ValueError, with the reason, when it added none."""
    a, b = points[0], points[-1]
    steps = b["decode_steps"] - a["decode_steps"]
    if steps <= 0:
        raise ValueError(f"decode steps did not grow between the profiled lengths ({a['decode_steps']} -> "
                         f"{b['decode_steps']}): every row stopped early")
    return a, b, steps


def per_token_step(points: list[dict]) -> dict:
    """Slope and intercept of busy time, work items and wall over decode steps between two profiled lengths: the slope
    is the cost of one token step, the intercept the prefill and fixed costs. The CUDA runtime calls per token step
    say where the host still waits: a cudaStreamSynchronize or a device-to-host cudaMemcpyAsync per step is a wait."""
    try:
        a, b, steps = short_long(points)
    except ValueError as err:
        return {"error": str(err)}
    slope = {k: (b[k] - a[k]) / steps for k in ("busy_s", "items", "wall_s", "graph_launches")}
    return {"gpu_busy_ms": 1000 * slope["busy_s"], "items": slope["items"], "profiled_wall_ms": 1000 * slope["wall_s"],
            "graph_launches": slope["graph_launches"],
            "intercept_busy_ms": 1000 * (a["busy_s"] - a["decode_steps"] * slope["busy_s"]),
            "intercept_items": a["items"] - a["decode_steps"] * slope["items"],
            "runtime_calls": {k: (b["runtime_calls"][k] - a["runtime_calls"][k]) / steps
                              for k in a.get("runtime_calls", {})},
            **({"kernels": kernel_census(a["by_name"], b["by_name"], steps)} if "by_name" in a else {})}


def kernel_census(short: dict, long: dict, steps: int) -> list[dict]:
    """The work items of one token step by name: each name's count and busy time in the long profile minus the short
    one, over the decode steps it added, most busy first. Names growing by fewer than CENSUS_MIN_COUNT per step are
    left out (they do not scale with tokens); the counts kept add up to the step's items but for those."""
    rows = []
    for name in long.keys() | short.keys():
        (n_long, ms_long), (n_short, ms_short) = long.get(name, (0, 0.0)), short.get(name, (0, 0.0))
        count = (n_long - n_short) / steps
        if count >= CENSUS_MIN_COUNT:
            rows.append({"name": name, "per_step": count, "us_per_step": 1000 * (ms_long - ms_short) / steps,
                         "gemm_dtype": gemm_dtype(name)})
    return sorted(rows, key=lambda r: (-r["us_per_step"], r["name"]))


def dynamo_counters() -> dict:
    """torch._dynamo's counters (inductor's too: cudagraph skips), and how many guard failures each function had."""
    from torch._dynamo import utils

    snap = {cat: {str(k)[:200]: v for k, v in c.items()} for cat, c in utils.counters.items()}
    failures = getattr(utils, "guard_failures", {})  # absent in some torch versions: then not counted
    snap["guard_failures"] = {str(getattr(code, "co_name", code))[:80]: len(v) for code, v in failures.items()}
    return snap


def guard_failure_reasons(last: int = 3) -> dict:
    """The last reasons torch._dynamo gave for recompiling each function (why a guard failed)."""
    from torch._dynamo import utils

    return {str(getattr(code, "co_name", code))[:80]: [str(reason)[:300] for reason in reasons[-last:]]
            for code, reasons in getattr(utils, "guard_failures", {}).items()}


def counters_delta(before: dict, after: dict) -> dict:
    """What changed in torch._dynamo's counters (unique graphs, graph breaks and their reasons, recompilations,
    cudagraph skips, guard failures): empty when a call ran on compiled code without compiling anything."""
    out = {}
    for cat, values in after.items():
        diff = {k: v - before.get(cat, {}).get(k, 0) for k, v in values.items()
                if isinstance(v, (int, float)) and v != before.get(cat, {}).get(k, 0)}
        if diff:
            out[cat] = diff
    return out


def static_cache_length(trainer, prompt_ids: list[list[int]]) -> int | None:
    """The static KV cache length FastGMTSTrainer._generate_single_turn decodes these prompts with (generation_compile or
    generation_decode_loop="compiled_step"), None where generation has no static cache."""
    from gmts_recipe.generation.fast import compile_cache_length

    args = trainer.args
    if not (args.generation_compile or getattr(args, "generation_decode_loop", None) == "compiled_step"):
        return None
    return compile_cache_length(prompt_ids, trainer.max_completion_length, trainer.pad_to_multiple_of)


@contextlib.contextmanager
def generation_length(trainer, new_tokens: int):
    """TRL's generation_config with fewer new tokens; FastGMTSTrainer sizes the static cache from max_completion_length,
    so the compiled decoder keeps its shapes."""
    saved = trainer.generation_config.max_new_tokens
    trainer.generation_config.max_new_tokens = new_tokens
    try:
        yield
    finally:
        trainer.generation_config.max_new_tokens = saved


@contextlib.contextmanager
def cache_length_of(max_new_tokens: int):
    """eval.generate_samples with fewer new tokens but the static cache of a `max_new_tokens` call (no recompile)."""
    from gmts_recipe.generation import fast

    original = fast.compile_cache_length
    fast.compile_cache_length = lambda prompts, _, pad: original(prompts, max_new_tokens, pad)
    try:
        yield
    finally:
        fast.compile_cache_length = original


# ---------------------------------------------------------------------------- the parts of the run
def generation_at_lengths(trainer, clock: StepClock, device, lengths: list[int], measure, what: str) -> list[dict]:
    """The trainer's own _generate_single_turn on the last step's prompts at each length, one call each, measured by
    `measure` (profiled or host_profiled): per length its new tokens, decode steps and `measure`'s summary."""
    prompt_ids, num_generations = clock.last_prompts
    points = []
    for n in lengths:
        progress(f"training generation: {what} {len(prompt_ids)} rows x {n} new tokens")
        with generation_length(trainer, n):
            (completion_ids, _), summary = measure(
                lambda: trainer._generate_single_turn(prompt_ids, None, {}, num_generations), device)
        points.append({"new_tokens": n, "decode_steps": max(len(c) for c in completion_ids), **summary})
    return points


def training_generation_profile(trainer, clock: StepClock, device, lengths: list[int], host_profile: bool) -> dict:
    """The trainer's own _generate_single_turn (merged LoRA, compiled decoding as configured) on the last step's
    prompts, profiled at each length; without the entropy recorder (~0.1-0.2 ms per token step, bench/README.md).
    With host_profile, two more calls at the same lengths under cProfile alone (host_profiled, host_per_token_step)."""
    profiles = generation_at_lengths(trainer, clock, device, lengths, profiled, "profiling")
    points = [{k: p[k] for k in ("new_tokens", "decode_steps", *POINT_KEYS)} for p in profiles]
    prompt_ids = clock.last_prompts[0]
    cache = static_cache_length(trainer, prompt_ids)
    out = {"rows": len(prompt_ids), "static_cache_len": cache, "points": points,
           "per_token_step": per_token_step(points), "top": profiles[-1]["top"],
           "matmul_ops": profiles[-1]["matmul_ops"]}
    if host_profile:  # the per-function tables stay out of the points: per_token_step keeps the top ones
        hosts = generation_at_lengths(trainer, clock, device, lengths, host_profiled, "cProfile of")
        out["host_profile"] = {"points": [{"new_tokens": h["new_tokens"], "decode_steps": h["decode_steps"],
                                           "wall_s": h["wall_s"], "functions": len(h["functions"])} for h in hosts],
                               "per_token_step": host_per_token_step(hosts), "note": HOST_NOTE}
    return out


def first_batch_prompts(recipe_args, tokenizer, heldout) -> tuple[list, int, list[int]]:
    """The prompts of the full evaluation's first batch (its longest: eval.generate_samples sorts longest first and
    pads each batch to one size), that batch's row count, and every held-out prompt's length in tokens."""
    from gmts_recipe.data import system_prompt, to_prompt

    prompt = system_prompt(recipe_args.system_prompt)
    prompts = [to_prompt(t["question"], prompt) for t in heldout]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]  # as eval tokenizes
    k, total = recipe_args.eval_samples, len(prompts) * recipe_args.eval_samples
    batch_rows = -(-total // -(-total // recipe_args.eval_batch_size))  # eval.generate_samples' even batches
    longest = sorted(range(len(prompts)), key=lambda i: -lengths[i])[: -(-batch_rows // k)]
    return [prompts[i] for i in sorted(longest)], batch_rows, lengths


def evaluation(recipe_args, train_args, model, tok, heldout, device, lengths: list[int]) -> dict:
    """One batch of eval.generate_samples as the recipe calls it (recipe.Run._evaluate's settings)."""
    import eval as evaluation_module
    from recipe import sampling

    from gmts_recipe.generation.fast import compile_cache_length
    from gmts_recipe.speed_options import evaluation_options

    prompts, batch_rows, prompt_lengths = first_batch_prompts(recipe_args, tok, heldout)
    k, new_tokens = recipe_args.eval_samples, recipe_args.eval_max_new_tokens
    decode_steps: list[int] = []
    generate = model.generate

    from gmts_recipe.generation import decode_loop
    sample_with_config = decode_loop.sample_with_config  # what generate_samples calls with decode_loop compiled_step

    def counted_generate(*args, **kwargs):  # the decode steps of each call: output width minus prompt width
        out = generate(*args, **kwargs)
        decode_steps.append(out.size(1) - kwargs["input_ids"].size(1))
        return out

    def counted_sample(model_, input_ids, *args, **kwargs):  # the same for the compiled decode loop
        out = sample_with_config(model_, input_ids, *args, **kwargs)
        decode_steps.append((out[0] if isinstance(out, tuple) else out).size(1) - input_ids.size(1))
        return out

    def call(n):
        return evaluation_module.generate_samples(
            model, tok, prompts, k=k, seed=recipe_args.base_eval_seeds[0], max_new_tokens=n,
            batch_size=recipe_args.eval_batch_size, progress=False, sampling=sampling(recipe_args, train_args),
            fast=recipe_args.eval_fast, options=evaluation_options(train_args))

    static, compiled = evaluation_module.decoding_plan(device.type, recipe_args.eval_fast)
    out = {"model": None, "samples": len(prompts) * k,
           "rows_per_batch": batch_rows, "prompts": len(prompts), "max_new_tokens": new_tokens,
           "batch_size": recipe_args.eval_batch_size, "fast": recipe_args.eval_fast, "static_cache": static,
           "grouped_attention": train_args.generation_grouped_attention,
           "deferred_stop": train_args.generation_deferred_stop, "decode_kernel": train_args.generation_decode_kernel,
           "decode_loop": train_args.generation_decode_loop, "compiled_decoding": compiled,
           "compile_regions": train_args.generation_compile_regions,
           "fused_projections": train_args.generation_fused_projections,
           "full_test_batches": -(-len(heldout) * k // batch_rows),
           "parameter_dtype": str(next(model.parameters()).dtype), "prompt_tokens_max": max(prompt_lengths),
           "prompt_tokens_mean": statistics.mean(prompt_lengths), "dynamo": {},
           # the static KV cache every decode step attends over, whatever the position (eval.generate_samples)
           "static_cache_len": compile_cache_length([[0] * n for n in prompt_lengths], new_tokens, None)
           if static else None}
    model.generate, decode_loop.sample_with_config = counted_generate, counted_sample
    try:
        for name in ("first_call", "second_call"):
            progress(f"evaluation: {name} ({len(prompts)} prompts x {k} samples, {new_tokens} new tokens"
                     f"{', compiles' if name == 'first_call' and compiled else ''})")
            before = dynamo_counters()
            sync(device)
            t0 = time.perf_counter()
            call(new_tokens)
            sync(device)
            out[f"{name}_s"] = time.perf_counter() - t0
            out["dynamo"][name] = counters_delta(before, dynamo_counters())
        out["seconds"] = out["second_call_s"]
        out["decode_steps"] = decode_steps[-1]
        out["ms_per_token_step"] = 1000 * out["seconds"] / max(decode_steps[-1], 1)
        out["full_test_estimate_s"] = out["seconds"] * out["full_test_batches"]
        points, summary = [], None
        before = dynamo_counters()
        for n in lengths:
            progress(f"evaluation: profiling {len(prompts) * k} samples x {n} new tokens")
            with cache_length_of(new_tokens):
                _, summary = profiled(lambda: call(n), device)
            points.append({"new_tokens": n, "decode_steps": decode_steps[-1],
                           **{key: summary[key] for key in POINT_KEYS}})
        out["dynamo"]["profiled_calls"] = counters_delta(before, dynamo_counters())
        out["profile"] = {"points": points, "per_token_step": per_token_step(points), "top": summary["top"],
                          "matmul_ops": summary["matmul_ops"]}
    finally:
        del model.generate  # the class method shows through again
        decode_loop.sample_with_config = sample_with_config
    return out


def dtypes(trainer, train_args) -> dict:
    """Where a float32 matmul could hide: parameter dtypes, the merged weights as generation merges them, the head."""
    from peft.tuners.lora import LoraLayer

    from gmts_recipe.generation.fast import merged_lora

    model = trainer.accelerator.unwrap_model(trainer.model)
    count: dict[str, int] = {}
    for p in model.parameters():
        key = f"{'trainable' if p.requires_grad else 'frozen'} {str(p.dtype).replace('torch.', '')}"
        count[key] = count.get(key, 0) + p.numel()
    lora = next((m for m in model.modules() if isinstance(m, LoraLayer)), None)
    merged = None
    if lora is not None:
        with merged_lora(model):
            merged = str(lora.get_base_layer().weight.dtype)
    head = model.get_output_embeddings()
    return {"first_parameter": str(next(model.parameters()).dtype), "parameters_by_dtype": count,
            "merged_weight_in_generation": merged, "lm_head_weight": str(head.weight.dtype),
            "lm_head_tied": head.weight is model.get_input_embeddings().weight,
            "lora_weight": None if lora is None else str(next(iter(lora.lora_A.values())).weight.dtype),
            "bf16_autocast_in_training": bool(train_args.bf16), "cast_lm_head_to_fp32": train_args.cast_lm_head_to_fp32,
            "generation_logits_note": "transformers' _sample copies each step's (rows, vocab) logits to float32"}


# ---------------------------------------------------------------------------- command line and report
class OneLineParser(argparse.ArgumentParser):
    def error(self, message):  # a user error: one line that names the fix, no usage dump
        raise SystemExit(f"step.py: {message}")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = OneLineParser(description="One real training step and evaluation batch, broken down.",
                                 epilog="Other arguments are recipe.py overrides (--config, --gsm8k_path, any field).")
    ap.add_argument("--out", required=True, help="folder for step-profile.json and step-profile.txt")
    ap.add_argument("--steps", type=int, default=4, help="training steps; the first (compilation) is reported apart")
    ap.add_argument("--arm", default="gmts", help="grpo, ets or gmts (default: the paper's method)")
    ap.add_argument("--small", action="store_true", help="tiny random model on the CPU (tests/tiny.py), seconds")
    ap.add_argument("--eval_first", action="store_true",
                    help="evaluate a freshly loaded base model before training (the recipe's order: base evals "
                         "first); default: the trainer's model after training (an arm's evaluation)")
    ap.add_argument("--profile_tokens", default=None, help="two generation lengths to profile (default 16,40; "
                                                           "--small: 4,8)")
    ap.add_argument("--host_profile", action="store_true",
                    help="also run the two profiled training generations under cProfile (separate calls): the Python "
                         "functions' calls and time per token step (times inflated by cProfile: read them as shares)")
    ap.add_argument("--skip_guard_eval", action="store_true",
                    help="A/B, bench only: generation calls after the first (compiling) step run under "
                         "torch.compiler.set_stance(skip_guard_eval_unsafe=True), whose shapes have compiled")
    ap.add_argument("--step_graph", default="cudagraph_trees", choices=("cudagraph_trees", "whole_step"),
                    help="A/B, bench only: who records the compiled decode step's CUDA graph (decode_loop.STEP_GRAPH): "
                         "torch.compile's cudagraph trees, or one torch.cuda.CUDAGraph of the whole step replayed "
                         "with no Python between token steps (the counter sampler only)")
    args, rest = ap.parse_known_args(argv)
    if args.steps < 2:
        ap.error("--steps must be at least 2: the first step compiles and is reported apart")
    if any(a.split("=")[0] == "--max_steps" for a in rest):
        ap.error("--max_steps is set from --steps (steps + the profiled one); give --steps N instead")
    return args, rest


def recipe_argv(args, rest: list[str], out: Path) -> list[str]:
    """The recipe command line: this run's fixed fields around the user's overrides (which win, but max_steps)."""
    if args.small:
        from tiny import save_tiny_model

        model = save_tiny_model(out / "tiny-model")
        config = out / "tiny.yaml"
        config.write_text(SMALL_CONFIG.format(model=model))
        rest = ["--config", str(config), *rest]
    return [*rest, "--results_dir", str(out / "run"), "--experiment", "step-profile", "--save_strategy", "no",
            "--save_minutes", "0", "--arm", args.arm, "--max_steps", str(args.steps + 1)]


def run(argv: list[str]) -> dict:
    import recipe

    args, rest = parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in (args.profile_tokens or ("4,8" if args.small else "16,40")).split(",")]
    progress("setup: parsing the config and loading the data (recipe.parse, recipe.load_tasks)")
    recipe_args, train_args, model_args, name = recipe.parse(recipe_argv(args, rest, out_dir))
    recipe.deterministic_kernels(train_args)  # as recipe.py does, before any CUDA work of the run
    from gmts_recipe.generation import decode_loop

    decode_loop.STEP_GRAPH = args.step_graph  # the training generation's; the evaluation keeps the default (below)
    arm = recipe.trained_arms(recipe_args.arm)[0]
    device = torch.device("cuda" if torch.cuda.is_available() and not train_args.use_cpu else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(recipe_args.cudnn_attention)  # as recipe._run_experiment does
    train_tasks, heldout, _ = recipe.load_tasks(recipe_args)
    result = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
              "versions": recipe.versions(), "model": model_args.model_name_or_path, "arm": arm, "argv": argv,
              "config_name": name, "order": "eval, then training" if args.eval_first else "training, then eval",
              "sync_note": "every part is CUDA-synchronized at both ends: a small cost per part, and no host/GPU "
                           "overlap",
              "bench_options": {"host_profile": args.host_profile, "skip_guard_eval": args.skip_guard_eval,
                                "step_graph": args.step_graph},
              "dynamo": {"recompile_limit": getattr(torch._dynamo.config, "recompile_limit",
                                                    getattr(torch._dynamo.config, "cache_size_limit", None))}}

    def evaluate(model, tokenizer, which: str) -> None:
        # The evaluation samples with its own sampler, which a whole-step recording refuses (it replays the counter
        # sampler only): it runs with torch.compile's cudagraph trees whatever --step_graph says.
        decode_loop.STEP_GRAPH = "cudagraph_trees"
        try:
            result["eval"] = evaluation(recipe_args, train_args, model, tokenizer, heldout, device, lengths)
        except Exception as err:  # noqa: BLE001 - e.g. out of memory at the eval batch: the rest still counts
            result["eval"] = {"error": f"{type(err).__name__}: {str(err)[:500]}"}
            progress(f"evaluation failed: {result['eval']['error']}")
        finally:
            decode_loop.STEP_GRAPH = args.step_graph
        result["eval"].update(model=model_args.model_name_or_path, evaluated=which, step_graph="cudagraph_trees")
        save(out_dir, result)  # written after each part: a run cut short keeps what it measured

    if args.eval_first:  # the recipe's order: base evaluations (a model of their own) before any training
        progress("setup: loading the base model for the evaluation (recipe.load_model, as the base evals do)")
        _, model, tokenizer = recipe.load_model(model_args, train_args, device.type)
        evaluate(model, tokenizer, "base model (recipe.load_model), before training")
        del model
    run_dir = recipe.Run(recipe_args, train_args, model_args, name)
    progress(f"setup: building the {arm} trainer (recipe.Run.build_trainer: model load, LoRA)")
    trainer, args_used = run_dir.build_trainer(arm, train_tasks)
    clock = StepClock(device)
    clock.profile_step = args.steps + 1
    clock.instrument(trainer)
    if args.skip_guard_eval:
        result["bench_options"]["skip_guard_eval_calls"] = skip_guard_eval_after_first_step(trainer, clock)
    progress(f"training: {args.steps} steps (the first compiles), then one profiled step")
    before = dynamo_counters()
    trainer.train()
    after_training = dynamo_counters()
    profiled_step = next(s for s in clock.steps if s.get("profiled"))
    step_profile = profile_summary(profiled_step.pop("profiler"), device, profiled_step["total_s"])
    step_profile["covers"] = f"step {len(clock.steps)} from the end of its generation to its end"
    result["step"] = {"model": model_args.model_name_or_path, **summarize_steps(clock.steps),
                      "entropy_source": trainer.entropy_source_used, "profiled_step_total_s": profiled_step["total_s"],
                      "sum_tolerance_s": SUM_TOLERANCE_S, "cudnn_attention": recipe_args.cudnn_attention,
                      "generation_options": {k: getattr(args_used, k) for k in (
                          "generation_merge_adapter", "generation_compile", "generation_grouped_attention",
                          "generation_deferred_stop", "generation_decode_kernel", "generation_decode_loop", "bf16",
                          "gradient_checkpointing", "lora_autocast_inputs", "training_compile",
                          "generation_compile_regions", "generation_fused_projections", "deterministic_kernels",
                          "use_liger_kernel")},
                      "lora_autocast_inputs_on": trainer.lora_autocast_inputs_on}
    result["step_profile"] = step_profile
    result["dynamo"].update(training_first_step=counters_delta(before, clock.counters_after_first_step),
                            training_later_steps=counters_delta(clock.counters_after_first_step, after_training))
    result["dtypes"] = dtypes(trainer, args_used)
    save(out_dir, result)
    result["generation_profile"] = training_generation_profile(trainer, clock, device, lengths, args.host_profile)
    result["dynamo"]["training_generation_profile"] = counters_delta(after_training, dynamo_counters())
    save(out_dir, result)
    if not args.eval_first:  # an arm's evaluation: the trained model, after training (recipe._evaluate_arm)
        evaluate(trainer.model, trainer.processing_class, "the trainer's model after training")
    result["dynamo"]["guard_failures"] = guard_failure_reasons()
    save(out_dir, result)
    (out_dir / "step-profile.txt").write_text(report(result))
    progress(f"done: {out_dir / 'step-profile.json'} and {out_dir / 'step-profile.txt'}")
    return result


def save(out_dir: Path, result: dict) -> None:
    (out_dir / "step-profile.json").write_text(json.dumps(result, indent=1, default=str))


def report(r: dict) -> str:
    s, g, e = r["step"], r["generation_profile"], r["eval"]
    work = r["step_profile"]["work_items"]
    lines = [f"bench/step.py on {r['device']}: {r['model']}, arm {r['arm']}, {s['rows']} rows per step, "
             f"{r['order']}; {r['sync_note']}.", options_line(r["bench_options"]), "",
             f"Training step: median {s['total_s']:.3f} s over {s['steps_in_median']} steps (first step, with "
             f"compilation: {s['first_step_s']:.1f} s); entropy source: {s['entropy_source']}; decode loop: "
             f"{s['generation_options'].get('generation_decode_loop', 'transformers')}.", "",
             *markdown_table(["part", "median step (s)", "share", "part's own median (s)"])]
    m = s["median_step"]
    for p in PARTS:
        lines.append(markdown_row([p, f"{m[p]:.4f}", f"{100 * m[p] / m['total_s']:.1f}%",
                                   f"{s['part_medians_s'][p]:.4f}"]))
    lines.append(f"| total | {m['total_s']:.4f} | 100% | |")
    gi = s["generation"]
    lines += ["", f"Generation in the median step: {gi.get('rows')} rows, prompts up to {gi.get('prompt_tokens_max')} "
              f"tokens, {gi.get('decode_steps')} decode steps (mean completion {gi.get('completion_tokens_mean', 0):.0f}"
              f" tokens): {gi['wall_s']:.3f} s, {gi['ms_per_token_step']:.2f} ms per token step.",
              "Forward per microbatch: " + ", ".join(f"{x:.3f}" for x in m["forward_per_microbatch_s"]) +
              " s; backward: " + ", ".join(f"{x:.3f}" for x in m["backward_per_microbatch_s"]) + " s."]
    lines += profile_lines(f"Training generation profiled ({g['rows']} rows, static cache {g['static_cache_len']}, "
                           f"{work})", g)
    if "host_profile" in g:
        lines += host_lines(g["host_profile"], g["per_token_step"], gi)
    sp = r["step_profile"]
    lines += ["", f"Profiled step after its generation ({sp['covers']}; wall {sp['wall_s']:.3f} s with profiler "
              f"overhead): {work} busy {sp['busy_s']:.3f} s, {sp['items']} items.",
              *markdown_table(["part", "busy (s)", "items"],
                              [[p, f"{v['busy_s']:.4f}", v["items"]] for p, v in sorted(sp["by_phase"].items())])]
    lines += top_lines(sp)
    if "error" in e:
        return "\n".join(lines + ["", f"Evaluation failed: {e['error']}"]) + "\n"
    lines += ["", f"Evaluation of {e['evaluated']} ({e['parameter_dtype']}; eval.generate_samples, fast={e['fast']}, static cache {e['static_cache']}, compiled "
              f"{e['compiled_decoding']}): {e['samples']} samples in one batch of {e['rows_per_batch']} rows, "
              f"{e['decode_steps']} decode steps, prompts up to {e['prompt_tokens_max']} tokens, static cache "
              f"{e['static_cache_len']}: first call {e['first_call_s']:.2f} s, second {e['seconds']:.2f} s "
              f"({e['ms_per_token_step']:.2f} ms per token step); full test ~{e['full_test_estimate_s']:.0f} s "
              f"({e['full_test_batches']} such batches, an estimate)."]
    lines += profile_lines(f"Evaluation profiled ({work})", e["profile"])
    lines += ["", "torch._dynamo counters that changed (empty: ran compiled code without compiling):"]
    for name, delta in [("training, first step", r["dynamo"]["training_first_step"]),
                        ("training, later steps", r["dynamo"]["training_later_steps"]),
                        ("training generation profile", r["dynamo"]["training_generation_profile"]),
                        *[(f"eval {k}", v) for k, v in e["dynamo"].items()]]:
        lines.append(f"- {name}: {json.dumps(delta)[:600]}")
    lines += [f"- guard failures (why functions recompiled), last reasons: {json.dumps(r['dynamo']['guard_failures'])[:1500]}",
              "", "dtypes: " + json.dumps(r["dtypes"])]
    return "\n".join(lines) + "\n"


def options_line(o: dict) -> str:
    """Which bench-only options ran (--host_profile, --skip_guard_eval) and how many calls the stance covered."""
    line = (f"Bench options: host_profile {'on' if o['host_profile'] else 'off'}, skip_guard_eval "
            f"{'on' if o['skip_guard_eval'] else 'off'}")
    c = o.get("skip_guard_eval_calls")
    if c:
        line += (f" ({c['calls_in_stance']} generation calls under torch.compiler.set_stance(skip_guard_eval_unsafe="
                 f"True), {c['calls_with_guards']} with guards: the first step's, which compiles, and "
                 f"{c['calls_with_a_new_shape']} with a shape not compiled before: the later training steps and the "
                 "generation profiles ran in it, the evaluation did not)")
    if o.get("step_graph", "cudagraph_trees") != "cudagraph_trees":  # files from before the option have none
        line += f", step_graph {o['step_graph']}"
    return line + "."


def profile_lines(title: str, p: dict) -> list[str]:
    t = p["per_token_step"]
    lines = ["", f"{title}: " + ", ".join(f"{q['new_tokens']} tokens ({q['decode_steps']} steps) busy "
                                          f"{q['busy_s']:.3f} s, {q['items']} items, wall {q['wall_s']:.3f} s"
                                          for q in p["points"])]
    if "error" in t:
        return lines + [f"per token step: {t['error']}"]
    lines.append(f"per token step: busy {t['gpu_busy_ms']:.3f} ms, {t['items']:.0f} items, "
                 f"{t['graph_launches']:.2f} CUDA graph launches, profiled wall "
                 f"{t['profiled_wall_ms']:.3f} ms; prefill and fixed: busy {t['intercept_busy_ms']:.1f} ms, "
                 f"{t['intercept_items']:.0f} items")
    calls = {k: v for k, v in t.get("runtime_calls", {}).items() if v}
    if calls:
        lines += ["CUDA runtime calls per token step: " + ", ".join(runtime_call_text(k, v) for k, v in calls.items()),
                  RUNTIME_NOISE_NOTE]
    return lines + census_lines(t.get("kernels")) + top_lines(p)


def census_lines(census: list[dict] | None) -> list[str]:
    """The token step's work items by name (kernel_census); nothing for files from before the census."""
    if not census:
        return []
    lines = ["", *markdown_table(
        ["work items of one token step (long minus short profile, over the added steps)", "per step", "us per step",
         "gemm dtype"],
        [[row["name"][:100], f"{row['per_step']:.2f}", f"{row['us_per_step']:.1f}", row["gemm_dtype"] or ""]
         for row in census])]
    total = sum(row["per_step"] for row in census)
    return lines + [f"({len(census)} names, {total:.0f} items per token step; names growing by less than "
                    f"{CENSUS_MIN_COUNT} per step left out)"]


def runtime_call_text(name: str, per_token_step: float) -> str:
    """One runtime call's count per token step; a difference below RUNTIME_NOISE_CALLS (negative included) does not
    scale with tokens and is shown as ~0 with its raw value (the JSON keeps every raw number)."""
    if per_token_step < RUNTIME_NOISE_CALLS:
        return f"{name} ~0 (noise: {per_token_step:.2f})"
    return f"{name} {per_token_step:.2f}"


def host_lines(h: dict, torch_profile: dict, unprofiled: dict) -> list[str]:
    """The --host_profile tables: Python functions per token step by own and by cumulative time."""
    lines = ["", "Host time per token step (--host_profile: cProfile around two more training generations, "
             + ", ".join(f"{q['new_tokens']} tokens ({q['decode_steps']} steps) wall {q['wall_s']:.3f} s"
                         for q in h["points"]) + "; separate calls, not inside the torch profiler)."]
    t = h["per_token_step"]
    if "error" in t:
        return lines + [f"per token step: {t['error']}"]
    lines.append(f"Wall per token step: {t['profiled_wall_ms']:.3f} ms under cProfile, "
                 f"{torch_profile.get('profiled_wall_ms', float('nan')):.3f} ms under the torch profiler, "
                 f"{unprofiled['ms_per_token_step']:.3f} ms in the unprofiled median step (with its prefill). "
                 f"Own time of all {t['functions']} functions: {t['own_ms_all_functions']:.3f} ms. {h['note']}")
    share = lambda ms: f"{100 * ms / t['profiled_wall_ms']:.1f}%" if t["profiled_wall_ms"] > 0 else "-"  # noqa: E731
    for title, rows, key in (("own time (tottime)", t["top_own"], "own_ms"),
                             ("cumulative time", t["top_cumulative"], "cumulative_ms")):
        lines += ["", *markdown_table(
            [f"function, by {title}", "calls per token step", "ms per token step", "share of cProfile wall"],
            [[row["function"][:140], f"{row['calls']:.2f}", f"{row[key]:.4f}", share(row[key])] for row in rows])]
    return lines


def top_lines(p: dict) -> list[str]:
    lines = ["", *markdown_table(["top work items", "count", "total ms", "mean us", "gemm dtype"],
                                 [[row["name"][:100], row["count"], f"{row['total_ms']:.2f}", f"{row['mean_us']:.1f}",
                                   row["gemm_dtype"] or ""] for row in p["top"]])]
    if p.get("matmul_ops"):
        lines += ["", *markdown_table(["matmul/attention op (CPU side)", "input dtypes", "count", "device ms",
                                       "cpu ms"],
                                      [[o["op"], ",".join(o["input_dtypes"]), o["count"], f"{o['device_ms']:.2f}",
                                        f"{o['cpu_ms']:.2f}"] for o in p["matmul_ops"][:12]])]
    return lines


def _options(r: dict) -> dict:
    """The run's generation options, and the bench-only decode graph where it was not torch.compile's own."""
    graph = r.get("bench_options", {}).get("step_graph", "cudagraph_trees")
    return {**r["step"]["generation_options"], **({} if graph == "cudagraph_trees" else {"step_graph": graph})}


def _completion_lengths(r: dict) -> list[float | None]:
    return [(step.get("generation_info") or {}).get("completion_tokens_mean") for step in r["step"]["steps"]]


def _same_lengths(these: list, first: list) -> str:
    """How many steps decoded completions of the first run's mean length, to the last digit: the same seed and
    batches, so a lever that changes no sampled token keeps every step's length; one that changes rounding parts the
    runs within a step or two. Equal lengths are evidence of the same tokens, not proof of bit-equal records."""
    steps = min(len(these), len(first))
    same = sum(a is not None and a == b for a, b in zip(these, first))
    return f"{same} of {steps}"


def compare(paths: list[str]) -> str:
    """Step profiles of one config with one option changed each, as a markdown table: every row's options that differ
    from the first file's, then the parts a lever can move. A lever is judged per token step (ms per token step, GPU
    busy time and kernels per token step of the profiled decode): the median step of each run may be another step,
    of other completion lengths. The last column compares every step's mean completion length with the first run's
    (the same seed: equal lengths at every step say the lever changed no sampled token, most likely)."""
    runs = [(Path(p).name, read_json(p, ValueError)) for p in paths]  # a missing or broken file: one ValueError line
    first = _options(runs[0][1])
    lengths = _completion_lengths(runs[0][1])
    lines = markdown_table(["file", "options changed", "median step (s)", "generation (s)", "training ms/tok",
                            "GPU busy ms/tok", "kernels/tok", "forward (s)", "backward (s)", "evaluation ms/tok",
                            "first step (s)", "same lengths"])
    for name, r in runs:
        s, per = r["step"], r["generation_profile"]["per_token_step"]
        # an option the first file predates ran off there: named only where this run has it on
        changed = ", ".join(f"{k} {v}" for k, v in sorted(_options(r).items())
                            if (first[k] != v if k in first else v not in (False, None))) or "-"
        m = s["median_step"]
        ev = r["eval"].get("ms_per_token_step")
        lines.append(markdown_row([name, changed, f"{s['total_s']:.2f}", f"{m['generation']:.3f}",
                                   f"{s['generation']['ms_per_token_step']:.2f}", f"{per['gpu_busy_ms']:.2f}",
                                   f"{per['items']:.0f}", f"{m['forward']:.3f}", f"{m['backward']:.3f}",
                                   "-" if ev is None else f"{ev:.2f}", f"{s['first_step_s']:.1f}",
                                   _same_lengths(_completion_lengths(r), lengths)]))
    r0 = runs[0][1]
    lines.append(f"\n{r0['device']}; torch {r0['versions']['torch']}; {r0['model']}, arm {r0['arm']}, "
                 f"{r0['step']['rows']} rows per step; median over the steps after the first (which compiles); "
                 "every part CUDA-synchronized at both ends. Options changed: from the first row's. /tok: per token "
                 "step of the decode (training: the step's generation; GPU busy and kernels: the profiled decode; "
                 "evaluation: an evaluation batch). Same lengths: the steps whose mean completion length is the "
                 "first row's.")
    return fill_lines("\n".join(lines))


# ---------------------------------------------------------------------------- tables of single measurements
# Evaluation decoding options measured off and on, one batch each (bench/*-h200.json with an "option"), and the
# tuning of the offline task: measured once, by scripts bench/README.md names by commit; their tables stay here.
ROUNDING = "bf16 rounding moves the samples; on a CPU in float32 tests/test_attention.py finds equal logits and " \
           "identical samples"  # both attention options compute the same attention with other rounding
DECODE_OPTIONS = {  # option: (column title, label off, label on, what the identical share means)
    "grouped_attention": ("attention", "sdpa", "grouped", ROUNDING),
    "deferred_stop": ("stop check", "every step", "one step late", "the same tokens per call are expected; a batch "
                      "that ends early moves the random stream of the next"),
    "decode_kernel": ("decoding attention", "sdpa kernel", "two matmuls", ROUNDING),
    "decode_loop": ("decoding loop", "generate", "compiled step", "the compiled step's sampler is torch.multinomial's "
                    "own one-sample algorithm, argmax(p / Exp(1)) (same texts in eager on a CPU, tests/test_eval.py), "
                    "but the graph draws other random numbers and rounds the forward otherwise in bf16, so a low share "
                    "is expected; pass@1 of both rows is the check"),
    "decode_loop_autotune": ("compiled step's mode", "reduce-overhead", "max-autotune", "other GEMM kernels round "
                             "otherwise in bf16, which moves the samples; pass@1 of both rows is the check"),
    "shared_prefill": ("prefill", "per row", "once per prompt", "the same prefill on k times fewer rows; other GEMM "
                       "shapes may round it otherwise in bf16 (equal on a CPU in float32, tests/test_decode_loop.py)"),
    "compile_regions": ("decoder layers in the step", "unrolled", "nested regions", "the same computation; inductor "
                        "fuses no kernel across a layer's boundary, which may round otherwise in bf16 (equal tokens "
                        "on a CPU in float32, tests/test_decode_loop.py)"),
    "fused_projections": ("q/k/v and gate/up products", "separate", "fused", "the same dot products; cuBLAS may pick "
                          "other kernels for the wider products, which may round otherwise in bf16 (equal tokens on a "
                          "CPU in float32, tests/test_fused.py)"),
}


def decode_table(result: dict) -> str:
    """The table of a measurement of one evaluation decoding option off and on (one fast evaluation batch, same seed):
    ms per token step, the batch's seconds, pass@1 where recorded, and the share of identical completions."""
    title, *_, meaning = DECODE_OPTIONS[result["option"]]
    scored = all("pass@1" in r for r in result["rows"])  # the measurements before decode_loop scored no sample
    rows = markdown_table([title, "ms per token step", "batch (s)", *(["pass@1"] if scored else [])],
                          [[r["label"], f"{r['ms_per_token_step']:.1f}", f"{r['seconds']:.2f}",
                            *([f"{r['pass@1']:.3f}"] if scored else [])] for r in result["rows"]])
    return "\n".join(rows + ["", f"{result['model']}, {result['samples']} samples x {result['new_tokens']} tokens on "
                              f"{result['device']}: {result['speedup']:.2f}x. Identical completions at the same seed: "
                              f"{result['identical_completions']:.1%} ({meaning})."])


def task_table(results: dict) -> str:
    """The table of a tuning of the offline arithmetic task (results/offline-task-tuning.json): the base pass@1 of the
    offline model per difficulty and system prompt. GRPO learns nothing from a task the model always or never solves,
    so the offline config uses one whose base pass@1 lies in 10-60%."""
    lines = [f"Base pass@1 of {results['model']} on the generated task ({results['rows'][0]['n']} tasks, 1 sample each, "
             f"{results['max_new_tokens']} new tokens, device {results['device']}):", "",
             *markdown_table(["difficulty", "system prompt", "temperature", "pass@1", "mean length (chars)"],
                             [[r["difficulty"], r["prompt"], r.get("temperature", 1.0), f"{100 * r['pass@1']:.1f}%",
                               f"{r['mean_length']:.0f}"] for r in results["rows"]])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import recipe

    argv = sys.argv[1:] if argv is None else argv
    for flag, table in (("--decode_table", decode_table), ("--task_table", task_table)):
        if argv[:1] == [flag]:
            if len(argv) != 2:
                print(f"step.py: {flag} needs one results file", file=sys.stderr)
                return 2
            try:
                print(fill_lines(table(read_json(argv[1], ValueError))))
            except ValueError as err:
                print(f"step.py: {flag}: {err}", file=sys.stderr)
                return 2
            return 0
    if argv[:1] == ["--compare"]:
        if len(argv) < 2:
            print("step.py: --compare needs one or more step-profile.json files", file=sys.stderr)
            return 2
        try:
            print(compare(argv[1:]))
        except ValueError as err:
            print(f"step.py: --compare: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        run(argv)
    except recipe.RecipeError as err:
        print(f"step.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
