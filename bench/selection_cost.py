"""Benchmark: what token selection costs, in every rule and scope, against plain GRPO and the old method.

    python bench/selection_cost.py                       # on a GPU: Qwen2.5-1.5B shape; writes bench/results-<device>.json
    python bench/selection_cost.py --small               # on a CPU: a 2-layer model with the same vocabulary, small shapes
    python bench/selection_cost.py --table bench/results-h200.json   # the README table from a results file

Model: Qwen2.5-1.5B's config (vocab 151936) with random weights, LoRA r=32, bf16, gradient checkpointing.
Parts, all in one run, each written to the results file as soon as it is measured:
1. update: scoring + loss + backward + optimizer step of one batch through FastGMTSTrainer.compute_loss, no selection,
   ETS and GMTS in each scope (batch and group use generation-time entropy; "batch+pass" forces the fused no-grad
   scoring pass, the fallback), and the old method (an extra no-grad forward with a float32 log_softmax over the full
   vocabulary). Median of --reps after a warm-up; peak memory; ratios to no selection.
2. recorder: the per-decoding-step cost of recording entropy during generation (softmax over the vocabulary, (B, V)).
3. accuracy: entropy used for ranking (fused bf16 head, and the generation-time recorder) against a float64
   reference on the same positions, and the share of kept tokens that changes.
4. end to end: one full GRPO step (generation, scoring, update) at the paper shape, for each generation option.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose

QWEN_1_5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 tie_word_embeddings=True)
SMALL = dict(QWEN_1_5B, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
VARIANTS = ["none", "entropy/microbatch", "gmts/microbatch", "entropy/batch", "gmts/batch", "entropy/group",
            "gmts/group", "gmts/batch+pass", "old"]


def e2e_model(cfg: dict) -> str:
    """The end-to-end rows' `model`: random weights of a shape, never a checkpoint's name. The results file also holds
    end-to-end rows of the real model (bench/costs.py); this name tells them apart."""
    return "random-init qwen2.5-1.5b shape" if cfg == QWEN_1_5B else "random-init qwen2.5 small shape (--small)"


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def word_tokenizer(vocab: int):
    """A tokenizer that can decode every id of the model's vocabulary (random models emit any id)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, vocab)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return fast


def length_reward(completions, **kwargs):
    return [float(len(c) % 3) for c in completions]


def make_trainer(cfg: dict, device, rows: int, completion: int, generation_kwargs=None, paged=False,
                 prompt_words=(128, 128), **selection):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gmts_recipe.fast_config import FastGMTSConfig
    from gmts_recipe.fast_trainer import FastGMTSTrainer

    torch.manual_seed(0)
    tok = word_tokenizer(cfg["vocab_size"])
    config = Qwen2Config(**cfg, pad_token_id=0, eos_token_id=1, bos_token_id=None)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16 if device.type == "cuda" else torch.float32)
    bf16 = device.type == "cuda"
    args = FastGMTSConfig(
        output_dir="/tmp/gmts-bench", per_device_train_batch_size=rows, num_generations=min(8, rows),
        gradient_accumulation_steps=1, max_completion_length=completion, learning_rate=1e-5, max_steps=3,
        report_to=[], save_strategy="no", logging_steps=1, bf16=bf16, use_cpu=device.type != "cuda",
        gradient_checkpointing=True, temperature=1.0, loss_type="dapo", beta=0.0, seed=0,
        generation_kwargs=generation_kwargs, use_transformers_continuous_batching=paged, disable_tqdm=True,
        **selection)
    low, high = prompt_words  # prompt i has low + (i * 37) % (high - low + 1) tokens: lengths vary step to step
    prompts = Dataset.from_list([{"prompt": " ".join(f"t{7 + (i * 31 + j) % 5000}"
                                                     for j in range(low + (i * 37) % (high - low + 1)))}
                                 for i in range(64)])
    trainer = FastGMTSTrainer(model=model, reward_funcs=length_reward, args=args, train_dataset=prompts,
                              processing_class=tok,
                              peft_config=LoraConfig(r=32, lora_alpha=64, target_modules="all-linear"))
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1
    # Trainer.train() turns gradient checkpointing on; the update part calls compute_loss directly, so do it here
    trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return trainer


def synthetic_batch(trainer, rows: int, prompt: int, completion: int, seed: int = 0) -> dict:
    """What `_generate_and_score_completions` returns, with random tokens and lengths (a quarter of `completion` and
    up), in groups of 8 rollouts (tests/tiny.prepared_batch), on the trainer's device."""
    from tiny import prepared_batch  # the same hand-built batch the trainer tests use (imported here: --table needs
    # neither it nor the transformers and datasets it imports)

    group_size = min(8, rows)
    batch = prepared_batch(trainer.model.config.vocab_size, rows // group_size, group_size, prompt, completion, seed,
                           min_length=completion // 4)
    return {k: v.to(trainer.accelerator.device) for k, v in batch.items()}


def set_variant(trainer, variant: str) -> None:
    rule, _, scope = variant.partition("/")
    on = variant not in ("none", "old")
    trainer.args.token_selection = rule if on else ("entropy" if variant == "old" else "all")
    trainer.args.selection_scope = scope.replace("+pass", "") if on else "batch"
    trainer.selection_on = on
    trainer.stats_on = on  # "none" is TRL's plain path, without the metrics token_selection="all" logs
    # "old" brings its own selection_mask, which only reaches the loss through the hook
    trainer.top_entropy_quantile = trainer.args.selection_ratio if on or variant == "old" else 1.0


def full_sequences(batch) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(B, P+T) token ids and attention mask of prompt + completion, and the completion width T."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    am = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    return ids, am, batch["completion_ids"].size(1)


def old_method_entropy(trainer, batch) -> torch.Tensor:
    """An earlier reproduction's method: a second no-grad forward, full logits, float32 log_softmax over the vocab."""
    model = trainer.model
    ids, am, width = full_sequences(batch)
    with torch.no_grad(), trainer.accelerator.autocast():
        logits = model(input_ids=ids, attention_mask=am).logits[:, -width - 1 : -1]  # (B, T, V)
        logp = torch.log_softmax(logits.float() / trainer.temperature, dim=-1)
        return -(logp.exp() * logp).sum(-1)  # (B, T)


def one_update(trainer, batch, variant: str) -> None:
    """Scoring (when the variant needs it), selection and the optimizer step for one generation batch."""
    from selection import ets_scores, select_top_fraction

    inputs = dict(batch)
    if variant == "old":
        ent = old_method_entropy(trainer, batch)
        inputs["selection_mask"] = select_top_fraction(ets_scores(ent), batch["completion_mask"], 0.2)
    elif variant.endswith("+pass"):
        trainer._select_generation_batch(inputs)  # fused no-grad scoring pass (nothing recorded)
    elif variant.split("/")[-1] in ("batch", "group"):
        # entropy recorded during generation (its per-step cost is measured separately): stand-in values here
        trainer._entropy_found = (_FakeRecorder(batch["completion_mask"].float().mul(3.0)), None)  # as if recorded
        trainer._select_generation_batch(inputs)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, inputs)
    trainer.accelerator.backward(loss)
    trainer.optimizer.step()
    trainer.optimizer.zero_grad(set_to_none=True)


class _FakeRecorder:
    def __init__(self, entropy):
        self._entropy = entropy + torch.rand_like(entropy)

    def entropy(self, rows, width, device):
        return self._entropy


def measure(fn, device, reps: int) -> dict:
    fn()  # warm-up
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    return {"median_s": statistics.median(times), "times_s": times, "peak_gib": peak}


def interleaved_updates(trainer, batch, device, rounds: int, profile: bool = False) -> list[dict]:
    """Every variant once per round, in an order rotated each round, so that drift of the machine (clocks, other
    load) falls on every variant alike; each variant's time is also compared with plain's in the same round.
    Reports the median time, the median and quartiles of the per-round ratio to plain, and the peak memory."""
    import numpy as np

    def run(variant):
        set_variant(trainer, variant)
        one_update(trainer, batch, variant)
        sync(device)

    live, out = [], {}
    for variant in VARIANTS:  # warm-up; a variant that runs out of memory is reported and left out of the rounds
        try:
            run(variant)
            live.append(variant)
            out[variant] = {"variant": variant, "times_s": [], "peak_gib": 0.0 if device.type == "cuda" else None}
        except torch.OutOfMemoryError:
            out[variant] = {"variant": variant, "median_s": None, "peak_gib": None, "error": "out of memory"}
            trainer.optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    for i in range(rounds):
        for variant in live[i % len(live):] + live[: i % len(live)]:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            run(variant)
            out[variant]["times_s"].append(time.perf_counter() - t0)
            if device.type == "cuda":
                out[variant]["peak_gib"] = max(out[variant]["peak_gib"], torch.cuda.max_memory_allocated() / 2**30)
    # GPU work and kernel launches, free of the host's timing noise
    for variant in live if profile and device.type == "cuda" else []:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run(variant)
        out[variant]["cuda_kernels"], out[variant]["gpu_busy_s"] = cuda_activity(prof.key_averages())
    plain = np.array(out["none"]["times_s"]) if "none" in live else None
    for variant in live:
        r = out[variant]
        r["median_s"] = statistics.median(r["times_s"])
        if plain is not None:
            ratios = np.array(r["times_s"]) / plain
            r["ratio_median"], r["ratio_q25"], r["ratio_q75"] = (float(q) for q in np.quantile(ratios, [0.5, 0.25, 0.75]))
    return [out[v] for v in VARIANTS]


def cuda_activity(events) -> tuple[int, float]:
    """(CUDA kernels, GPU busy seconds) in a profiler's key_averages()."""
    cuda = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.count for e in cuda), sum(e.self_device_time_total for e in cuda) / 1e6


def recorder_cost(device, rows: int, vocab: int, reps: int) -> dict:
    from gmts_recipe.generation.fast import EntropyRecorder

    rec = EntropyRecorder(1.0)
    logits = torch.randn(rows, vocab, device=device, dtype=torch.bfloat16)
    r = measure(lambda: rec(None, logits), device, reps * 20)
    return {"rows": rows, "per_decode_step_ms": 1000 * r["median_s"]}


def accuracy(trainer, batch, device) -> dict:
    """Fused-head entropy (what training ranks by) against float64 on the same positions; kept-share change."""
    model = trainer.model
    ids, am, width = full_sequences(batch)
    _, fused = trainer.scoring_pass(batch)
    with torch.no_grad():
        with trainer.accelerator.autocast():
            hidden = model(input_ids=ids, attention_mask=am, output_hidden_states=True).hidden_states[-1]
        weight = model.get_output_embeddings().weight
        ref = torch.empty_like(fused, dtype=torch.float64)
        for i in range(ids.size(0)):  # one row at a time: (T, V) float64
            logits = hidden[i, -width - 1 : -1].double() @ weight.double().T / trainer.temperature
            logp = torch.log_softmax(logits, -1)
            ref[i] = -(logp.exp() * logp).sum(-1)
    mask = batch["completion_mask"].bool()
    keep_ref = gmts_top_fifth(ref, batch)
    return {"max_abs_error": (fused.double() - ref)[mask].abs().max().item(),
            "mean_abs_error": (fused.double() - ref)[mask].abs().mean().item(),
            "kept_changed_share": kept_changed_share(gmts_top_fifth(fused, batch), keep_ref)}


def gmts_top_fifth(entropy: torch.Tensor, batch) -> torch.Tensor:
    """GMTS's batch-wide top 20% of a batch's completion tokens, on-policy (omega = advantage), for this entropy."""
    from selection import gmts_scores, select_top_fraction

    omega = batch["advantages"].unsqueeze(1).expand_as(entropy)  # (B, T)
    return select_top_fraction(gmts_scores(entropy, omega), batch["completion_mask"].bool(), 0.2)


def kept_changed_share(keep: torch.Tensor, reference: torch.Tensor) -> float:
    """Share of the reference's kept tokens that another ranking swaps for different ones (equal counts)."""
    return ((keep ^ reference).sum() / 2 / reference.sum()).item()


E2E_OPTIONS = {  # generation options of one full GRPO step; "static" alone is TRL's static cache without compile
    "plain": {}, "static_cache": {"generation_kwargs": {"cache_implementation": "static"}}, "paged": {"paged": True},
    "merged": {"generation_merge_adapter": True},
    "merged_static": {"generation_kwargs": {"cache_implementation": "static"}, "generation_merge_adapter": True},
    "compiled": {"generation_compile": True},
    "merged_compiled": {"generation_compile": True, "generation_merge_adapter": True},
    # padded lengths: the training forward's attention sees a few shapes, not a new one every step
    "merged_compiled_pad64": {"generation_compile": True, "generation_merge_adapter": True, "pad_to_multiple_of": 64},
    # PyTorch's cuDNN attention builds a plan for every new sequence length: try without it
    "merged_compiled_no_cudnn_attention": {"generation_compile": True, "generation_merge_adapter": True,
                                           "cudnn_sdp": False},
}
E2E_PROMPT_WORDS = (96, 160)  # prompt lengths vary between steps, as real prompts do


def end_to_end(cfg, device, rows, completion, option: str, steps: int = 3, profile_update: bool = False) -> dict:
    """One full GRPO step through trainer.train(), split into generation, scoring (rest of
    _generate_and_score_completions) and update, for one generation option. The first step is reported apart
    (it pays compilation where there is one) and left out of the medians. Python's garbage collector time is
    recorded per step; with profile_update, the update of the last step runs under the torch profiler."""
    import gc

    import torch._dynamo.utils

    options = dict(E2E_OPTIONS[option])
    cudnn_sdp = options.pop("cudnn_sdp", True)  # a process-wide switch: set for every option, so none inherits it
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)
    trainer = make_trainer(cfg, device, rows, completion, token_selection="gmts", selection_scope="batch",
                           prompt_words=E2E_PROMPT_WORDS, **options)
    trainer.args.max_steps = steps
    timings = {"generation": [], "generate_and_score": [], "step": [], "gc": []}
    captured, graphs, gc_clock, prof = {}, [], {"t": 0.0, "start": 0.0}, {}

    def gc_callback(phase, info):
        if phase == "start":
            gc_clock["start"] = time.perf_counter()
        else:
            gc_clock["t"] += time.perf_counter() - gc_clock["start"]

    def timed(name, fn):
        def wrapper(*a, **k):
            sync(device)
            if name == "step":
                gc_clock["t"] = 0.0
            t0 = time.perf_counter()
            out = fn(*a, **k)
            sync(device)
            timings[name].append(time.perf_counter() - t0)
            if name == "generate_and_score" and profile_update and len(timings["step"]) == steps - 1:
                prof["p"] = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                               torch.profiler.ProfilerActivity.CUDA])
                prof["p"].__enter__()
            if name == "step":  # compiled graphs so far: a recompilation after the first step shows here
                graphs.append(int(torch._dynamo.utils.counters["stats"]["unique_graphs"]))
                timings["gc"].append(gc_clock["t"])
                if "p" in prof:
                    prof["p"].__exit__(None, None, None)
            return out
        return wrapper

    trainer._generate_single_turn = timed("generation", trainer._generate_single_turn)
    original_gs = trainer._generate_and_score_completions

    def gen_and_score(*a, **k):
        out = timed("generate_and_score", original_gs)(*a, **k)
        captured["out"] = out
        return out

    trainer._generate_and_score_completions = gen_and_score
    trainer.training_step = timed("step", trainer.training_step)
    gc.callbacks.append(gc_callback)
    try:
        trainer.train()
    finally:
        gc.callbacks.remove(gc_callback)
    n = len(timings["step"])
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in timings.items() if v}
    generation = med.get("generation", 0.0)
    scoring = med["generate_and_score"] - generation
    update = med["step"] - med["generate_and_score"]
    out = {"option": option, "rows": rows, "completion": completion, "prompt_tokens": list(E2E_PROMPT_WORDS),
           "steps": n, "generation_s": generation, "scoring_s": scoring, "update_s": update, "total_s": med["step"],
           "first_step_s": timings["step"][0], "step_times_s": timings["step"],
           "generation_times_s": timings["generation"],
           "update_times_s": [a - b for a, b in zip(timings["step"], timings["generate_and_score"])],
           "graphs_compiled_after_first_step": graphs[-1] - graphs[0], "gc_times_s": timings["gc"],
           "entropy_source": trainer.entropy_source_used,
           "completion_tokens": int(captured["out"]["completion_mask"].sum())}
    if "p" in prof:
        events = prof["p"].key_averages()
        kernels, busy = cuda_activity(events)
        out["update_profile"] = {"cuda_kernels": kernels, "gpu_busy_s": busy,
                                 "top": events.table(sort_by="self_cpu_time_total", row_limit=20)[:6000]}
    if trainer.entropy_source_used == "generation":  # generation-time vs training-forward entropy on these rows
        out["generation_vs_forward"] = generation_vs_forward(trainer, captured["out"])
    return out


def generation_vs_forward(trainer, batch) -> dict:
    """Kept-token change when ranking by the entropy recorded while generating instead of the training forward's."""
    _, forward_entropy = trainer.scoring_pass(batch)
    return {"kept_changed_share": kept_changed_share(batch["selection_mask"], gmts_top_fifth(forward_entropy, batch))}


GENERATION_OPTIONS = ("plain", "merged", "plain+compiled", "merged+compiled")


def generation_options(cfg, device, rows: int, new_tokens: int, reps: int, options=GENERATION_OPTIONS) -> list[dict]:
    """Generation alone (no training), same LoRA model, for each option: where the time of a GRPO step goes.
    plain: what TRL runs (unmerged LoRA, eager, dynamic cache); merged: LoRA folded into the weights; +compiled:
    static cache, which makes transformers compile the decoding step with CUDA graphs (reduce-overhead).
    Each option is then profiled over 16 new tokens: CUDA kernels and GPU busy time per token step against the wall
    time, and the host-side operations that take the most time."""
    from gmts_recipe.generation.fast import merged_lora, without_input_grad_hooks

    trainer = make_trainer(cfg, device, rows, new_tokens, token_selection="gmts")
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.eval()
    ids = torch.randint(2, cfg["vocab_size"], (rows, 128), device=device)
    base = dict(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
    out = []
    for option in options:
        kwargs = dict(base, cache_implementation="static") if "compiled" in option else dict(base)
        try:
            # as the trainer's options run them: merged_lora, and compiled without the input-grad hook (a graph break)
            merge = merged_lora(model) if option.startswith("merged") else contextlib.nullcontext()
            lift = without_input_grad_hooks(model) if "compiled" in option else contextlib.nullcontext()
            with torch.no_grad(), merge, lift:
                r = measure(lambda: model.generate(**kwargs), device, reps)  # includes one warm-up (compilation)
                row = {"option": option, "rows": rows, "new_tokens": new_tokens, "seconds": r["median_s"],
                       "ms_per_token_step": 1000 * r["median_s"] / new_tokens}
                row.update(profile_generation(model, dict(kwargs, max_new_tokens=16, min_new_tokens=16), device))
            out.append(row)
        except Exception as e:  # noqa: BLE001 - a failing option is a result
            out.append({"option": option, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        print(json.dumps({k: v for k, v in out[-1].items() if k != "top"}), flush=True)
    return out


def profile_generation(model, kwargs: dict, device) -> dict:
    steps = kwargs["max_new_tokens"]
    model.generate(**kwargs)  # warm at this length
    sync(device)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        model.generate(**kwargs)
        sync(device)
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    kernels, busy = cuda_activity(events)
    return {"profile_new_tokens": steps, "cuda_kernels_per_token_step": kernels / steps,
            "gpu_busy_ms_per_token_step": 1000 * busy / steps,
            "profiled_wall_ms_per_token_step": 1000 * wall / steps,
            "top": events.table(sort_by="self_cpu_time_total", row_limit=15)[:5000]}


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark token selection (see module docstring).")
    ap.add_argument("--small", action="store_true", help="2-layer model, small shapes (CPU unless --device)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present, cpu with --small)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parts", default="update,recorder,accuracy,e2e,generation")
    ap.add_argument("--e2e-options", default=",".join(E2E_OPTIONS))
    ap.add_argument("--e2e-steps", type=int, default=4, help="full steps per option; the first is reported apart")
    ap.add_argument("--e2e-profile", action="store_true", help="profile the update of each option's last step")
    ap.add_argument("--profile-updates", action="store_true",
                    help="update part, on a GPU: GPU busy time and kernels per variant")
    ap.add_argument("--gen-options", default=",".join(GENERATION_OPTIONS))
    ap.add_argument("--shapes", default=None, help="e.g. 8x128x256,32x128x1024 (rows x prompt x completion)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", default=None, help="print the README table of a results file and exit")
    a = ap.parse_args()
    if a.table:
        print(fill_lines(table(json.loads(Path(a.table).read_text()))))
        return
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() and not a.small else "cpu"))
    cfg = SMALL if a.small else QWEN_1_5B
    shapes = [(4, 32, 64), (8, 32, 128)] if a.small else [(8, 128, 256), (32, 128, 1024), (64, 128, 1024)]
    if a.shapes:
        shapes = [tuple(int(x) for x in shape.split("x")) for shape in a.shapes.split(",")]
    gpu = torch.cuda.get_device_name(0).split()[-1].lower() if device.type == "cuda" else "cpu"
    name = f"{gpu}-small" if a.small else gpu
    out_path = Path(a.out or ROOT / "bench" / f"results-{name}.json")
    import peft
    import transformers
    import trl

    results = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "model": cfg,
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "trl": trl.__version__, "peft": peft.__version__},
               "update": [], "recorder": [], "accuracy": None, "e2e": [], "generation": []}
    if out_path.is_file():  # parts run in separate calls merge into one file; a part run again replaces its own
        previous = json.loads(out_path.read_text())
        if previous.get("device") == results["device"] and previous.get("model") == cfg:
            results.update({k: previous.get(k, results[k]) for k in ("update", "recorder", "accuracy", "e2e",
                                                                     "generation")})
            results.update({k: v for k, v in previous.items() if k not in results})  # e.g. notes, superseded rows

    def save():
        out_path.write_text(json.dumps(results, indent=1))

    parts = a.parts.split(",")
    for name, given, known in (("--parts", parts, ("update", "recorder", "accuracy", "e2e", "generation")),
                               ("--e2e-options", a.e2e_options.split(","), E2E_OPTIONS),
                               ("--gen-options", a.gen_options.split(","), GENERATION_OPTIONS)):
        unknown = [x for x in given if x not in known]
        if unknown:
            ap.error(f"{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    # what runs now replaces its own earlier results: update rows by shape, e2e rows by option, other parts whole
    results["update"] = [r for r in results["update"] if "update" not in parts
                         or (r["rows"], r["prompt"], r["completion"]) not in shapes]
    # e2e rows of another model (bench/costs.py's real-model rows) are never this run's to replace
    results["e2e"] = [r for r in results["e2e"] if "e2e" not in parts or r.get("model") != e2e_model(cfg)
                      or r["option"] not in a.e2e_options.split(",")]
    gen_options = a.gen_options.split(",")
    results["generation"] = [r for r in results["generation"] if "generation" not in parts
                             or r["option"] not in gen_options]
    for part in ("recorder", "accuracy"):
        if part in parts:
            results[part] = None if part == "accuracy" else []
    if "update" in parts or "accuracy" in parts:
        for rows, prompt, completion in shapes:
            trainer = make_trainer(cfg, device, rows, completion, token_selection="gmts")
            batch = synthetic_batch(trainer, rows, prompt, completion)
            if "accuracy" in parts and results["accuracy"] is None:
                results["accuracy"] = {"rows": rows, "prompt": prompt, "completion": completion,
                                       **accuracy(trainer, batch, device)}
                save()
            if "update" in parts:
                for r in interleaved_updates(trainer, batch, device, a.reps, profile=a.profile_updates):
                    results["update"].append({"rows": rows, "prompt": prompt, "completion": completion, **r})
                    print(json.dumps(results["update"][-1]), flush=True)
                save()
            if "recorder" in parts:
                results["recorder"].append(recorder_cost(device, rows, cfg["vocab_size"], a.reps))
                save()
            del trainer, batch
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if "e2e" in parts:
        rows, completion = (8, 256) if not a.small else (4, 32)
        for option in a.e2e_options.split(","):
            try:
                r = end_to_end(cfg, device, rows, completion, option, steps=a.e2e_steps, profile_update=a.e2e_profile)
            except Exception as e:  # noqa: BLE001 - an option that fails is a result to report, not a crash
                r = {"option": option, "rows": rows, "total_s": None, "error": f"{type(e).__name__}: {str(e)[:300]}",
                     "trace": traceback.format_exc()[-1500:]}
            r = {"option": r["option"], "model": e2e_model(cfg), **r}
            results["e2e"].append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "trace"}), flush=True)
            save()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    order = {v: i for i, v in enumerate(VARIANTS)}
    results["update"].sort(key=lambda r: (r["rows"], r["completion"], order.get(r["variant"], 99)))
    if "generation" in parts:
        results["generation"] += generation_options(cfg, device, *((8, 256) if not a.small else (2, 8)), a.reps,
                                                    gen_options)
        save()
    save()
    print(table(results))


def table(results: dict) -> str:
    """README tables, generated from a results file. A row's `note` (an annotation written after the run, e.g. from
    its log) is printed under the tables, never in a measured cell."""
    annotated = []

    def mark(r: dict) -> str:
        if not r.get("note"):
            return ""
        annotated.append(r)
        return f" (note {len(annotated)})"

    lines = [f"Device: {results['device']}; model: Qwen2.5-1.5B shape "
             f"({results['model']['num_hidden_layers']} layers, vocab {results['model']['vocab_size']}), random "
             f"weights, LoRA r=32, gradient checkpointing. Scoring + loss + backward + optimizer step: median time; "
             f"'vs none' is the median (and quartiles) of the per-round ratio where variants ran interleaved.", "",
             "| rows x (prompt+completion) | selection | time | vs none | peak memory | vs none |", "|---|---|---|---|---|---|"]
    base = {}
    for r in results["update"]:
        shape = f"{r['rows']} x ({r['prompt']}+{r['completion']})"
        if r["variant"] == "none":
            base[shape] = r
        b = base.get(shape, {})
        t = "out of memory" if r.get("median_s") is None else f"{r['median_s']:.3f} s"
        if "ratio_median" in r:
            rt = f"{r['ratio_median']:.3f} ({r['ratio_q25']:.3f}-{r['ratio_q75']:.3f})"
        else:
            rt = "-" if r.get("median_s") is None or not b.get("median_s") else f"{r['median_s'] / b['median_s']:.3f}"
        m = "-" if r.get("peak_gib") is None else f"{r['peak_gib']:.2f} GiB"
        rm = "-" if r.get("peak_gib") is None or not b.get("peak_gib") else f"{r['peak_gib'] / b['peak_gib']:.3f}"
        lines.append(f"| {shape} | {r['variant']} | {t} | {rt} | {m} | {rm} |")
    profiled = [r for r in results["update"] if "gpu_busy_s" in r]
    if profiled:
        lines += ["", "| rows x (prompt+completion) | selection | GPU busy (profiler) | vs none | CUDA kernels | vs none |",
                  "|---|---|---|---|---|---|"]
        none = {(r["rows"], r["completion"]): r for r in profiled if r["variant"] == "none"}
        for r in profiled:
            b = none.get((r["rows"], r["completion"]))
            lines.append(f"| {r['rows']} x ({r['prompt']}+{r['completion']}) | {r['variant']} | "
                         f"{1000 * r['gpu_busy_s']:.1f} ms | {r['gpu_busy_s'] / b['gpu_busy_s']:.3f} | "
                         f"{r['cuda_kernels']} | {r['cuda_kernels'] / b['cuda_kernels']:.3f} |" if b else "")
    if results.get("recorder"):
        lines += ["", "Generation-time entropy recorder, per decoding step: " + ", ".join(
            f"{r['per_decode_step_ms']:.3f} ms at {r['rows']} rows" for r in results["recorder"])]
    if results.get("accuracy"):
        acc = results["accuracy"]
        lines += ["", f"Entropy accuracy ({acc['rows']} x {acc['completion']} tokens): fused bf16 head vs float64, max abs "
                  f"error {acc['max_abs_error']:.2e} nats (mean {acc['mean_abs_error']:.2e}); kept tokens that change "
                  f"{100 * acc['kept_changed_share']:.2f}%."]
    e2e = [r for r in results.get("e2e", []) if r.get("model") == e2e_model(results["model"])]
    if e2e:
        lines += ["", f"End to end, {e2e_model(results['model'])}:", "", "| generation option | prompt tokens | rows x tokens | generation | scoring | update | full step "
                  "| first step | entropy source |", "|---|---|---|---|---|---|---|---|---|"]
        for r in e2e:
            if "error" in r:
                lines.append(f"| {r['option']}{mark(r)} | - | - | failed: {r['error'].splitlines()[0][:70]} | | | | | |")
                continue
            prompt = "{}-{}".format(*r["prompt_tokens"]) if "prompt_tokens" in r else "128"
            first = f"{r['first_step_s']:.1f} s" if "first_step_s" in r else "-"
            profiled = " *" if "update_profile" in r else ""
            lines.append(f"| {r['option']}{profiled}{mark(r)} | {prompt} | {r['rows']} x {r['completion']} | {r['generation_s']:.2f} s | "
                         f"{r['scoring_s']:.2f} s | {r['update_s']:.2f} s | {r['total_s']:.2f} s | {first} | "
                         f"{r['entropy_source']} |")
        if any("update_profile" in r for r in e2e):
            lines.append("\n\\* the last step's update ran under the torch profiler (it is in the median).")
        shares = [f"{r['option']} {100 * r['generation_vs_forward']['kept_changed_share']:.2f}%"
                  for r in e2e if "generation_vs_forward" in r]
        if shares:
            lines.append("\nKept tokens that change when ranking by the entropy recorded while generating instead of "
                         "the training forward's: " + ", ".join(shares) + ".")
    if results.get("generation"):
        first = next((r for r in results["generation"] if "rows" in r), {"rows": 8, "new_tokens": 256})
        lines += ["", f"| generation alone ({first['rows']} rows x {first['new_tokens']} new tokens) | time | per "
                  "token step | CUDA kernels per step "
                  "| GPU busy per step | wall per step under the profiler |", "|---|---|---|---|---|---|"]
        for r in results["generation"]:
            if "error" in r:
                lines.append(f"| {r['option']} | failed: {r['error'][:80]} | | | | |")
                continue
            prof = ([f"{r['cuda_kernels_per_token_step']:.0f}", f"{r['gpu_busy_ms_per_token_step']:.1f} ms"]
                    if "cuda_kernels_per_token_step" in r else ["-", "-"])
            wall = f"{r['profiled_wall_ms_per_token_step']:.1f} ms" if "profiled_wall_ms_per_token_step" in r else "-"
            if "seconds" in r:
                lines.append(f"| {r['option']}{mark(r)} | {r['seconds']:.2f} s | {r['ms_per_token_step']:.1f} ms | "
                             f"{prof[0]} | {prof[1]} | {wall} |")
            else:
                lines.append(f"| {r['option']} | | | {prof[0]} | {prof[1]} | {wall} |")
    lines += [f"\n(note {i}) {r['option']}: {r['note']}" for i, r in enumerate(annotated, 1)]
    lines += [f"\n{note}" for note in results.get("notes", [])]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
