"""Evaluation decoding with one speed option off and on, on real GSM8K prompts.

One fast evaluation batch (`eval.generate_samples`, fast=True: merged adapter, static cache, compiled decoding on a
GPU) of --rows samples, timed after a warm-up call that pays the compilation, with the option off and then on. Same
seed for both: the share of identical completions says how far the option moved the samples.

- `--option grouped_attention`: transformers' `sdpa` (which repeats the key/value cache for every query head at every
  step) against `attention.grouped_sdpa_forward`; other bf16 rounding, so some samples move.
- `--option deferred_stop`: the all-rows-finished flag read every step against one step late
  (`decoding.deferred_stop_check`), both with grouped attention; the same tokens are expected.
- `--option decode_kernel`: grouped attention's folded call through PyTorch's fused kernel against two matrix
  products (`generation_decode_kernel: matmul`, attention.py: transformers' eager formulation), both with deferred
  stop; other bf16 rounding, so some samples move.
- `--option decode_loop`: transformers' `generate` (only the forward compiled, one CUDA graph per token, Python
  around it) against `decode_loop.sample` (the whole token step, forward + sampling + bookkeeping, as one compiled
  graph), both with grouped attention, deferred stop and the matmul decode kernel. Other random numbers, so few
  identical samples are expected: each row's pass@1 on the same prompts is the check that the loop samples soundly.
- `--option decode_loop_autotune`: `decode_loop.sample` compiled with mode "reduce-overhead" against "max-autotune"
  (inductor also times Triton GEMM templates against cuBLAS for the step's small-batch matrix products; its first call
  takes minutes), same options as decode_loop's "on" row. Other GEMM kernels, other rounding.
- `--option shared_prefill` (with `--k` > 1): `decode_loop.sample` with a prefill per row against one per prompt
  copied to its k rows (`rows_per_prompt`, what generate_samples passes when its batches hold whole groups), same
  options as decode_loop's "on" row.
- `--option compile_regions`: `decode_loop.sample` with the 28 decoder layers unrolled in the compiled step against
  each compiled once as a nested compile region (`compile_regions`, generation_compile_regions), same options as
  decode_loop's "on" row: the per-token speed of each, and each row's first call (`first_s`, its compilation). The
  second row's first call can reuse Triton kernels the first row built in the same process (same inductor cache), so
  the cold cost of the switch is a complete run's (bench/complete_run.py ... --generation_compile_regions true on a
  fresh TORCHINDUCTOR_CACHE_DIR, against the committed cold run without it; bench/README.md says the command).
- `--option fused_projections`: `decode_loop.sample` with each layer's q/k/v and gate/up projections as separate
  matrix products against one product per group (`fused_projections`, generation_fused_projections: 4 products per
  layer and token step instead of 7), same options as decode_loop's "on" row. Not run on a GPU yet.

`--k`: samples per prompt, --rows / k prompts (the evaluation's layout: k=4); with k > 1 the decode_loop option's
compiled-step row shares each prompt's prefill.

Every row records its pass@1 (GSM8K's scorer, `eval.score_samples`) on the prompts it decoded.

    python bench/decode_options.py --model smollm2-135m-instruct --gsm8k_path DIR --out bench/grouped-attention-h200.json
    python bench/decode_options.py --option deferred_stop --model qwen2.5-coder-1.5b-instruct --gsm8k_path DIR \
        --out bench/deferred-stop-h200.json
    python bench/decode_options.py --option decode_loop --model qwen2.5-coder-1.5b-instruct --gsm8k_path DIR \
        --rows 64 --out bench/decode-loop-64-h200.json
    python bench/decode_options.py --option shared_prefill --model qwen2.5-coder-1.5b-instruct --gsm8k_path DIR \
        --rows 880 --k 4 --out bench/shared-prefill-880-h200.json
    python bench/decode_options.py --option compile_regions --model qwen2.5-coder-1.5b-instruct --gsm8k_path DIR \
        --rows 64 --out bench/compile-regions-64-h200.json
    python bench/decode_options.py --option fused_projections --model qwen2.5-coder-1.5b-instruct --gsm8k_path DIR \
        --rows 64 --out bench/fused-projections-64-h200.json
    python bench/decode_options.py --markdown bench/grouped-attention-h200.json   # its table (bench/README.md)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gmts_recipe.records import json_file  # noqa: E402


ROUNDING = "bf16 rounding moves the samples; on a CPU in float32 tests/test_attention.py finds equal logits and " \
           "identical samples"  # both attention options compute the same attention with other rounding
OPTIONS = {  # option: (column title, label off, label on, what the identical share means)
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


def table(result: dict) -> str:
    title, *_, meaning = OPTIONS[result.get("option", "grouped_attention")]
    scored = all("pass@1" in r for r in result["rows"])  # recorded since the decode_loop option
    rows = [f"| {title} | ms per token step | batch (s) |" + (" pass@1 |" if scored else ""),
            "|---|---|---|" + ("---|" if scored else "")]
    rows += [f"| {r.get('label', r.get('attention'))} | {r['ms_per_token_step']:.1f} | {r['seconds']:.2f} |"
             + (f" {r['pass@1']:.3f} |" if scored else "") for r in result["rows"]]
    return "\n".join(rows + ["", f"{result['model']}, {result['samples']} samples x {result['new_tokens']} tokens on "
                              f"{result['device']}: {result['speedup']:.2f}x. Identical completions at the same seed: "
                              f"{result['identical_completions']:.1%} ({meaning})."])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", default=None, type=json_file, help="print the table of a results file and exit")
    ap.add_argument("--option", default="grouped_attention", choices=sorted(OPTIONS))
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--gsm8k_path")
    ap.add_argument("--rows", type=int, default=880, help="samples in the batch (the Qwen evaluation's batch: 880)")
    ap.add_argument("--k", type=int, default=1, help="samples per prompt: --rows / k prompts (the evaluation's: 4)")
    ap.add_argument("--new_tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.markdown:
        print(table(json.loads(Path(args.markdown).read_text())))
        return 0
    if not args.gsm8k_path or not args.out:
        ap.error("--gsm8k_path and --out are needed to measure")
    if args.k < 1 or args.rows % args.k or (args.option == "shared_prefill" and args.k == 1):
        ap.error(f"--k {args.k}: pass a divisor of --rows {args.rows} (> 1 for --option shared_prefill)")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gmts_recipe.generation import decode_loop
    from gmts_recipe.data import load_gsm8k, to_prompt
    from eval import generate_samples, score_samples
    from gmts_recipe.models import resolve_model
    from gmts_recipe.stats import pass_at_1

    device = "cuda" if torch.cuda.is_available() else "cpu"
    path = resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model = model.to(device)
    tasks = load_gsm8k(args.gsm8k_path)["test"][: args.rows // args.k]
    prompts = [to_prompt(t["question"]) for t in tasks]
    cfg = model.config
    out = {"model": args.model, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
           "samples": len(prompts) * args.k, "k": args.k, "new_tokens": args.new_tokens,
           "query_heads": cfg.num_attention_heads, "key_value_heads": cfg.num_key_value_heads,
           "layers": cfg.num_hidden_layers, "option": args.option, "rows": []}
    title, *labels, _ = OPTIONS[args.option]
    texts = {}
    shared = decode_loop.sample_with_config  # what generate_samples calls: rows_per_prompt=k for whole groups
    per_row = lambda *a, rows_per_prompt=1, **kw: shared(*a, **kw)  # noqa: E731
    for on in (False, True):
        if args.option == "grouped_attention":
            options = {"grouped_attention": on}
        elif args.option == "deferred_stop":
            options = {"grouped_attention": True, "deferred_stop": on}
        elif args.option == "decode_kernel":
            options = {"grouped_attention": True, "deferred_stop": True, "decode_kernel": "matmul" if on else "sdpa"}
        elif args.option == "decode_loop":
            options = {"grouped_attention": True, "deferred_stop": True, "decode_kernel": "matmul",
                       "decode_loop": "compiled_step" if on else "transformers"}
        else:
            options = {"grouped_attention": True, "deferred_stop": True, "decode_kernel": "matmul",
                       "decode_loop": "compiled_step"}
            if args.option == "shared_prefill":
                decode_loop.sample_with_config = shared if on else per_row
            elif args.option == "compile_regions":
                options["compile_regions"] = on
            elif args.option == "fused_projections":
                options["fused_projections"] = on
            else:
                decode_loop.COMPILE_MODE = labels[on]  # the compiled step is cached per mode: each compiles once
        run = lambda: generate_samples(model, tok, prompts, k=args.k, seed=0,  # noqa: E731
                                       max_new_tokens=args.new_tokens, batch_size=out["samples"], progress=False,
                                       fast=True, **options)
        t0 = time.perf_counter()
        run()  # compiles
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.reps):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            texts[on] = run()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        row = {"label": labels[on], "options": options, "first_s": first, "seconds": min(times),
               "times_s": times, "ms_per_token_step": 1000 * min(times) / args.new_tokens,
               "pass@1": pass_at_1(score_samples(texts[on], tasks))}
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
    same = sum(a == b for x, y in zip(texts[False], texts[True]) for a, b in zip(x, y))
    out["identical_completions"] = same / out["samples"]
    out["speedup"] = out["rows"][0]["seconds"] / out["rows"][1]["seconds"]
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"speedup {out['speedup']:.2f}x, identical completions {out['identical_completions']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
