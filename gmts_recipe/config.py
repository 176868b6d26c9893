"""GMTSConfig: `GRPOConfig` plus the token-selection fields and the speed options (speed_options.py), and the checks that refuse, with the
reason, every setting where selection would be silently wrong or meaningless (`check_selection_config`: run when the
config is built, and again by GMTSTrainer; `check_decode_loop_generation`, which needs the model: by GMTSTrainer).
The trainer is gmts_trainer.py, which re-exports GMTSConfig.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import GenerationConfig
from trl import GRPOConfig

from gmts_recipe.generation.attention import KERNELS
from gmts_recipe.generation.decode_loop import check_supported, check_supported_config, resolved_generation_config
from gmts_recipe.speed_options import DECODE_LOOPS, SAMPLING_NOISES, SpeedOptions, field_docs
from gmts_recipe.value_checks import check_values
from selection import RULES

SELECTION_SCOPES = ("batch", "microbatch", "group")
SELECTION_NORMALIZERS = ("all_tokens", "kept_tokens")
ENTROPY_SOURCES = ("auto", "scoring_pass")
PER_SEQUENCE_LOSSES = ("grpo", "sapo", "luspo")  # divide each answer by its own length: omega lacks that factor
PPO_CLIP_LOSSES = ("dapo", "bnpo", "dr_grpo")  # where omega = A r 1[unclipped] (+ KL) is the gradient coefficient


@dataclass
class GMTSConfig(SpeedOptions, GRPOConfig):
    # the docstring, with every field's help text, is built below from the fields' metadata

    token_selection: str = field(
        default="gmts",
        metadata={"help": "Which tokens train, a rule of selection.RULES: 'all' (plain GRPO), 'entropy' (ETS: top "
                          "entropy), 'gmts' (top |entropy x omega|) or 'entropy_nonzero_omega' (a control: ETS with "
                          "every omega != 0 token ranked before every omega == 0 one, same kept count)."},
    )
    selection_ratio: float = field(
        default=0.2, metadata={"help": "Ratio of kept tokens, in (0, 1]: exactly ceil(ratio x valid tokens) are kept."}
    )
    selection_scope: str = field(
        default="batch",
        metadata={"help": "Where the threshold is taken: 'batch' (the whole generation batch, every process: the "
                          "paper), 'microbatch' (each loss microbatch, gathered over processes) or 'group' (each "
                          "prompt's group of rollouts).", "choices": list(SELECTION_SCOPES)},
    )
    selection_normalizer: str = field(
        default="all_tokens",
        metadata={"help": "Loss denominator: 'all_tokens' (TRL's, every completion token; same for every arm) or "
                          "'kept_tokens' (kept count; loss_type 'dapo' only).", "choices": list(SELECTION_NORMALIZERS)},
    )
    selection_entropy_source: str = field(
        default="auto",
        metadata={"help": "'auto': entropy recorded while generating when exact, else from a scoring pass; "
                          "'scoring_pass': always a fused no-grad pass (for benchmarks).",
                  "choices": list(ENTROPY_SOURCES)},
    )

    def __post_init__(self):
        check_generation_counts(self)  # before GRPOConfig's own arithmetic with them (num_generations 0: % by zero)
        check_values(self)  # nan, inf, a negative, a string for a bool: before anything computes with them
        super().__post_init__()
        check_selection_config(self)


_SELECTION_FIELDS = [f for f in dataclasses.fields(GMTSConfig) if f.name in GMTSConfig.__annotations__]
GMTSConfig.__doc__ = (
    "`GRPOConfig` plus the token-selection fields (defaults: GMTS, 20% of tokens, one threshold per batch) and the "
    "speed options (gmts_recipe/speed_options.py), which change how a run executes, never which tokens it keeps.\n\n"
    "Selection fields:\n" + field_docs(GMTSConfig, _SELECTION_FIELDS) + "\n\nSpeed options:\n" + field_docs(SpeedOptions))


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def check_selection_config(args: GMTSConfig) -> None:
    """Refuse, with a reason, every configuration where selection would be silently wrong or meaningless."""
    _choice("token_selection", args.token_selection, tuple(RULES))
    _choice("selection_scope", args.selection_scope, SELECTION_SCOPES)
    _choice("selection_normalizer", args.selection_normalizer, SELECTION_NORMALIZERS)
    _choice("selection_entropy_source", args.selection_entropy_source, ENTROPY_SOURCES)
    _choice("generation_decode_kernel", args.generation_decode_kernel, tuple(KERNELS))
    _choice("generation_decode_loop", args.generation_decode_loop, DECODE_LOOPS)
    _choice("sampling_noise", args.sampling_noise, SAMPLING_NOISES)
    r = args.selection_ratio
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 < r <= 1.0:
        raise ValueError(f"selection_ratio={r!r} must be in (0, 1]: it is the ratio of kept tokens")
    check_generation_config(args)
    check_sampling_and_clipping(args)
    rule = RULES[args.token_selection]
    if rule.score is None:  # plain GRPO: TRL's own entropy mask would quietly train on fewer tokens than "all"
        if args.top_entropy_quantile < 1.0:
            raise ValueError(f"token_selection={rule.name!r} trains on every token, but top_entropy_quantile="
                             f"{args.top_entropy_quantile} makes TRL keep only its top entropy share: set "
                             f"top_entropy_quantile=1.0 for plain GRPO, or token_selection='entropy' with "
                             f"selection_ratio={args.top_entropy_quantile} for ETS with an exact kept count.")
        return
    if rule.needs_omega and args.loss_type in PER_SEQUENCE_LOSSES:
        # TRL 1.16 multiplies each token's loss by the mask and divides by all of the answer's valid tokens, so a
        # rule without omega (ETS) is exact there: dropped tokens get zero gradient. Omega has no 1/length factor.
        raise ValueError(
            f"token_selection={rule.name!r} ranks by omega, which has no 1/length factor, but loss_type="
            f"{args.loss_type!r} divides each answer by its own length, so omega is not its gradient coefficient. "
            f"Use a token-level loss: 'dapo' (recommended) or 'bnpo'."
        )
    if args.importance_sampling_level != "token":
        raise ValueError(
            f"importance_sampling_level={args.importance_sampling_level!r} (GSPO) builds one ratio per answer from "
            f"every completion token's log-prob, so a dropped token still gets gradient through it (the mask only "
            f"rescales each answer's term by its kept count). Use importance_sampling_level='token'."
        )
    if rule.needs_omega and args.loss_type not in PPO_CLIP_LOSSES:
        raise ValueError(
            f"token_selection={args.token_selection!r} needs a clipped-surrogate loss ({', '.join(PPO_CLIP_LOSSES)}), "
            f"where omega = A x ratio x clip indicator; loss_type={args.loss_type!r} has a different gradient "
            f"coefficient."
        )
    if rule.needs_omega and args.off_policy_mask_threshold is not None:
        raise ValueError("off_policy_mask_threshold drops answers by the live policy's divergence from the sampler, "
                         "a factor of the gradient that omega does not model; unset it or use "
                         "token_selection='entropy'.")
    if args.top_entropy_quantile < 1.0:
        raise ValueError("Set selection_ratio, not top_entropy_quantile: both would choose tokens.")
    if args.selection_normalizer == "kept_tokens" and (args.loss_type != "dapo" or args.selection_scope == "microbatch"):
        raise ValueError("selection_normalizer='kept_tokens' needs loss_type='dapo' and a 'batch' or 'group' scope, "
                         "where the kept count is one number for the whole generation batch.")
    check_selection_span(args)


def check_generation_counts(args: GMTSConfig) -> None:
    """The counts GRPOConfig divides by, refused before it does: num_generations 0 was a ZeroDivisionError there."""
    for name in ("num_generations", "steps_per_generation", "generation_batch_size"):
        value = getattr(args, name, None)
        if value is not None and not isinstance(value, bool) and isinstance(value, int) and value < 1:
            raise ValueError(f"{name}={value}: must be a positive count")


def check_sampling_and_clipping(args: GMTSConfig) -> None:
    """Refuse a sampler or a clip range that leaves nothing honest to select from: temperature 0 is greedy decoding
    (transformers refuses it at the first generation, after the model loaded; and greedy rollouts of a group are
    identical, so every advantage is 0), and a negative epsilon or a delta at most 1 clips the ratio so that every
    positive-advantage token gets zero gradient (omega 0 for all of them)."""
    if not args.temperature > 0:
        raise ValueError(f"temperature={args.temperature}: must be > 0 (rollouts are sampled from softmax(logits / "
                         f"temperature); 0 would be greedy decoding, identical answers in every group)")
    for name in ("epsilon", "epsilon_high"):
        value = getattr(args, name, None)
        if value is not None and value < 0:
            raise ValueError(f"{name}={value}: must be >= 0 (the clip range is [1 - epsilon, 1 + epsilon_high]; a "
                             f"negative one gives every positive-advantage token zero gradient)")
    if args.delta is not None and args.delta <= 1:
        raise ValueError(f"delta={args.delta}: must be > 1 (the two-sided clip caps the ratio at delta; at 1 or "
                         f"below, every positive-advantage token of an on-policy step gets zero gradient)")


def check_selection_span(args: GMTSConfig) -> None:
    """Refuse a 'batch' or 'group' threshold that does not fit the optimizer step it feeds. With steps_per_generation
    above gradient_accumulation_steps a generation batch spans several optimizer steps, so a threshold over it can
    leave one step without a kept token (loss 0, grad norm 0, a scheduler step spent on nothing). Under loss_type
    'bnpo' each microbatch's loss is divided by its own token count, a factor omega lacks, so |entropy x omega|
    compared across microbatches is not the gradient's size ('microbatch' scope compares within one)."""
    if RULES[args.token_selection].score is None or args.selection_scope == "microbatch":
        return
    if args.steps_per_generation > args.gradient_accumulation_steps:
        raise ValueError(f"selection_scope={args.selection_scope!r} with steps_per_generation="
                         f"{args.steps_per_generation} > gradient_accumulation_steps="
                         f"{args.gradient_accumulation_steps}: the threshold spans several optimizer steps, so one "
                         f"can keep no token; use steps_per_generation = gradient_accumulation_steps or "
                         f"selection_scope='microbatch'")
    if RULES[args.token_selection].needs_omega and args.loss_type == "bnpo":
        raise ValueError(f"loss_type='bnpo' divides each microbatch by its own token count, which omega does not "
                         f"include, so selection_scope={args.selection_scope!r} ranks tokens of different "
                         f"microbatches on different scales; use loss_type='dapo' or selection_scope='microbatch'")


def omega_is_modeled(args: GMTSConfig) -> bool:
    """Whether `GMTSTrainer._omega` is TRL's gradient coefficient under these settings (the loss is a token-level
    clipped surrogate without the off-policy sequence mask). The rules that rank with omega (Rule.needs_omega) are
    refused where it is not; the other arms log the omega-based metrics only where it is."""
    return (args.loss_type in PPO_CLIP_LOSSES and args.importance_sampling_level == "token"
            and args.off_policy_mask_threshold is None)


def check_generation_config(args: GMTSConfig) -> None:
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
