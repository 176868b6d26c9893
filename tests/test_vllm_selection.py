"""GMTS selection under TRL's vLLM path, without vLLM: a stand-in engine (FakeVLLM) samples with the trainer's own
model and reports every sampled token's log-prob off by a known noise, as a vLLM engine's other kernels would. TRL's
own `_generate_and_score_completions` then builds its importance-sampling weight from them (each of its four modes:
truncated or masked, per token or per answer), and `_compute_loss` multiplies the per-token loss by it. Checked here:
the weight is TRL's, the kept set is the top of |entropy x omega| with omega = advantage x weight (x ratio x clip
indicator), and omega is the coefficient of grad log pi in TRL's loss (autograd) on every kept token, 0 elsewhere."""

import pytest
import torch
from peft import LoraConfig

from selection import ets_nonzero_omega_scores, gmts_omega, gmts_scores, kept_count, select_top_fraction
from gmts_recipe.fast_config import FastGMTSConfig
from gmts_recipe.fast_trainer import FastGMTSTrainer
from loss_probe import loss_coefficients
from tiny import tiny_dataset, tiny_model, tiny_tokenizer

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
ROWS = 16  # 4 prompts x 4 rollouts: the generation batch, and one loss microbatch


def varied_reward(completions, **kwargs):
    return [float(sum(map(ord, c)) % 3) for c in completions]  # rewards that differ within groups


class FakeVLLM:
    """Stands in for TRL's VLLMGeneration in colocate mode (one completion per prompt row): samples softmax(logits / T)
    with the trainer's model and returns each token's log-prob plus N(0, noise) (vLLM's logprobs of a token differ
    from the trainer's forward by its kernels' rounding; here by more, so truncation and masking happen)."""

    def __init__(self, trainer: FastGMTSTrainer, noise: float, seed: int = 0):
        self.trainer, self.noise, self.synced = trainer, noise, 0
        self.generator = torch.Generator().manual_seed(seed)

    def sync_weights(self) -> None:
        self.synced += 1

    @torch.no_grad()
    def generate(self, prompts, images, num_generations, profiler=None):
        model, t = self.trainer.model, self.trainer.temperature
        eos, limit = self.trainer.processing_class.eos_token_id, self.trainer.max_completion_length
        completions, logprobs = [], []
        for prompt in prompts:
            ids, lps = list(prompt), []
            for _ in range(limit):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float() / t
                logp = torch.log_softmax(logits, -1)
                token = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
                ids.append(token)
                lps.append([float(logp[token]) + self.noise * float(torch.randn((), generator=self.generator))])
                if token == eos:
                    break
            completions.append(ids[len(prompt):])
            logprobs.append(lps)
        return prompts, completions, logprobs, None


def make_trainer(tmp_path, mode: str, noise: float, **overrides) -> FastGMTSTrainer:
    """The recipe's trainer (FastGMTSTrainer) built without vLLM, then switched onto TRL's vLLM branch with FakeVLLM as its engine."""
    kw = dict(output_dir=str(tmp_path), per_device_train_batch_size=ROWS, num_generations=4,
              gradient_accumulation_steps=1, max_completion_length=10, max_steps=1, learning_rate=1e-2,
              report_to=[], save_strategy="no", use_cpu=True, seed=5, temperature=1.0, token_selection="gmts",
              vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=0.5)
    kw.update(overrides)
    tok = tiny_tokenizer()
    trainer = FastGMTSTrainer(model=tiny_model(tok), reward_funcs=varied_reward, args=FastGMTSConfig(**kw),
                              train_dataset=tiny_dataset(16), processing_class=tok,
                              peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    trainer.use_vllm = True  # TRL's vLLM branch of generation, scoring and loss; the engine is the stand-in
    trainer.vllm_generation, trainer._last_loaded_step = FakeVLLM(trainer, noise), -1
    assert trainer.vllm_importance_sampling_correction and trainer.vllm_importance_sampling_mode == mode
    return trainer


def generation_batch(trainer, seed: int = 0) -> dict:
    trainer.model.train()
    examples = [trainer.train_dataset[i // 4] for i in range(ROWS)]  # 4 rollouts per prompt
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(examples)


def trls_weight_by_hand(out: dict, mode: str, clip_min: float, clip_max: float) -> torch.Tensor:
    """TRL's vLLM importance-sampling weight, from the batch's two log-probs, as its documentation defines it."""
    mask = out["completion_mask"].float()
    diff = (out["old_per_token_logps"] - out["sampling_per_token_logps"]) * mask
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return ratio.clamp(clip_min, clip_max)
    return torch.where((ratio < clip_min) | (ratio > clip_max), torch.zeros_like(ratio), ratio)


@pytest.mark.parametrize("mode", MODES)
def test_batch_scope_ranks_by_entropy_times_the_vllm_weighted_omega(tmp_path, mode):
    trainer = make_trainer(tmp_path, mode, noise=0.6 if mode.startswith("token") else 0.15)
    out = generation_batch(trainer)
    assert trainer.vllm_generation.synced == 1 and trainer.entropy_source_used == "trl_scoring_pass"
    w = out["importance_sampling_ratio"]
    valid = out["completion_mask"].bool()
    torch.testing.assert_close(w, trls_weight_by_hand(out, mode, 0.5, 3.0))
    assert w.shape == ((ROWS, 1) if mode.startswith("sequence") else valid.shape)
    wide = w.expand_as(valid)[valid]
    if mode.endswith("mask"):
        assert (wide == 0).any() and (wide != 0).any(), "no weight was masked to 0 (or all were)"
    else:
        assert ((wide == 3.0) | (wide == 0.5)).any() and ((wide < 3.0) & (wide > 0.5)).any(), "nothing truncated"
    # the kept set: the top 20% of |entropy x A x w| (the policy that generated is the one scored: r = 1)
    _, entropy = trainer.scoring_pass(out)
    omega = (out["advantages"].unsqueeze(1) * w).expand_as(entropy)
    keep = out["selection_mask"]
    assert torch.equal(keep, select_top_fraction(gmts_scores(entropy, omega), valid, 0.2, tie_break=entropy))
    assert int(keep.sum()) == kept_count(int(valid.sum()), 0.2)
    assert not (keep & (omega == 0)).any() or not (valid & ~keep & (omega != 0)).any(), \
        "a token that moves nothing was kept while one that moves something was dropped"
    assert not torch.equal(keep, select_top_fraction(gmts_scores(entropy, out["advantages"].unsqueeze(1)
                                                                  .expand_as(entropy)), valid, 0.2, tie_break=entropy)), \
        "the weight changed no kept token: the test cannot tell whether selection uses it"


@pytest.mark.parametrize("mode", MODES)
def test_the_control_rule_ranks_weight_zero_tokens_last(tmp_path, mode):
    trainer = make_trainer(tmp_path, mode, noise=0.6 if mode.startswith("token") else 0.15,
                           token_selection="entropy_nonzero_omega")
    out = generation_batch(trainer)
    _, entropy = trainer.scoring_pass(out)
    omega = (out["advantages"].unsqueeze(1) * out["importance_sampling_ratio"]).expand_as(entropy)
    expected = select_top_fraction(ets_nonzero_omega_scores(entropy, omega), out["completion_mask"].bool(), 0.2)
    assert torch.equal(out["selection_mask"], expected)


@pytest.mark.parametrize("scope", ["batch", "microbatch"])
@pytest.mark.parametrize("mode", MODES)
def test_omega_is_the_gradient_coefficient_of_trls_vllm_weighted_loss(tmp_path, mode, scope):
    """Autograd through TRL's `_compute_loss` of the whole generation batch: d(-loss)/d log pi_t x the token count is
    omega = A x w x r x clip indicator on kept tokens (r = pi / pi_old with TRL's old log-probs), 0 on the others."""
    trainer = make_trainer(tmp_path, mode, noise=0.6 if mode.startswith("token") else 0.15, selection_scope=scope)
    out = generation_batch(trainer)
    valid = out["completion_mask"].bool()
    if scope == "microbatch":  # off-policy, so the live ratio and the clip indicator are in play
        g = torch.Generator().manual_seed(3)
        out["old_per_token_logps"] = out["old_per_token_logps"] + 0.4 * torch.randn(valid.shape, generator=g)
    # dapo: the loss is a sum over tokens / every completion token
    coefficient, live, masks, omegas = loss_coefficients(trainer, out, valid.sum())
    keep = masks[0]
    by_hand = gmts_omega(out["advantages"], torch.exp(live - out["old_per_token_logps"]), 0.2, 0.2,
                         weight=out["importance_sampling_ratio"]).expand_as(live)
    assert keep.any() and (valid & ~keep).any()
    torch.testing.assert_close(coefficient[keep], by_hand[keep], rtol=1e-4, atol=1e-6)
    assert torch.all(coefficient[~keep] == 0), "a dropped token (or padding) received gradient"
    if scope == "batch":  # ranked before the loss, with r = 1: the live ratio is 1 up to rounding here
        assert "selection_mask" in out and torch.equal(keep, out["selection_mask"].bool() & valid)
    else:
        assert "selection_mask" not in out
        torch.testing.assert_close(omegas[0][valid], by_hand[valid], rtol=1e-5, atol=1e-7)
        r, a = torch.exp(live - out["old_per_token_logps"]), out["advantages"].unsqueeze(1)
        clipped = ((r > 1.2) & (a > 0)) | ((r < 0.8) & (a < 0))
        assert (valid & clipped).any(), "no token was clipped: the indicator went untested"
    assert (coefficient[keep] != 0).any()
