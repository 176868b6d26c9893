"""GMTSConfig: `GRPOConfig` plus the token-selection fields, and the checks that refuse, with the reason, every setting
where selection would be silently wrong or meaningless (`check_selection_config`: run when the config is built, and
again by GMTSTrainer). The trainer is gmts_trainer.py, which re-exports GMTSConfig; the speed options are
FastGMTSConfig's (fast_config.py).

What is refused, and why:
- for the rules that rank with omega (Rule.needs_omega: GMTS and the control entropy_nonzero_omega): per-answer length
  normalizations (grpo, sapo, luspo: omega has no 1/length factor; ETS is exact there, TRL multiplies each token's
  loss by the mask), non-clipped losses and off_policy_mask_threshold (a live-policy factor omega does not model);
- for every scored rule: importance_sampling_level="sequence" (GSPO: the sequence ratio carries every token's
  log-prob, so a dropped token would still get gradient through it) and TRL's own top_entropy_quantile < 1;
- token_selection="all" with top_entropy_quantile < 1 (plain GRPO would quietly train on TRL's entropy selection);
- in "batch" and "group" scope, loss_type="bnpo" for the omega rules and a generation batch spanning several
  optimizer steps (`check_selection_span`);
- a sampler or clip range that leaves nothing honest to select from (`check_sampling_and_clipping`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from gmts_recipe.value_checks import check_values, field_docs
from selection import RULES

SELECTION_SCOPES = ("batch", "microbatch", "group")
SELECTION_NORMALIZERS = ("all_tokens", "kept_tokens")
PER_SEQUENCE_LOSSES = ("grpo", "sapo", "luspo")  # divide each answer by its own length: omega lacks that factor
PPO_CLIP_LOSSES = ("dapo", "bnpo", "dr_grpo")  # where omega = A r 1[unclipped] (+ KL) is the gradient coefficient


@dataclass
class GMTSConfig(GRPOConfig):
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

    def __post_init__(self):
        check_generation_counts(self)  # before GRPOConfig's own arithmetic with them (num_generations 0: % by zero)
        check_values(self)  # nan, inf, a negative, a string for a bool: before anything computes with them
        super().__post_init__()
        check_selection_config(self)


SELECTION_FIELDS = [f for f in dataclasses.fields(GMTSConfig) if f.name in GMTSConfig.__annotations__]
GMTSConfig.__doc__ = (
    "`GRPOConfig` plus the token-selection fields (defaults: GMTS, 20% of tokens, one threshold per batch). The speed "
    "options, which change how a run executes and never the rule that keeps tokens, are FastGMTSConfig's "
    "(gmts_recipe/fast_config.py).\n\nSelection fields:\n" + field_docs(GMTSConfig, SELECTION_FIELDS))


def check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """One line naming the field, its value and what it takes, for a field of named choices."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(str, allowed))}")


def check_selection_config(args: GMTSConfig) -> None:
    """Refuse, with a reason, every configuration where selection would be silently wrong or meaningless."""
    check_choice("token_selection", args.token_selection, tuple(RULES))
    check_choice("selection_scope", args.selection_scope, SELECTION_SCOPES)
    check_choice("selection_normalizer", args.selection_normalizer, SELECTION_NORMALIZERS)
    r = args.selection_ratio
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 < r <= 1.0:
        raise ValueError(f"selection_ratio={r!r} must be in (0, 1]: it is the ratio of kept tokens")
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


def check_served(config: Any, served: type, trainer: str) -> None:
    """Refuse args that are not a `served` config (the trainer's config class; TRL would build a GRPOConfig itself),
    or that set a field `served` does not declare: a subclass's field (FastGMTSConfig's speed options) that `trainer`
    would not run, rather than train without it."""
    if not isinstance(config, served):
        raise TypeError(f"{trainer} needs args={served.__name__}(...), got {type(config).__name__}")
    declared = {f.name for f in dataclasses.fields(served)}
    unserved = [f.name for f in dataclasses.fields(config) if f.name not in declared and getattr(config, f.name) != (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)]
    if unserved:
        raise TypeError(f"{trainer} does not run {', '.join(unserved)} ({type(config).__name__}'s); use the trainer "
                        f"of that config")


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


