"""FastGMTSConfig: GMTSConfig plus the speed options (speed_options.SpeedOptions), which change how a run generates
and updates, never the rule that keeps tokens, and `selection_entropy_source` (the same entropy in other rounding,
which can trade a token at the threshold: fast_trainer.py's docstring); and the checks that refuse a speed option
where it cannot serve (`check_fast_config`: run when the config is built, and again by FastGMTSTrainer;
`check_decode_loop_generation`, which needs the model: by FastGMTSTrainer). The trainer is fast_trainer.py's
FastGMTSTrainer, which recipe.py builds; the method's own config and refusals are config.py's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig

from gmts_recipe.config import SELECTION_FIELDS, GMTSConfig, check_choice, check_selection_config
from gmts_recipe.value_checks import field_docs
from gmts_recipe.generation.attention import KERNELS
from gmts_recipe.generation.decode_loop import check_supported, check_supported_config, resolved_generation_config
from gmts_recipe.speed_options import DECODE_LOOPS, NOISE_KEY_VERSIONS, SAMPLING_NOISES, SpeedOptions

ENTROPY_SOURCES = ("auto", "scoring_pass")


@dataclass
class FastGMTSConfig(SpeedOptions, GMTSConfig):
    # the docstring, with every field's help text, is built below from the fields' metadata

    selection_entropy_source: str = field(
        default="auto",
        metadata={"help": "'auto': entropy recorded while generating when exact, else from a scoring pass; "
                          "'scoring_pass': always a fused no-grad pass, GMTSTrainer's (for benchmarks). The same "
                          "entropy in other rounding: where two tokens' scores lie within it at the threshold they "
                          "trade places (2 of 24 tiny float32 batches, one token each: tests/test_entropy_sources.py); "
                          "'scoring_pass' keeps GMTSTrainer's tokens bit for bit.",
                  "choices": list(ENTROPY_SOURCES)},
    )

    def __post_init__(self):
        super().__post_init__()
        check_speed_options(self)


FastGMTSConfig.__doc__ = (
    "GMTSConfig (`GRPOConfig` plus the token-selection fields), the speed options (gmts_recipe/speed_options.py) "
    "and where the selection's entropy comes from: they change how a run executes, never the rule that keeps tokens "
    "(the same score, tie-break and count); other rounding of the entropy can trade two tokens whose scores lie "
    "within it at the threshold (selection_entropy_source)."
    "\n\nSelection fields:\n"
    + field_docs(FastGMTSConfig, [*SELECTION_FIELDS, *(f for f in dataclasses.fields(FastGMTSConfig)
                                                       if f.name in FastGMTSConfig.__annotations__)])
    + "\n\nSpeed options:\n" + field_docs(SpeedOptions))


def check_fast_config(args: FastGMTSConfig) -> None:
    """The method's refusals (config.check_selection_config), then the speed options' (`check_speed_options`)."""
    check_selection_config(args)
    check_speed_options(args)


def check_speed_options(args: FastGMTSConfig) -> None:
    """Refuse a speed option's value that is not one it takes, or a setting it cannot serve."""
    check_choice("selection_entropy_source", args.selection_entropy_source, ENTROPY_SOURCES)
    check_choice("generation_decode_kernel", args.generation_decode_kernel, tuple(KERNELS))
    check_choice("generation_decode_loop", args.generation_decode_loop, DECODE_LOOPS)
    check_choice("sampling_noise", args.sampling_noise, SAMPLING_NOISES)
    check_choice("counter_noise_version", args.counter_noise_version, NOISE_KEY_VERSIONS)
    check_generation_config(args)


def check_generation_config(args: FastGMTSConfig) -> None:
    """The generation options apply to transformers' `generate`, the path TRL takes without vLLM or batching."""
    if args.generation_compile_regions and args.generation_decode_loop != "compiled_step":
        raise ValueError("generation_compile_regions (on in configs/paper.yaml) compiles the decoder layers of "
                         "decode_loop's compiled step: with generation_decode_loop="
                         f"'{args.generation_decode_loop}' also pass --generation_compile_regions false, or keep "
                         "generation_decode_loop='compiled_step'.")
    if args.generation_fused_projections and args.generation_decode_loop != "compiled_step":
        raise ValueError("generation_fused_projections fuses the projections inside decode_loop's compiled step: "
                         f"with generation_decode_loop='{args.generation_decode_loop}' also pass "
                         "--generation_fused_projections false, or set generation_decode_loop='compiled_step'.")
    if args.sampling_noise == "counter" and (args.use_vllm or args.use_transformers_continuous_batching):
        other = "use_vllm" if args.use_vllm else "use_transformers_continuous_batching"
        raise ValueError(f"sampling_noise='counter' sets the noise of transformers' generate or the compiled step, "
                         f"which {other}=True does not use; drop one of them.")
    if args.generation_decode_loop == "compiled_step":
        if args.use_vllm or args.use_transformers_continuous_batching:
            other = "use_vllm" if args.use_vllm else "use_transformers_continuous_batching"
            raise ValueError(f"generation_decode_loop='compiled_step' replaces transformers' generate, which "
                             f"{other}=True does not use; drop one of them.")
        check_decode_loop_sampling(args.temperature, args.top_k, args.top_p, args.min_p, args.repetition_penalty)
    if args.generation_compile:
        other = "use_vllm" if args.use_vllm else (
            "use_transformers_continuous_batching" if args.use_transformers_continuous_batching else None)
        if other:
            raise ValueError(f"generation_compile compiles transformers' generate, which {other}=True does not use; "
                             f"drop one of them.")
        if isinstance(args.pad_to_multiple_of, int) and args.pad_to_multiple_of > 1:
            raise ValueError(f"generation_compile with pad_to_multiple_of={args.pad_to_multiple_of}: sampling met "
                             f"NaN probabilities on an H200 (bench/results-h200.json, merged_compiled_pad64); "
                             f"drop one of them.")
        cache = (args.generation_kwargs or {}).get("cache_implementation", args.cache_implementation)
        if cache not in (None, "static"):
            raise ValueError(f"generation_compile needs a static KV cache; cache_implementation={cache!r} is not one.")


def check_decode_loop_sampling(temperature: float, top_k, top_p, min_p, repetition_penalty) -> None:
    """decode_loop.check_supported, its one-line refusal naming this trainer's option."""
    try:
        check_supported(temperature, "exponential", top_k, top_p, min_p, repetition_penalty)
    except ValueError as err:
        raise ValueError(f"generation_decode_loop='compiled_step': {err}") from None


def check_decode_loop_generation(model: torch.nn.Module, config: GenerationConfig, temperature: float) -> None:
    """Refuse generation_decode_loop='compiled_step' where the settings transformers' generate would use (TRL's
    config with generation_kwargs, completed from the checkpoint's generation_config and transformers' defaults:
    decode_loop.resolved_generation_config) hold one the loop would drop (decode_loop.check_supported_config, the
    check sample_with_config repeats at every call), or a temperature other than the training's: the entropy the
    loop computes while sampling is the one selection ranks by."""
    resolved = resolved_generation_config(model, config)
    sampled = 1.0 if resolved.temperature is None else resolved.temperature
    if sampled != temperature:
        raise ValueError(f"generation_decode_loop='compiled_step' would sample at temperature {sampled} "
                         f"(generation_kwargs or the model's generation_config), not the training's {temperature}; "
                         f"unset it or use generation_decode_loop='transformers'.")
    try:
        check_supported_config(resolved)
    except ValueError as err:
        raise ValueError(f"generation_decode_loop='compiled_step' (generation_kwargs or the model's "
                         f"generation_config): {err}") from None
