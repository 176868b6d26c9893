"""GMTSTrainer: GRPO that trains on the top fraction of completion tokens, ranked by entropy (ETS) or |entropy x omega|
(GMTS, Lv, Zhang, Zhang, arXiv 2608.30632, eq. 4): the method alone. The ranking math is selection.py's, the config
and its refusals gmts_recipe/config.py's (GMTSConfig, re-exported here); the speed options are an opt-in subclass,
gmts_recipe/fast_trainer.py's FastGMTSTrainer, which recipe.py builds.

Omega (`_omega`, selection.gmts_omega) is the coefficient of grad log pi_t that TRL's `_compute_loss` puts on a kept
token, with every term TRL puts there: the clip indicator (and `delta`'s two-sided clip), the ratio, the vLLM
importance-sampling weight and the KL term. TRL adds the KL term after the selection mask, so with beta != 0 a dropped
token keeps the KL part of its gradient; with beta = 0 it gets exactly none. The loss normalizer is TRL's
(loss_type="dapo": every completion token of the generation batch, one number for every arm), so arms differ only in
the tokens they keep; `selection_normalizer="kept_tokens"` divides by the kept count instead (an ablation).

Deviation from the paper: with num_iterations > 1 the batch/group-scope mask is chosen once per generation batch with
the policy that generated it (r = 1, no clip); "microbatch" scope re-ranks every microbatch with the live ratio.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from gmts_recipe.config import GMTSConfig, check_selection_config, check_served, omega_is_modeled
from gmts_recipe.grad_hooks import drop_duplicate_input_grad_hooks
from selection import gmts_omega, overlap_partner, rule_named, selection_stats, update_cosine

__all__ = ["GMTSConfig", "GMTSTrainer", "UpdateCosine"]


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


class GMTSTrainer(GRPOTrainer):
    """`GRPOTrainer` that trains only on the top `selection_ratio` of completion tokens, ranked by `token_selection` (a
    rule of selection.RULES: "gmts", "entropy" (ETS), "entropy_nonzero_omega" (a control: ETS with the omega == 0
    tokens ranked last) or "all" (plain GRPO)), over `selection_scope` ("batch": the whole generation batch on every
    process, the paper's; "group": each prompt's group; "microbatch": each loss microbatch). The args must be a
    GMTSConfig, none of a subclass's fields set (`config_class`): anything else is refused before the model loads.
    A subclass that makes the generation batch otherwise (FastGMTSTrainer) overrides `generate_and_score` and
    `generation_entropy`; an entropy from elsewhere (FastGMTSTrainer's, recorded during generation) is the same
    quantity in other rounding, so it keeps these tokens except where two scores lie within that rounding at the
    threshold (tests/test_entropy_sources.py).

    What differs from `trl.GRPOTrainer` (TRL 1.16), and nothing else:
    - `__init__`: refuses what `check_selection_config` refuses, turns TRL's entropy-mask hook on
      (`top_entropy_quantile = selection_ratio`) and adds the `UpdateCosine` callback.
    - `_generate_and_score_completions`: after TRL has generated, scored and computed the advantages
      (`generate_and_score`), the "batch" and "group" scopes choose the kept tokens of the whole generation batch,
      across every process, and store them in the batch as `selection_mask`, which TRL's shuffle and split carry
      into each microbatch. Their entropy (`generation_entropy`) comes from one fused no-grad pass (`scoring_pass`).
    - `get_high_entropy_mask` (TRL's hook in `_compute_loss`, applied as `per_token_loss * mask`): the selection.
      "batch" and "group" read `selection_mask`; "microbatch" ranks the microbatch, gathered over every process,
      with the live omega.
    - `_compute_loss` records its `inputs` for the hook (and with token_selection="all" logs the same metrics, every
      valid token kept); `_get_per_token_logps_and_entropies` records the live log-probs and entropy it returns.
    - `log` turns the selection metrics, kept on the device until then, into numbers (no host sync in the loss).

    Logged every step under `selection/`: kept_fraction, overlap (with Rule.overlap_with's ranking), top_answer_share,
    effective_answers, zero_advantage_kept_share, top_answer_weight_share, entropy_kept_mean, entropy_all_mean,
    kept_tokens and valid_tokens; and `update/cosine_prev` (every arm): the cosine between successive updates.
    """

    _tag_names = ["trl", "grpo", "gmts"]
    config_class = GMTSConfig  # the args it serves: a subclass's fields set away from their defaults are refused

    def __init__(self, *args, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        check_served(config, self.config_class, type(self).__name__)  # before TRL loads the model
        check_selection_config(config)
        super().__init__(*args, **kwargs)
        self.selection_on = self.args.token_selection != "all"
        self.stats_on = self.selection_on or omega_is_modeled(self.args)  # plain GRPO logs the same metrics
        if self.selection_on:  # routes TRL's `_compute_loss` through `get_high_entropy_mask` (below)
            self.top_entropy_quantile = self.args.selection_ratio
        self._loss_inputs: dict[str, Any] | None = None
        self._live_logps: torch.Tensor | None = None
        self._live_entropy: torch.Tensor | None = None
        self.entropy_source_used: str | None = None  # the last generation batch's entropy source, for the records
        self._pending_stats: dict[str, list[dict[str, torch.Tensor]]] = {"train": [], "eval": []}
        self._update_cosine = UpdateCosine()
        self.add_callback(self._update_cosine)

    # ------------------------------------------------------------------ hooks into TRL
    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if self._loss_inputs is not None:  # the policy forward of `_compute_loss` (train, or eval without grad)
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
        training, batch_wide = self.model.training, self.selects_generation_batch()
        output = self.generate_and_score(inputs)
        if not self.stats_on:
            return output
        rows = output["completion_ids"].size(0)
        offset = self.accelerator.process_index * rows
        group_size = self.num_generations if training else self.num_generations_eval
        # Global row index // group size: which prompt's group each row belongs to; travels through the shuffle.
        output["group_index"] = (torch.arange(rows, device=output["advantages"].device) + offset) // group_size
        if batch_wide:
            self._select_generation_batch(output)
        return output

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        inputs = self._loss_inputs or {}
        if "selection_mask" in inputs:  # batch/group scope: chosen once per generation batch
            return inputs["selection_mask"].bool() & mask.bool()
        # microbatch scope (and eval): rank this microbatch, gathered over every process, with the live omega
        keep, _ = self._select_across_processes(entropies.detach(), self._live_omega(inputs).expand_as(entropies),
                                                mask, inputs["advantages"], inputs.get("group_index"), group_size=None)
        return keep

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

    # ------------------------------------------------------------------ the generation batch and its entropy
    def generate_and_score(self, inputs: dict) -> dict:
        """TRL's generation batch (completions, rewards, advantages) before selection; a subclass that changes how it
        is generated (FastGMTSTrainer) wraps this."""
        return super()._generate_and_score_completions(inputs)

    def selects_generation_batch(self) -> bool:
        """Whether this generation batch is ranked as a whole ("batch" and "group" scope, in training)."""
        return self.selection_on and self.model.training and self.args.selection_scope != "microbatch"

    def generation_entropy(self, output: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, T) entropy of every completion token of the generation batch, and the policy's log-probs where known
        (omega's KL term needs them): here one fused no-grad pass (`scoring_pass`)."""
        self.entropy_source_used = "extra_scoring_pass"
        logps, entropy = self.scoring_pass(output)
        return entropy, logps

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

    # ------------------------------------------------------------------ the selection itself
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

    def _select_generation_batch(self, output: dict) -> None:
        entropy, logps = self.generation_entropy(output)  # (B, T)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        omega = self._omega(output, logps, ratio=None).expand_as(entropy)  # the policy that generated: r = 1
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
        if group_index is None:
            group_index = torch.arange(g_mask.size(0), device=g_mask.device)
        # kept as tensors until `log`: a host sync here would stall the CPU in the middle of the forward
        stats = selection_stats(keep, g_mask, g_entropy, adv, group_index, other_kept=keep_other, omega=g_omega)
        # the counts behind kept_fraction, so a log can be checked against ceil(ratio x valid tokens) exactly
        stats.update(kept_tokens=keep.sum().float(), valid_tokens=g_mask.sum().float())
        self._pending_stats["train" if self.model.training else "eval"].append(stats)
        rows = entropy.size(0)
        start = acc.process_index * rows if acc.num_processes > 1 else 0
        return keep[start : start + rows, :width], keep.sum()
