"""GMTSTrainer: GRPO that trains on the top fraction of completion tokens, ranked by entropy (ETS) or |entropy x omega|
(GMTS, Lv, Zhang, Zhang, arXiv 2608.30632, eq. 4). The ranking math lives in selection.py. A control rule,
token_selection="entropy_nonzero_omega", ranks like ETS but puts every token whose omega (the same one GMTS ranks with)
is 0 after every other: the same kept count without the slots that move nothing (on-policy with beta 0, the answers of
a group with equal rewards), which separates GMTS's |advantage| weighting from its larger effective step.

This file is the trainer: what it changes in `trl.GRPOTrainer` (`GMTSTrainer`'s docstring lists it) and what it
refuses. Its config, `GMTSConfig` with the checks that refuse, is gmts_recipe/config.py (re-exported here); the speed
options, which change how it runs and never what it selects, are composed from gmts_recipe/speed.py (`SpeedMixin`).

The loss normalizer is TRL's: `loss_type="dapo"` divides the sum over kept tokens by the count of *all* completion
tokens in the generation batch (DAPO's token-level objective, which the 80/20 paper builds on). It is the same number
for every arm, so two arms differ only in which tokens they keep, and the step is ~ratio times a no-selection step. The
alternative `selection_normalizer="kept_tokens"` divides by the kept count instead (a 1/ratio larger step: a
learning-rate change in disguise, offered for ablation, refused where it would differ between arms).

Omega (`GMTSTrainer._omega`, selection.gmts_omega) is the coefficient of grad log pi_t in TRL's `_compute_loss` for a
kept token, with every term TRL puts there: the clip indicator (and `delta`'s two-sided clip), the ratio, the vLLM
importance-sampling weight, and the KL term (with `use_bias_correction_kl`, TRL's default, beta r log(pi_ref/pi)).
TRL adds the KL term after the selection mask, so with beta != 0 a dropped token still gets the KL part of the
gradient (only the policy part is selected); with beta = 0 dropped tokens get exactly zero gradient. TRL's entropy
bonus (entropy_coef), a gradient through the entropy rather than grad log pi, acts on the kept tokens only (TRL's own
mask). With loss_type="bnpo" each microbatch is divided by its own token count, a per-microbatch constant that omega,
ranked over the whole generation batch in "batch" and "group" scope, does not carry ("microbatch" scope is exact).

Refused at construction, with the reason (`check_selection_config`), where selection would be inexact or undefined:
for the rules that rank with omega (Rule.needs_omega: GMTS and the control entropy_nonzero_omega), per-answer length
normalizations (grpo, sapo, luspo: omega has no 1/length factor; ETS is exact there, TRL multiplies each token's loss
by the mask), non-clipped losses and off_policy_mask_threshold (a live-policy factor omega does not model); for every
scored rule importance_sampling_level="sequence" (GSPO: the sequence ratio carries every token's log-prob, so a
dropped token would still get gradient through it); and token_selection="all" with TRL's own top_entropy_quantile < 1
(plain GRPO would quietly train on TRL's entropy selection). The rules themselves: selection.RULES.
In "batch" and "group" scope also loss_type="bnpo" for the omega rules, and a generation batch spanning
several optimizer steps (`check_selection_span`).

Deviations from the paper: with num_iterations > 1, the batch/group-scope mask is chosen once per generation batch
with the policy that generated it (r = 1, no clip), not re-ranked at every iteration; "microbatch" scope re-ranks
every microbatch with the live ratio and clip indicator.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback
from transformers.utils import logging
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from gmts_recipe.config import GMTSConfig, check_selection_config, omega_is_modeled
from gmts_recipe.generation.fast import EntropyRecorder, drop_duplicate_input_grad_hooks
from gmts_recipe.speed import SpeedMixin, settings_off_softmax
from selection import gmts_omega, overlap_partner, rule_named, selection_stats, update_cosine

logger = logging.get_logger(__name__)

# Each rule's score, tie-break and overlap partner: selection.RULES (selection.rule_named(token_selection)).


class UpdateCosine(TrainerCallback):
    """Cosine between this optimizer step's gradient and the previous step's (trainable parameters, after accumulation
    and clipping, before the step: Trainer's `on_pre_optimizer_step`). Keeps one flat float32 copy of the gradient;
    the cosine stays on the device until `GMTSTrainer.log`. Parameters without a local .grad (DeepSpeed ZeRO) are not
    seen."""

    def __init__(self):
        self.previous: torch.Tensor | None = None
        self.pending: list[torch.Tensor] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        grads = [p.grad.detach().reshape(-1) for p in model.parameters() if p.requires_grad and p.grad is not None]
        if not grads:
            return
        current = torch.cat(grads).float()  # a copy: the optimizer step and zero_grad leave it alone
        if self.previous is not None and self.previous.numel() == current.numel():
            self.pending.append(update_cosine(self.previous, current))
        self.previous = current


class GMTSTrainer(SpeedMixin, GRPOTrainer):
    """`GRPOTrainer` that trains only on the top `selection_ratio` of completion tokens, ranked by `token_selection`:
    "gmts" (GMTS, |entropy x omega|), "entropy" (ETS, the 80/20 paper's top entropy), "entropy_nonzero_omega" (a
    control: ETS with the omega == 0 tokens ranked last) or "all" (plain GRPO, nothing dropped). `selection_scope`
    says over what the top fraction is taken ("batch": the whole generation batch on every process, the paper's;
    "group": each prompt's group; "microbatch": each loss microbatch), `selection_normalizer` what the loss divides
    by, `selection_entropy_source` where the entropy comes from. The args must be a GMTSConfig; a plain GRPOConfig is
    refused before the model loads.

    Its overrides of `trl.GRPOTrainer` (TRL 1.16), and nothing else:
    - `__init__`: refuses what `check_selection_config` refuses, turns TRL's entropy-mask hook on
      (`top_entropy_quantile = selection_ratio`) and adds the `UpdateCosine` callback.
    - `get_high_entropy_mask` (TRL's own hook in `_compute_loss`, applied as `per_token_loss * mask`): the selection.
      "batch" and "group" scopes read the mask chosen once per generation batch; "microbatch" scope ranks the
      microbatch, gathered over every process, with the live omega.
    - `_generate_and_score_completions`: after TRL has generated, scored and computed the advantages, the "batch" and
      "group" scopes choose the kept tokens of the whole generation batch, across every process, and store the mask
      in the batch as `selection_mask` (B, T); TRL's shuffle and split carry it with its rows into each microbatch.
      Their entropy comes, in order of preference, from (a) the generation itself (fast.EntropyRecorder), used only
      when every generation setting leaves softmax(logits / T) as the sampled distribution before truncation
      (`speed.settings_off_softmax`); (b) the no-grad scoring pass TRL already makes for `old_per_token_logps`, whose
      fused LM head computes entropy anyway; (c) one fused no-grad pass of our own (`scoring_pass`: vLLM without IS
      correction, continuous batching, tools, beta != 0, or `selection_entropy_source="scoring_pass"`).
    - `_compute_loss` records its `inputs` so the hook sees the advantages, and with token_selection="all" computes
      the same metrics after TRL's loss, every valid token kept; `_get_per_token_logps_and_entropies` only records
      what it returns (live log-probs and entropy for omega and the metrics, entropy in case (b)).
    - `log` turns the selection metrics, kept on the device until then, into numbers: the loss hook never waits for
      the GPU.
    The speed options (`SpeedMixin`, gmts_recipe/speed.py) add `training_step`, `_generate_single_turn` and
    `evaluate`, and wrap `_generate_and_score_completions` and `__init__`; they change how generation and the update
    run, never the selection.

    Logged every step under `selection/`: kept_fraction, overlap (with the other ranking), top_answer_share,
    effective_answers, top_answer_weight_share (the share of the kept |omega| that each group's largest-|advantage|
    answer carries), entropy_kept_mean, entropy_all_mean, and the counts behind kept_fraction (kept_tokens,
    valid_tokens); with token_selection="all" too where omega is modeled. `update/cosine_prev` (every arm): the cosine
    between successive optimizer steps' gradients.
    """

    _tag_names = ["trl", "grpo", "gmts"]

    def __init__(self, *args, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if not isinstance(config, GMTSConfig):  # refused before TRL loads the model
            raise TypeError(f"GMTSTrainer needs args=GMTSConfig(...) (GRPOConfig plus the selection fields), got "
                            f"{type(config).__name__}")
        check_selection_config(config)
        super().__init__(*args, **kwargs)
        self.selection_on = self.args.token_selection != "all"
        self.stats_on = self.selection_on or omega_is_modeled(self.args)  # plain GRPO logs the same metrics
        if self.selection_on:
            # Routes TRL's `_compute_loss` through `get_high_entropy_mask` (overridden below).
            self.top_entropy_quantile = self.args.selection_ratio
        self._loss_inputs: dict[str, Any] | None = None
        self._live_logps: torch.Tensor | None = None
        self._live_entropy: torch.Tensor | None = None
        self._capture_scoring: dict[str, torch.Tensor] | None = None
        self.entropy_source_used: str | None = None  # last source used for batch/group scope, for logs and benches
        self._pending_stats: dict[str, list[dict[str, torch.Tensor]]] = {"train": [], "eval": []}
        self._update_cosine = UpdateCosine()
        self.add_callback(self._update_cosine)

    # ------------------------------------------------------------------ which entropy source
    def _trl_makes_scoring_pass(self) -> bool:
        """Mirrors TRL's condition for computing old_per_token_logps in `_generate_and_score_completions`."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )

    def _generation_entropy_is_exact(self) -> bool:
        return (
            self.args.selection_entropy_source == "auto"
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and not self.tools
            and getattr(self, "rollout_func", None) is None
            and self.beta == 0.0  # omega's KL term needs the policy's log-probs: a scoring pass anyway
            and not settings_off_softmax(self._generation_config_used(), self.temperature)
        )

    # ------------------------------------------------------------------ hooks into TRL
    def _get_per_token_logps_and_entropies(self, model, *args, compute_entropy: bool = False, **kwargs):
        capture = self._capture_scoring is not None and not self._capture_scoring
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, *args, compute_entropy=compute_entropy or capture, **kwargs
        )
        if capture:  # TRL's own old_per_token_logps pass: keep the entropy its fused head computed anyway
            self._capture_scoring.update(logps=logps, entropy=entropies)
            entropies = entropies if compute_entropy else None
        elif self._loss_inputs is not None:  # the policy forward of `_compute_loss` (train, or eval without grad)
            self._live_logps = logps.detach()
            self._live_entropy = None if entropies is None else entropies.detach()
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        self._loss_inputs = inputs
        try:
            loss = super()._compute_loss(model, inputs)
            if self.stats_on and not self.selection_on:  # plain GRPO: every valid token trains; same metrics
                mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
                self._select_across_processes(self._live_entropy, self._live_omega(inputs).expand_as(mask), mask,
                                              inputs["advantages"], inputs.get("group_index"), group_size=None)
            return loss
        finally:
            self._loss_inputs, self._live_logps, self._live_entropy = None, None, None

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        batch_wide = self.selection_on and mode == "train" and self.args.selection_scope != "microbatch"
        self._recorder, self._capture_scoring = None, None
        if batch_wide and self._generation_entropy_is_exact():
            self._recorder = EntropyRecorder(self.temperature)
        elif batch_wide and self._trl_makes_scoring_pass():
            self._capture_scoring = {}
        try:
            output = super()._generate_and_score_completions(inputs)  # SpeedMixin's, then TRL's
        finally:
            recorder, captured = self._recorder, self._capture_scoring
            self._recorder, self._capture_scoring = None, None
        if not self.stats_on:
            return output
        rows = output["completion_ids"].size(0)
        offset = self.accelerator.process_index * rows
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        # Global row index // group size: which prompt's group each row belongs to; travels through the shuffle.
        output["group_index"] = (torch.arange(rows, device=output["advantages"].device) + offset) // group_size
        if batch_wide:
            self._select_generation_batch(output, recorder, captured)
        return output

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        inputs = self._loss_inputs or {}
        if "selection_mask" in inputs:  # batch/group scope: chosen once per generation batch
            return inputs["selection_mask"].bool() & mask.bool()
        # microbatch scope (and eval): rank this microbatch, gathered over every process, with the live omega
        keep, _ = self._select_across_processes(entropies.detach(), self._live_omega(inputs).expand_as(entropies),
                                                mask, inputs["advantages"], inputs.get("group_index"), group_size=None)
        return keep

    def _live_omega(self, inputs: dict[str, Any]) -> torch.Tensor:
        """Omega of a loss microbatch with the policy being trained (ratio to the old policy, clip indicator)."""
        logps, old = self._live_logps, inputs.get("old_per_token_logps")
        ratio = None if old is None else torch.exp(logps - old)  # TRL uses r = 1 when it made no old log-probs
        return self._omega(inputs, logps, ratio)

    def _omega(self, batch: dict[str, Any], logps: torch.Tensor | None, ratio: torch.Tensor | None) -> torch.Tensor:
        """The coefficient of grad log pi in TRL's `_compute_loss` for a kept token (selection.gmts_omega) with this
        trainer's settings: `logps` the policy's log-probs (for the KL term), `ratio` pi_theta / pi_old (None: 1)."""
        ref_ratio = torch.exp(batch["ref_per_token_logps"] - logps) if self.beta != 0.0 else None
        weighted = self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo"
        return gmts_omega(batch["advantages"], ratio, self.epsilon_low, self.epsilon_high, self.beta, ref_ratio,
                          delta=self.args.delta, weight=batch["importance_sampling_ratio"] if weighted else None,
                          kl_bias_correction=self.args.use_bias_correction_kl)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        for mode, pending in self._pending_stats.items():  # one host sync per logging step
            if pending:
                names = list(pending[0])
                values = torch.stack([torch.stack([stats[n] for n in names]) for stats in pending]).tolist()
                for row in values:
                    for name, value in zip(names, row):
                        self._metrics[mode][f"selection/{name}"].append(value)
                pending.clear()
        if self._update_cosine.pending:
            self._metrics["train"]["update/cosine_prev"].extend(torch.stack(self._update_cosine.pending).tolist())
            self._update_cosine.pending.clear()
        super().log(logs, start_time)

    # ------------------------------------------------------------------ the selection itself
    def _batch_entropy(self, output, recorder, captured) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T) entropy of every completion token of the generation batch, and the policy log-probs if known."""
        if recorder is not None:
            ids = output["completion_ids"]
            ent = recorder.entropy(ids.size(0), ids.size(1), ids.device)
            if ent is not None:
                self.entropy_source_used = "generation"
                return ent, None
            logger.warning_once("GMTS: no entropy was recorded during generation; falling back to a scoring pass.")
        if captured and captured.get("entropy") is not None:
            self.entropy_source_used = "trl_scoring_pass"
            return captured["entropy"], captured["logps"]
        self.entropy_source_used = "extra_scoring_pass"
        logps, ent = self.scoring_pass(output)
        return ent, logps

    def scoring_pass(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """One fused no-grad forward over a generation batch: (B, T) log-probs and entropy of the completion tokens."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P+T)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, ent, _ = super()._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, batch["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size, compute_entropy=True,
            )
        drop_duplicate_input_grad_hooks(self.accelerator.unwrap_model(self.model))  # checkpointing was off and on
        return logps, ent

    def _select_generation_batch(self, output, recorder, captured) -> None:
        entropy, logps = self._batch_entropy(output, recorder, captured)  # (B, T)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        # The policy that generated is the policy being scored: r = 1.
        omega = self._omega(output, logps, ratio=None).expand_as(entropy)
        group_size = self.num_generations if self.args.selection_scope == "group" else None
        keep, kept_global = self._select_across_processes(
            entropy, omega, mask, output["advantages"], output["group_index"], group_size
        )
        output["selection_mask"] = keep
        if self.args.selection_normalizer == "kept_tokens":
            output["num_items_in_batch"] = kept_global.to(output["num_items_in_batch"].dtype)

    def _select_across_processes(self, entropy, omega, mask, advantages, group_index, group_size):
        """Select on the concatenation of every process's rows, so the union of the per-process masks is the
        single-process mask of the whole batch. Returns this process's (B, T) mask and the global kept count."""
        acc = self.accelerator
        width = entropy.size(1)
        adv = advantages.float().reshape(-1)
        local = torch.stack([entropy.float().detach(), omega.float().detach(), mask.float()])  # (3, B, T)
        if acc.num_processes > 1:
            local = acc.pad_across_processes(local, dim=2, pad_index=0)
            gathered = acc.gather(local.transpose(0, 1).contiguous()).transpose(0, 1)  # (3, P*B, T')
            adv = acc.gather(adv)
            group_index = None if group_index is None else acc.gather(group_index)
        else:
            gathered = local
        g_entropy, g_omega, g_mask = gathered[0], gathered[1], gathered[2].bool()
        rule = rule_named(self.args.token_selection)
        other = overlap_partner(rule)  # the overlap's other ranking (None for plain GRPO: every valid token kept)
        keep, keep_other = (None if r is None else r.select(g_entropy, g_omega, g_mask, self.args.selection_ratio,
                                                             group_size) for r in (rule, other))
        mode = "train" if self.model.training else "eval"
        if group_index is None:
            group_index = torch.arange(g_mask.size(0), device=g_mask.device)
        # kept as tensors until `log`: a host sync here would stall the CPU in the middle of the forward
        stats = selection_stats(keep, g_mask, g_entropy, adv, group_index, other_kept=keep_other, omega=g_omega)
        # the counts behind kept_fraction, so a log can be checked against ceil(ratio x valid tokens) exactly
        stats.update(kept_tokens=keep.sum().float(), valid_tokens=g_mask.sum().float())
        self._pending_stats[mode].append(stats)
        rows = entropy.size(0)
        start = acc.process_index * rows if acc.num_processes > 1 else 0
        return keep[start : start + rows, :width], keep.sum()
