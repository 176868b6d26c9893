"""SpeedOptions: how generation and the update are executed, never the rule by which GMTS selects tokens (an option
that rounds the entropy otherwise can trade two tokens whose scores lie within that rounding at the threshold, as the
entropy source does: fast_trainer.py's docstring). FastGMTSConfig (fast_config.py) inherits them with GMTSConfig's
selection fields; evaluation takes the same object (eval.generate_samples, evaluate_pass_at_1).

Each field's metadata says where it counts, so the lists the recipe needs are derived here, not kept by hand:
- "hashed": False for a field that computes the same thing (same tokens, the same distribution, or other rounding):
  left out of the config hash (`unhashed_fields`) and recorded with each arm instead (`recorded_per_arm`). A field
  that changes which random numbers are drawn (sampling_noise) is hashed. counter_noise_version changes them too
  (with sampling_noise "counter"), but a config does not set it (its default is the current scheme): it is recorded
  with each arm, where runs of either version say which they ran.
- "evaluation": the recipe's evaluation runs with it too (`evaluation_options`).
- "eval_record": the key under which the base evaluation's record holds it, when it changes which samples an
  evaluation draws; present only away from its default, so records made before the field existed keep their key
  (`eval_record_entries`).

No torch here: recipe.py derives its lists at import, before the libraries load.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gmts_recipe.value_checks import field_docs

DECODE_LOOPS = ("transformers", "compiled_step")  # transformers' generate, or decode_loop.sample (eval.py, the trainer)
# Where a generation's sampling noise comes from: "stream", torch's generator; "counter", a function of (seed, stream,
# row, column, token) (decode_loop.noise_keys, decode_loop.counter_noise).
SAMPLING_NOISES = ("stream", "counter")
# How "counter" noise keys each of the trainer's generations (generation/noise.py): 1, stream arithmetic; 2, a hash of
# the whole (seed, training or evaluation, step, generation) tuple; 3, version 2 with 64-bit row keys. The last is the
# default for new runs.
NOISE_KEY_VERSIONS = (1, 2, 3)
DECODE_KERNELS = ("sdpa", "matmul")  # attention.KERNELS' names: the folded decoding call's formulation


class _Metadata(dict):
    """A field's metadata. transformers' HfArgumentParser hands a copy of it to argparse's add_argument, which takes
    "help" and "choices" and refuses any other key: `copy` (what the parser calls, through dataclasses' read-only
    view) keeps only those, and this module reads the rest from the field itself."""

    ARGPARSE_KEYS = ("help", "choices")

    def copy(self) -> dict[str, Any]:
        return {k: v for k, v in self.items() if k in self.ARGPARSE_KEYS}


def _option(default: Any, help: str, hashed: bool = False, evaluation: bool = False, eval_record: str | None = None,
            choices: tuple | None = None) -> Any:
    metadata = _Metadata(help=help, hashed=hashed, evaluation=evaluation)
    if eval_record is not None:
        metadata["eval_record"] = eval_record
    if choices is not None:
        metadata["choices"] = list(choices)
    return field(default=default, metadata=metadata)


@dataclass
class SpeedOptions:
    generation_merge_adapter: bool = _option(
        False, "Fold the LoRA adapter into the weights while generating (the exact base weights are restored after): "
               "fewer kernels per decoding step, as the adapter's products are gone; add generation_compile for CUDA "
               "graphs. Costs a copy of the adapted weights in memory. Not for DeepSpeed ZeRO-3 or FSDP.")
    generation_compile: bool = _option(
        False, "Decode with transformers' compiled path: static KV cache, torch.compile and CUDA graphs (TRL turns it "
               "off), so each token step is one graph replay instead of many kernel launches. The first step pays the "
               "compilation, and again when prompts outgrow the cache's 256-token bucket. GPU only; not with vLLM or "
               "continuous batching. Best with generation_merge_adapter.")
    generation_grouped_attention: bool = _option(
        False, "Decode with grouped-query attention that does not copy the key/value cache once per query head at "
               "every step (attention.py; same computation as sdpa). For models with fewer key/value than query heads "
               "(Qwen2.5: 2 and 12); a no-op otherwise. Also used by the recipe's fast evaluation.", evaluation=True)
    generation_deferred_stop: bool = _option(
        False, "On CUDA, read transformers' all-rows-finished flag one step late instead of waiting for the GPU at "
               "every token (decoding.py; transformers' DeferredStopCheck, which it enables on mps only). Same tokens; "
               "when every row stops before the limit, the cut extra step advances the random stream for the next "
               "call. Also used by the recipe's fast evaluation.", evaluation=True, eval_record="deferred_stop")
    generation_decode_kernel: str = _option(
        "sdpa", "With generation_grouped_attention: the folded decoding call through PyTorch's fused kernel ('sdpa') "
                "or as transformers' eager attention computes it, two batched matrix products ('matmul': reads the "
                "cache at full bandwidth where the fused kernel, made for long queries, does not; attention.py). Same "
                "attention, other bf16 rounding. Also used by the recipe's fast evaluation.", evaluation=True,
        choices=DECODE_KERNELS)
    generation_decode_loop: str = _option(
        "transformers", "'transformers': TRL's call of transformers' generate. 'compiled_step': decode_loop.sample, "
                        "the whole token step (one-token forward, sampling, bookkeeping, the entropy for selection) as "
                        "one torch.compile graph, a CUDA-graph replay per token on a GPU (eager on a CPU), so the host "
                        "never waits between tokens. Samples softmax(logits / T) only: other sampling settings are "
                        "refused. Same distribution, other random numbers on CUDA than generate's. Also used by the "
                        "recipe's fast evaluation.", evaluation=True, eval_record="decode_loop", choices=DECODE_LOOPS)
    generation_compile_regions: bool = _option(
        False, "With generation_decode_loop compiled_step: compile the step's decoder layers once as nested compile "
               "regions (decode_loop.layer_regions) instead of as one unrolled copy per layer: less inductor work per "
               "compilation, but one compilation per number of rows (the evaluation's and the training step's) where "
               "the unrolled step compiles once. Same computation, maybe other rounding (no fusion across layers). "
               "Also used by the recipe's fast evaluation.", evaluation=True)
    generation_fused_projections: bool = _option(
        False, "With generation_decode_loop compiled_step: while generating, each decoder layer's q/k/v projections "
               "run as one matrix product over their concatenated weights and biases, gate/up as one "
               "(gmts_recipe/generation/fused.py): 4 products per layer and token step instead of 7, for small-batch "
               "decoding where each product costs its latency. Restored after every generation call. For "
               "Qwen2/Llama-family attention and MLP modules (others refused); with a LoRA adapter it needs "
               "generation_merge_adapter. Keeps a copy of those weights for the CUDA graph's fixed addresses. Same "
               "numbers on a CPU, maybe other bf16 rounding on a GPU. Also used by the recipe's fast evaluation.",
        evaluation=True)
    sampling_noise: str = _option(
        "stream", "Where the rollouts' sampling noise comes from. 'stream': torch's generator, as TRL and transformers "
                  "draw (each draw depends on every draw before it in the process). 'counter': a function of (seed, "
                  "step, generation) only, a generation being one of the step's generate calls, training's or an "
                  "evaluation's, each with its own noise: in the compiled step (generation_decode_loop compiled_step) "
                  "a hash of (seed, generation, rollout, position, token) (decode_loop.counter_noise), with "
                  "transformers' generate the generator reseeded from (seed, generation) for the call. Each arm's "
                  "rollouts stay exact samples of its own policy; arms of one seed draw the same numbers at every step (identical rollouts while their weights "
                  "are equal), which couples them and makes a run repeat whatever ran before it in the process. Also "
                  "used by the recipe's evaluation.", hashed=True, evaluation=True, eval_record="sampling_noise",
        choices=SAMPLING_NOISES)
    counter_noise_version: int = _option(
        NOISE_KEY_VERSIONS[-1],
        "How sampling_noise 'counter' keys each of the trainer's generations (gmts_recipe/generation/noise.py): 3, "
        "version 2 with a 64-bit key per rollout (with 32 bits, about 10 of 300,000 rollouts share a key, hence "
        "their noise); 2, a 64-bit hash of (seed, training or evaluation, step, generation), so no two generations "
        "share a stream; 1, the step's stream XOR the generation's index shifted by 24 bits, under which an "
        "evaluation during training reaches a training generation's stream from its 193rd generation on. 1 and 2 "
        "repeat the runs made with them. Each arm records the version it ran (an arm that records none ran 1). The "
        "recipe's own evaluation (eval.py) keys its samples alike under all three.", choices=NOISE_KEY_VERSIONS)
    lora_autocast_inputs: bool = _option(
        True, "Under bf16/fp16 autocast, skip PEFT's copy of each LoRA layer's input to the adapter's float32, which "
              "autocast then copies back (two elementwise copies per LoRA layer in the forward, the checkpoint "
              "recompute and the backward). Same numbers: bf16 -> float32 -> bf16 is exact. Engages only with autocast "
              "and plain LoRA Linear layers without dropout (training_speed.lora_autocast_blockers); false: PEFT's "
              "cast, for comparison.")
    training_compile: bool = _option(
        False, "Run the training forward and backward through the decoder layers compiled with torch.compile (one "
               "compiled forward for every layer: regional compilation), so the elementwise work between the matrix "
               "products is fused. Generation and the no-grad scoring passes keep the layers' own forwards. Other "
               "rounding in the update; the first step pays the compilation; later steps reuse it.")
    deterministic_kernels: bool = _option(
        False, "PyTorch's deterministic algorithms (gmts_recipe/determinism.py): CUBLAS_WORKSPACE_CONFIG=:4096:8 "
               "before the first CUDA work, torch.use_deterministic_algorithms with warn_only (each op without a "
               "deterministic implementation named once, on one line), and the training step strict, so the fused "
               "attention backward does not accumulate over key splits with atomics: the update then does not depend "
               "on how the GPU schedules blocks (two runs at once on one GPU). Other rounding than without it, and "
               "slower (bench/determinism.py).")

    @classmethod
    def of(cls, config: Any) -> SpeedOptions:
        """The speed options of any object that has these fields (a FastGMTSConfig), as a SpeedOptions of its own."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})


SpeedOptions.__doc__ = ("How generation and the update are executed: same tokens, the same distribution, or other "
                        "rounding; never the rule that selects tokens (other rounding of the entropy can trade two "
                        "tokens whose scores lie within it at the threshold). The fields:\n\n"
                        + field_docs(SpeedOptions))


def unhashed_fields() -> frozenset[str]:
    """The speed fields left out of the config hash: they change how a run executes, not what it computes."""
    return frozenset(f.name for f in dataclasses.fields(SpeedOptions) if not f.metadata["hashed"])


def recorded_per_arm() -> tuple[str, ...]:
    """The speed fields each arm records with its results (how it was executed): the unhashed ones."""
    return tuple(f.name for f in dataclasses.fields(SpeedOptions) if not f.metadata["hashed"])


def evaluation_options(config: Any) -> SpeedOptions:
    """The options the recipe's evaluation runs with: `config`'s values of the fields marked "evaluation", every
    other field at its default (evaluation never trains, and eval_fast decides its merged and compiled decoding)."""
    return SpeedOptions(**{f.name: getattr(config, f.name) for f in dataclasses.fields(SpeedOptions)
                           if f.metadata["evaluation"]})


def eval_record_entries(config: Any) -> dict[str, Any]:
    """What of `config`'s speed options decides which samples an evaluation draws, for the base evaluation's record:
    each "eval_record" field away from its default, under its record key."""
    out = {}
    for f in dataclasses.fields(SpeedOptions):
        key = f.metadata.get("eval_record")
        value = getattr(config, f.name, f.default)
        if key is not None and value != f.default:
            out[key] = value
    return out


def recorded_noise_version(options: dict) -> int:
    """The counter_noise_version an arm ran with, from its recorded generation_options: the value it records, else 1
    (an arm records the field since version 2 exists; before, version 1 was the only scheme)."""
    return options.get("counter_noise_version", 1)


# The execution options that act only on a CUDA device: on a CPU they change nothing, so a CPU run records them off.
# cudnn_attention is RecipeArgs' (cuDNN is CUDA's); lora_autocast_inputs engages only under autocast, which a CPU run
# (float32: recipe_config's CPU overrides) never has.
CUDA_ONLY = ("generation_compile", "generation_deferred_stop", "generation_compile_regions", "cudnn_attention",
             "lora_autocast_inputs")
EAGER_STEP = "compiled_step (eager)"  # generation_decode_loop compiled_step on a CPU: decode_loop.sample, not compiled


def options_that_ran(options: dict[str, Any], device_type: str) -> dict[str, Any]:
    """The execution options as they ran on `device_type` ("cuda" or "cpu"), for an arm's or an evaluation's
    provenance: the config's values on a GPU; on a CPU the CUDA-only ones (CUDA_ONLY) off and compiled_step marked
    eager (it runs decode_loop.sample without torch.compile), so a CPU run's provenance does not claim compiled
    decoding or cuDNN it never had. The config's values stay in the arm's generation_options."""
    if device_type == "cuda":
        return dict(options)
    ran = {k: (False if k in CUDA_ONLY and v else v) for k, v in options.items()}
    if ran.get("generation_decode_loop") == "compiled_step":
        ran["generation_decode_loop"] = EAGER_STEP
    return ran
