"""GMTSTrainer on a tiny random model: refusals, scopes, equal counts, entropy sources, seeding, gradients. The
trainer built here is the recipe's, FastGMTSTrainer (`fast=False`: GMTSTrainer alone, the method without the speed
options)."""

import math

import pytest
import torch
from peft import LoraConfig

from gmts_recipe.fast_config import FastGMTSConfig
from gmts_recipe.fast_trainer import FastGMTSTrainer
from gmts_trainer import GMTSConfig, GMTSTrainer
from selection import gmts_omega as selection_gmts_omega
from selection import ets_nonzero_omega_scores, gmts_scores, kept_count, select_top_fraction
from loss_probe import loss_coefficients
from tiny import digit_reward, prepared_batch, tiny_dataset, tiny_model, tiny_tokenizer

LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])


def make_config(tmp_path, fast=True, **overrides) -> GMTSConfig:
    kw = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2,
        max_completion_length=12, max_steps=1, learning_rate=1e-2, logging_steps=1, report_to=[],
        save_strategy="no", use_cpu=True, seed=5, temperature=1.0, token_selection="gmts",
    )
    kw.update(overrides)
    return (FastGMTSConfig if fast else GMTSConfig)(**kw)


def make_trainer(tmp_path, seed_model=0, peft=True, eval_dataset=None, reward=digit_reward, fast=True,
                 **overrides) -> GMTSTrainer:
    tok = tiny_tokenizer()
    return (FastGMTSTrainer if fast else GMTSTrainer)(
        model=tiny_model(tok, seed=seed_model), reward_funcs=reward, args=make_config(tmp_path, fast, **overrides),
        train_dataset=tiny_dataset(16), eval_dataset=eval_dataset, processing_class=tok,
        peft_config=LoraConfig(**LORA) if peft else None,
    )


def generation_batch(trainer, seed=0):
    """One train-mode generation batch (every row of the local generation batch), seeded."""
    trainer.model.train()
    rows = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    examples = [trainer.train_dataset[i % len(trainer.train_dataset) // 4] for i in range(rows)]  # 4 rollouts/prompt
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(examples)


# ---------------------------------------------------------------- refusals, at construction, with a reason
@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "luspo"])
@pytest.mark.parametrize("rule", ["gmts", "entropy_nonzero_omega"])
def test_per_sequence_loss_is_refused_for_the_rules_that_rank_with_omega_naming_the_rule(tmp_path, loss_type, rule):
    extra = {"importance_sampling_level": "sequence"} if loss_type == "luspo" else {}
    with pytest.raises(ValueError, match=f"token_selection='{rule}' ranks by omega, which has no 1/length factor"):
        make_config(tmp_path, loss_type=loss_type, token_selection=rule, **extra)
    make_config(tmp_path, loss_type=loss_type, token_selection="all", **extra)  # plain GRPO is fine


@pytest.mark.parametrize("loss_type", ["grpo", "sapo"])
def test_ets_with_a_per_answer_loss_gives_dropped_tokens_exactly_zero_gradient(tmp_path, loss_type):
    """TRL 1.16 multiplies each token's loss by the selection mask and divides by all of the answer's valid tokens:
    the per-answer normalizer does not undo ETS, whose score has no omega. (luspo needs sequence-level importance
    sampling, refused for every scored rule.)"""
    trainer = make_trainer(tmp_path, token_selection="entropy", loss_type=loss_type, selection_scope="microbatch",
                           gradient_accumulation_steps=1, per_device_train_batch_size=16)
    batch = prepared_batch(len(trainer.processing_class), groups=4, group_size=4)
    valid = batch["completion_mask"].bool()
    coefficient, _, masks, _ = loss_coefficients(trainer, batch, 1.0)
    keep = masks[0]
    assert int(keep.sum()) == kept_count(int(valid.sum()), 0.2) and (valid & ~keep).any()
    assert (coefficient[valid & ~keep] == 0).all(), "a dropped token received gradient"
    moving = keep & (batch["advantages"].unsqueeze(1) != 0)
    assert moving.any() and (coefficient[moving] != 0).all(), "a kept token with an advantage received none"


def test_plain_grpo_with_trls_own_entropy_quantile_is_refused_with_the_way_out(tmp_path):
    """token_selection='all' keeps every valid token; TRL's top_entropy_quantile would silently keep fewer (18 of 87
    on one batch), so the pair is refused, naming both ways to say what was meant."""
    with pytest.raises(ValueError, match=r"token_selection='all' trains on every token, but top_entropy_quantile=0.2 "
                                         r".*top_entropy_quantile=1.0 .*token_selection='entropy' with "
                                         r"selection_ratio=0.2"):
        make_config(tmp_path, token_selection="all", top_entropy_quantile=0.2)
    make_config(tmp_path, token_selection="all", top_entropy_quantile=1.0)


@pytest.mark.parametrize("rule", ["entropy", "gmts"])
def test_sequence_level_importance_sampling_is_refused_with_selection_on(tmp_path, rule):
    # TRL's GSPO ratio is exp(mean of every token's log-ratio): masking the loss still sends gradient to every token
    with pytest.raises(ValueError, match="dropped token still gets gradient"):
        make_config(tmp_path, token_selection=rule, importance_sampling_level="sequence")
    make_config(tmp_path, token_selection="all", importance_sampling_level="sequence")  # plain GSPO is fine


@pytest.mark.parametrize("field,value,match", [
    ("token_selection", "entropyy", "token_selection='entropyy' is not one of all, entropy, gmts, entropy_nonzero_omega"),
    ("token_selection", "ets", "token_selection='ets' is not one of"),  # the arm's name is the recipe's, not a rule
    ("selection_scope", "global", "selection_scope='global' is not one of batch, microbatch, group"),
    ("generation_decode_kernel", "flash", "generation_decode_kernel='flash' is not one of sdpa, matmul"),
    ("selection_ratio", 0.0, r"selection_ratio=0.0 must be in \(0, 1\]"),
    ("selection_ratio", 1.2, r"selection_ratio=1.2 must be in \(0, 1\]"),
    ("loss_type", "cispo", "needs a clipped-surrogate loss"),
    ("top_entropy_quantile", 0.2, "not top_entropy_quantile"),
    ("selection_normalizer", "kept", "selection_normalizer='kept' is not one of"),
])
def test_bad_selection_config_is_refused(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        make_config(tmp_path, **{field: value})


def test_kept_token_normalizer_needs_a_batch_wide_dapo_loss(tmp_path):
    with pytest.raises(ValueError, match="kept_tokens"):
        make_config(tmp_path, selection_normalizer="kept_tokens", selection_scope="microbatch")
    with pytest.raises(ValueError, match="kept_tokens"):
        make_config(tmp_path, selection_normalizer="kept_tokens", loss_type="bnpo")


# ---------------------------------------------------------------- scopes and counts
def test_batch_scope_keeps_exact_count_over_the_generation_batch(tmp_path):
    trainer = make_trainer(tmp_path)
    out = generation_batch(trainer)
    mask = out["completion_mask"].bool()
    keep = out["selection_mask"]
    assert trainer.entropy_source_used == "generation"
    assert int(keep.sum()) == kept_count(int(mask.sum()), 0.2)
    assert not (keep & ~mask).any()


def test_group_scope_keeps_exact_count_in_every_group(tmp_path):
    trainer = make_trainer(tmp_path, selection_scope="group")
    out = generation_batch(trainer)
    mask, keep = out["completion_mask"].bool(), out["selection_mask"]
    groups = mask.size(0) // 4
    assert groups == 2
    for g in range(groups):
        sl = slice(4 * g, 4 * g + 4)
        assert int(keep[sl].sum()) == kept_count(int(mask[sl].sum()), 0.2)


def test_ets_and_gmts_keep_the_same_number_of_tokens_on_one_batch(tmp_path):
    """Same batch, same kept count, other tokens: on the first seed whose batch has an answer with a non-zero
    advantage (with every advantage 0, GMTS's scores tie and its entropy tie-break keeps exactly ETS's tokens)."""
    for seed in range(1, 9):
        outs = {}
        for rule in ("entropy", "gmts"):
            trainer = make_trainer(tmp_path, token_selection=rule)
            outs[rule] = generation_batch(trainer, seed=seed)
        if outs["gmts"]["advantages"].abs().sum() > 0:
            break
    assert outs["gmts"]["advantages"].abs().sum() > 0, "no seed gave a batch with a non-zero advantage"
    assert torch.equal(outs["entropy"]["completion_ids"], outs["gmts"]["completion_ids"])  # same batch
    assert int(outs["entropy"]["selection_mask"].sum()) == int(outs["gmts"]["selection_mask"].sum())
    assert not torch.equal(outs["entropy"]["selection_mask"], outs["gmts"]["selection_mask"])  # only *which* differs


def test_the_method_alone_trains_as_the_recipes_trainer_does_from_the_same_entropy(tmp_path):
    """GMTSTrainer (no speed option) takes its entropy from its own fused scoring pass; the recipe's FastGMTSTrainer,
    told to take it from that pass too, keeps the same tokens and makes the same update, bit for bit: the speed
    options change where entropy comes from and how the batch is generated, never what is selected."""
    logs, weights = {}, {}
    varied = lambda completions, **kwargs: [float(sum(map(ord, c)) % 3) for c in completions]  # noqa: E731
    for fast in (False, True):
        extra = {"selection_entropy_source": "scoring_pass"} if fast else {}
        trainer = make_trainer(tmp_path / str(fast), fast=fast, reward=varied, **extra)  # GMTS, one update
        assert type(trainer) is (FastGMTSTrainer if fast else GMTSTrainer)
        trainer.train()
        assert trainer.entropy_source_used == "extra_scoring_pass"
        logs[fast] = [{k: v for k, v in row.items() if "time" not in k and "runtime" not in k and "per_second" not in k}
                      for row in trainer.state.log_history]
        weights[fast] = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert logs[False] == logs[True] and any("selection/kept_tokens" in row for row in logs[False])
    assert weights[False].keys() == weights[True].keys()
    assert all(torch.equal(weights[False][n], weights[True][n]) for n in weights[False])
    assert any(w.abs().sum() > 0 for n, w in weights[False].items() if "lora_B" in n)  # an update was made


def test_gmts_mask_is_the_top_of_entropy_times_advantage(tmp_path):
    trainer = make_trainer(tmp_path, selection_entropy_source="scoring_pass")
    out = generation_batch(trainer)
    assert trainer.entropy_source_used == "extra_scoring_pass"
    _, ent = trainer.scoring_pass(out)
    scores = gmts_scores(ent, out["advantages"].unsqueeze(1).expand_as(ent))  # equal scores: higher entropy first
    assert torch.equal(out["selection_mask"], select_top_fraction(scores, out["completion_mask"], 0.2, tie_break=ent))


def test_generation_entropy_equals_training_forward_entropy(tmp_path):
    trainer = make_trainer(tmp_path, temperature=0.7)
    out = generation_batch(trainer)
    _, ent = trainer.scoring_pass(out)
    gen_scores = out["selection_mask"]
    ref = select_top_fraction(gmts_scores(ent, out["advantages"].unsqueeze(1).expand_as(ent)),
                              out["completion_mask"], 0.2, tie_break=ent)
    assert torch.equal(gen_scores, ref), "generation-time entropy ranked tokens differently from the training forward"


def test_generation_entropy_equals_training_forward_entropy_with_left_padding(tmp_path):
    trainer = make_trainer(tmp_path, temperature=0.7)
    prompts = ["1+2=", "12+345=", "123456+78=", "9="]  # different lengths: the shorter ones are left-padded
    examples = [{"prompt": p, "answer": "0"} for p in prompts[:2] for _ in range(4)]
    recorded = {}
    batch_entropy = trainer.generation_entropy

    def spy(*args):
        recorded["entropy"], logps = batch_entropy(*args)
        return recorded["entropy"], logps

    trainer.generation_entropy = spy
    trainer.model.train()
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(examples)
    assert trainer.entropy_source_used == "generation"
    assert not out["prompt_mask"].bool().all(), "no prompt was left-padded"
    _, forward = trainer.scoring_pass(out)
    valid = out["completion_mask"].bool()
    torch.testing.assert_close(recorded["entropy"][valid], forward[valid], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("setting", [{"min_new_tokens": 3}, {"suppress_tokens": [5]}, {"sequence_bias": [[[5], -1.0]]},
                                     {"forced_eos_token_id": 1}, {"begin_suppress_tokens": [5]},
                                     {"repetition_penalty": 1.1}, {"temperature": 0.5}])
def test_generation_settings_that_change_the_distribution_fall_back_to_a_scoring_pass(tmp_path, setting):
    trainer = make_trainer(tmp_path, generation_kwargs=setting)
    assert not trainer._generation_entropy_is_exact()


@pytest.mark.parametrize("setting", [{"top_k": 5}, {"top_p": 0.9}, {"min_p": 0.05}, {"max_new_tokens": 12}])
def test_truncation_settings_keep_generation_entropy(tmp_path, setting):
    assert make_trainer(tmp_path, generation_kwargs=setting)._generation_entropy_is_exact()


def test_a_model_generation_config_that_changes_the_distribution_is_seen(tmp_path):
    trainer = make_trainer(tmp_path)
    assert trainer._generation_entropy_is_exact()
    trainer.accelerator.unwrap_model(trainer.model).generation_config.suppress_tokens = [5]  # as a checkpoint's would
    assert not trainer._generation_entropy_is_exact()
    trainer = make_trainer(tmp_path, generation_kwargs={"min_new_tokens": 3})
    out = generation_batch(trainer)
    assert trainer.entropy_source_used == "extra_scoring_pass"
    assert int(out["selection_mask"].sum()) == kept_count(int(out["completion_mask"].sum()), 0.2)


def test_trl_scoring_pass_is_reused_when_trl_makes_one(tmp_path):
    trainer = make_trainer(tmp_path, num_iterations=2)  # a generation batch reused: TRL scores it
    assert trainer._trl_makes_scoring_pass()
    trainer.args.selection_entropy_source = "scoring_pass"  # force past the generation recorder
    out = generation_batch(trainer)
    assert trainer.entropy_source_used == "trl_scoring_pass"
    assert "old_per_token_logps" in out
    assert int(out["selection_mask"].sum()) == kept_count(int(out["completion_mask"].sum()), 0.2)


def test_microbatch_scope_ranks_each_microbatch_by_the_live_omega(tmp_path):
    # 2 iterations per generation batch: the second step's microbatches are off-policy (r != 1, some clipped)
    trainer = make_trainer(tmp_path, selection_scope="microbatch", num_iterations=2, max_steps=2, learning_rate=0.3,
                           reward=lambda completions, **kw: [float(sum(map(ord, c)) % 3) for c in completions])
    out = generation_batch(trainer)
    assert "selection_mask" not in out
    calls = []
    original = trainer.get_high_entropy_mask

    def spy(e, m, t):
        inputs = trainer._loss_inputs
        calls.append((original(e, m, t), e.detach(), m.bool(), inputs["advantages"], trainer._live_logps,
                      inputs["old_per_token_logps"]))
        return calls[-1][0]

    trainer.get_high_entropy_mask = spy
    trainer.train()
    assert len(calls) == 4  # two microbatches in each of the two steps
    clipped_somewhere = False
    for keep, entropy, m, adv, live, old in calls:
        a, r = adv.unsqueeze(1), torch.exp(live - old)  # omega by hand: A r, 0 where the clipped branch is active
        clipped = ((r > 1.2) & (a > 0)) | ((r < 0.8) & (a < 0))
        omega = torch.where(clipped, torch.zeros_like(r), a * r)
        clipped_somewhere |= bool((clipped & m).any())
        expected = select_top_fraction((entropy * omega).abs(), m, 0.2, tie_break=entropy)
        assert torch.equal(keep, expected)
        assert int(keep.sum()) == kept_count(int(m.sum()), 0.2) and not (keep & ~m).any()
    assert any(not torch.allclose(c[4], c[5]) for c in calls), "no microbatch was off-policy"
    assert clipped_somewhere, "no token was clipped: the clip indicator went untested"


def top_answer_share_by_hand(keep, advantages, group_index) -> float:
    """Share of kept tokens in the first largest-|advantage| row of each group, in plain Python."""
    adv, gid, per_row = advantages.abs().tolist(), group_index.tolist(), keep.sum(1).tolist()
    tops = {g: max((i for i in range(len(gid)) if gid[i] == g), key=lambda i: (adv[i], -i)) for g in set(gid)}
    return sum(per_row[i] for i in tops.values()) / max(sum(per_row), 1)


@pytest.mark.parametrize("rule", ["entropy", "gmts", "entropy_nonzero_omega"])
@pytest.mark.parametrize("scope", ["batch", "group", "microbatch"])
def test_compute_loss_on_a_multi_group_prepared_batch_in_every_scope(tmp_path, rule, scope):
    # A trainer that never generated (as a benchmark at GPU shapes calls it): the group count comes from the batch.
    trainer = make_trainer(tmp_path, token_selection=rule, selection_scope=scope, per_device_train_batch_size=16)
    batch = prepared_batch(len(trainer.processing_class), groups=4, group_size=4)
    if scope != "microbatch":
        trainer._select_generation_batch(batch)
    masks = []
    hook = trainer.get_high_entropy_mask
    trainer.get_high_entropy_mask = lambda e, m, t: masks.append(hook(e, m, t)) or masks[-1]
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert torch.isfinite(loss)
    keep = masks[0]
    valid = batch["completion_mask"]
    if scope == "group":
        for g in range(4):
            assert int(keep[4 * g: 4 * g + 4].sum()) == kept_count(int(valid[4 * g: 4 * g + 4].sum()), 0.2)
    else:
        assert int(keep.sum()) == kept_count(int(valid.sum()), 0.2)
    stats = trainer._pending_stats["train"][-1]
    assert stats["top_answer_share"].item() == pytest.approx(
        top_answer_share_by_hand(keep, batch["advantages"], batch["group_index"]))


@pytest.mark.parametrize("scope", ["batch", "group", "microbatch"])
def test_a_full_training_step_logs_the_selection_metrics(tmp_path, scope):
    trainer = make_trainer(tmp_path, selection_scope=scope)
    trainer.train()
    logs = trainer.state.log_history[0]
    for name in ("kept_fraction", "overlap", "top_answer_share", "effective_answers", "entropy_kept_mean",
                 "entropy_all_mean", "top_answer_weight_share"):
        assert f"selection/{name}" in logs, name
    assert 0.2 <= logs["selection/kept_fraction"] < 0.3
    assert math.isfinite(logs["grad_norm"])


@pytest.mark.parametrize("scope", ["batch", "microbatch"])
def test_evaluation_with_a_kl_term_ranks_with_the_policy_log_probs(tmp_path, scope):
    # In eval there is no gradient and no old_per_token_logps: omega's KL term needs the policy's log-probs anyway
    trainer = make_trainer(tmp_path, beta=0.1, selection_scope=scope, per_device_eval_batch_size=8)
    metrics = trainer.evaluate(tiny_dataset(4))
    assert math.isfinite(metrics["eval_loss"])
    assert 0.2 <= metrics["eval_selection/kept_fraction"] < 0.3


def test_eval_groups_use_num_generations_eval(tmp_path):
    trainer = make_trainer(tmp_path, num_generations_eval=2, per_device_eval_batch_size=8)
    trainer.model.eval()
    examples = [trainer.train_dataset[i // 2] for i in range(8)]  # 2 rollouts per prompt, as TRL's eval sampler
    out = trainer._generate_and_score_completions(examples)
    assert out["group_index"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("reuse", [{"num_iterations": 2}, {"steps_per_generation": 4}])
def test_an_evaluation_between_two_uses_of_a_buffered_batch_leaves_the_next_step_intact(tmp_path, reuse):
    # train: 2 groups per generation batch (8 rows or 16); eval: 4 rows, 1 group. The evaluation after step 1 used to
    # leave a group bound of 1 that the buffered batch's group 1 then overran.
    trainer = make_trainer(tmp_path, selection_scope="microbatch", max_steps=2, eval_strategy="steps", eval_steps=1,
                           per_device_eval_batch_size=4, eval_dataset=tiny_dataset(1), **reuse)
    trainer.train()
    train_logs = [h for h in trainer.state.log_history if "selection/kept_fraction" in h]
    assert len(train_logs) == 2 and all(0.2 <= h["selection/kept_fraction"] < 0.3 for h in train_logs)
    assert sum("eval_loss" in h for h in trainer.state.log_history) == 2


def test_update_cosine_callback_compares_successive_gradients_of_trainable_parameters():
    from gmts_trainer import UpdateCosine

    model = torch.nn.Sequential(torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False))
    model[1].weight.requires_grad_(False)
    model[1].weight.grad = torch.tensor([[100.0]])  # frozen: never counted
    callback = UpdateCosine()
    for grad in ([[3.0]], [[-1.5]], [[2.0]]):
        model[0].weight.grad = torch.tensor(grad)
        callback.on_pre_optimizer_step(None, None, None, model=model)
    assert [c.item() for c in callback.pending] == [-1.0, -1.0]
    wide = torch.nn.Linear(2, 1, bias=False)
    callback = UpdateCosine()
    for grad in ([[1.0, 0.0]], [[1.0, 1.0]]):
        wide.weight.grad = torch.tensor(grad)
        callback.on_pre_optimizer_step(None, None, None, model=wide)
    assert callback.pending[0].item() == pytest.approx(2**-0.5)


@pytest.mark.parametrize("rule", ["all", "gmts"])
def test_every_arm_logs_how_concentrated_each_update_is(tmp_path, rule):
    trainer = make_trainer(tmp_path, token_selection=rule, max_steps=2,
                           reward=lambda completions, **kw: [float(sum(map(ord, c)) % 3) for c in completions])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    assert "update/cosine_prev" not in logs[0] and -1.0 <= logs[1]["update/cosine_prev"] <= 1.0
    for h in logs:
        assert 0.0 <= h["selection/top_answer_weight_share"] <= 1.0
        assert h["selection/effective_answers"] >= 1.0
    if rule == "all":
        assert logs[0]["selection/kept_fraction"] == 1.0 and "selection/overlap" not in logs[0]


# ---------------------------------------------------------------- seeding
def test_same_seed_gives_bit_identical_lora_init_even_after_the_rng_moved(tmp_path):
    adapters = []
    for advance in (0, 1000):
        torch.rand(advance)  # move the global RNG before construction
        trainer = make_trainer(tmp_path, seed=17)
        adapters.append({k: v.clone() for k, v in trainer.model.named_parameters() if "lora_A" in k})
    assert adapters[0].keys() and adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])
    other = make_trainer(tmp_path, seed=18)
    assert not all(torch.equal(v, dict(other.model.named_parameters())[k]) for k, v in adapters[0].items())


# ---------------------------------------------------------------- gradients flow only through kept tokens
def hold_policy_logps(trainer) -> dict:
    """Keep the log-probs of the last grad-enabled policy forward in the returned dict (key "logps"), with their
    .grad retained, so a test can read the gradient each token received."""
    held = {}
    forward = trainer._get_per_token_logps_and_entropies

    def spy(*args, **kwargs):
        logps, ent, aux = forward(*args, **kwargs)
        if torch.is_grad_enabled():
            logps.retain_grad()
            held["logps"] = logps
        return logps, ent, aux

    trainer._get_per_token_logps_and_entropies = spy
    return held


def test_dropped_tokens_get_exactly_zero_gradient(tmp_path):
    trainer = make_trainer(tmp_path, gradient_accumulation_steps=1, peft=False)
    out = next(o for seed in range(20) if (o := generation_batch(trainer, seed))["advantages"].abs().sum() > 0)
    held = hold_policy_logps(trainer)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; we call compute_loss directly
    loss = trainer.compute_loss(trainer.model, out)
    loss.backward()
    grad = held["logps"].grad
    keep, valid = out["selection_mask"], out["completion_mask"].bool()
    assert torch.all(grad[~keep] == 0), "a dropped token received gradient"
    nonzero_adv = out["advantages"].unsqueeze(1).expand_as(keep) != 0
    assert torch.all(grad[keep & nonzero_adv] != 0), "a kept token with non-zero advantage got no gradient"
    # and the loss is TRL's dapo: sum over kept tokens of -A / all completion tokens (on-policy, r = 1)
    expected = -(out["advantages"].unsqueeze(1) * keep).sum() / valid.sum()
    assert torch.allclose(loss, expected, atol=1e-6)


# ---------------------------------------------------------------- omega is TRL's gradient coefficient
OMEGA_SETTINGS = {
    "off-policy": {},
    "kl": {"beta": 0.1, "use_bias_correction_kl": False},
    "kl-bias-corrected": {"beta": 0.1},  # TRL 1.16's default: use_bias_correction_kl=True
    "two-sided-clip": {"delta": 1.25},
    "vllm-is-weight": {"beta": 0.1},  # with TRL's importance-sampling weight on the policy term
    "bnpo": {"beta": 0.1, "loss_type": "bnpo"},
    "dr_grpo": {"loss_type": "dr_grpo"},
}


@pytest.mark.parametrize("name", list(OMEGA_SETTINGS))
def test_omega_is_the_coefficient_of_grad_log_prob_in_trls_loss(tmp_path, name):
    """Autograd through TRL's own `_compute_loss`: d(-loss)/d log pi_t x normalizer is omega on kept tokens, the KL
    part alone on dropped ones (TRL adds KL after the mask), 0 on padding."""
    settings = OMEGA_SETTINGS[name]
    # ETS ranks by entropy alone, so clipped tokens (omega 0 unless KL) are kept too; GMTS uses the same omega
    trainer = make_trainer(tmp_path, token_selection="entropy", selection_scope="microbatch",
                           gradient_accumulation_steps=1, per_device_train_batch_size=16, **settings)
    batch = prepared_batch(len(trainer.processing_class), groups=4, group_size=4)
    valid = batch["completion_mask"].bool()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        logps, _ = trainer.scoring_pass(batch)
    batch["old_per_token_logps"] = logps + 0.4 * torch.randn(logps.shape, generator=g)  # r spread over [0.3, 3]
    if trainer.beta:
        batch["ref_per_token_logps"] = logps + 0.5 * torch.randn(logps.shape, generator=g)
    if name == "vllm-is-weight":
        trainer.use_vllm = trainer.vllm_importance_sampling_correction = True  # the branch of `_compute_loss` only
        batch["importance_sampling_ratio"] = 0.5 + torch.rand(logps.shape, generator=g)
    normalizer = {"dapo": valid.sum(), "bnpo": valid.sum(), "dr_grpo": valid.size(0) * 12}[trainer.loss_type]
    coefficient, live, masks, omegas = loss_coefficients(trainer, batch, normalizer)
    keep, omega = masks[0], omegas[0]
    kl_only = selection_gmts_omega(torch.zeros(16), beta=trainer.beta,
                                   ref_ratio=torch.exp(batch.get("ref_per_token_logps", live) - live),
                                   ratio=torch.exp(live - batch["old_per_token_logps"]),
                                   kl_bias_correction=trainer.args.use_bias_correction_kl).expand_as(live)
    assert keep.any() and (valid & ~keep).any()
    r, a = torch.exp(live - batch["old_per_token_logps"]), batch["advantages"].unsqueeze(1)
    clipped = ((r > 1.2) & (a > 0)) | ((r < 0.8) & (a < 0))
    assert (keep & clipped).any() and (keep & ~clipped & (a != 0)).any(), "kept tokens should be clipped and not"
    torch.testing.assert_close(coefficient[keep], omega[keep], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(coefficient[valid & ~keep], kl_only[valid & ~keep], rtol=1e-4, atol=1e-5)
    assert torch.all(coefficient[~valid] == 0)


# Two-sided clipping bounds on both sides of 1 and of the clip range [0.8, 1.2]: 1.2 is 1 + epsilon_high itself
TWO_SIDED_DELTAS = [None, 0.5, 0.9, 1.0, 1.1, 1.2, 1.25, 3.0]


def test_omega_is_trls_gradient_coefficient_for_every_two_sided_clip(tmp_path):
    """Autograd through TRL's own `_compute_loss` on a grid: each row one advantage (< 0, 0, > 0), each column one
    ratio (both sides of 1 - eps_low, 1 + eps_high and every delta), every token valid and kept
    (token_selection='all'): d(-loss)/d log pi_t x normalizer is the trainer's omega at every (delta, A, r)."""
    for delta in TWO_SIDED_DELTAS:  # a delta at most 1 is refused by the config (check_sampling_and_clipping), its
        if delta is None or delta > 1:  # omega still checked below, set on the built trainer
            make_config(tmp_path, delta=delta)
        else:
            with pytest.raises(ValueError, match=f"delta={delta}: must be > 1"):
                make_config(tmp_path, delta=delta)
    trainer = make_trainer(tmp_path, token_selection="all", gradient_accumulation_steps=1,
                           per_device_train_batch_size=16)
    batch = prepared_batch(len(trainer.processing_class), groups=4, group_size=4, min_length=12)  # 16 x 12, all valid
    batch["advantages"] = torch.tensor([-2.0, -1.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0, -0.3, 0.3, 0.0, -4.0, 4.0,
                                        -0.05, 0.05])
    targets = torch.tensor([0.3, 0.7, 0.85, 0.95, 1.0, 1.05, 1.15, 1.22, 1.27, 1.6, 2.5, 4.0])  # r per column
    with torch.no_grad():
        logps, _ = trainer.scoring_pass(batch)
    batch["old_per_token_logps"] = logps - torch.log(targets)
    held = {}
    forward = trainer._get_per_token_logps_and_entropies

    def spy_forward(*args, **kwargs):
        out = forward(*args, **kwargs)
        out[0].retain_grad()
        held["logps"] = out[0]
        return out

    trainer._get_per_token_logps_and_entropies = spy_forward
    trainer.current_gradient_accumulation_steps = 1
    a = batch["advantages"].unsqueeze(1)
    for delta in TWO_SIDED_DELTAS:
        trainer.args.delta = delta  # what TRL's `_compute_loss` and the trainer's omega read
        trainer.compute_loss(trainer.model, batch).backward()
        coefficient = -held["logps"].grad * batch["completion_mask"].sum()
        live = held["logps"].detach()
        r = torch.exp(live - batch["old_per_token_logps"])
        assert ((r > 1.2) & (a > 0)).any() and ((r < 0.8) & (a < 0)).any() and ((r - 1).abs() < 0.1).any()
        omega = trainer._omega(batch, live, ratio=r).expand_as(live)
        torch.testing.assert_close(omega, coefficient, rtol=1e-5, atol=1e-6, msg=f"delta={delta}")
        if delta is not None and delta < 1.2:  # the tokens a cap read as "r > delta means 0" got wrong
            assert (coefficient[((r > delta) & (a < 0)).expand_as(r)] != 0).any()
        trainer.model.zero_grad()


@pytest.mark.parametrize("rule", ["gmts", "entropy_nonzero_omega"])
def test_off_policy_masking_and_unclipped_losses_are_refused_for_the_rules_that_rank_with_omega(tmp_path, rule):
    with pytest.raises(ValueError, match="omega does not model"):
        make_config(tmp_path, off_policy_mask_threshold=0.5, token_selection=rule)
    with pytest.raises(ValueError, match=f"token_selection='{rule}' needs a clipped-surrogate loss"):
        make_config(tmp_path, loss_type="cispo", token_selection=rule)
    make_config(tmp_path, off_policy_mask_threshold=0.5, token_selection="entropy")


def one_group_constant_reward(prompts, completions, **kwargs) -> list[float]:
    """The first prompt's group: reward by completion length parity (advantages != 0 when lengths differ); every other
    group: the same reward for all its answers (advantage 0, omega 0 on-policy with beta 0)."""
    return [float(len(c) % 2 == 0) if p == prompts[0] else 1.0 for p, c in zip(prompts, completions)]


def test_control_rule_keeps_ets_count_without_zero_omega_tokens(tmp_path):
    """token_selection='entropy_nonzero_omega' on one generation batch: the rule of selection.py with the trainer's
    omega, ETS's kept count, no token of the equal-reward group (ETS keeps some), and its logged share is 0."""
    outs, stats = {}, {}
    for rule in ("entropy", "entropy_nonzero_omega"):
        trainer = make_trainer(tmp_path, token_selection=rule, selection_entropy_source="scoring_pass",
                               reward=one_group_constant_reward)
        seed = next(s for s in range(20) if generation_batch(trainer, s)["advantages"][:4].abs().sum() > 0)
        outs[rule] = out = generation_batch(trainer, seed)
        stats[rule] = trainer._pending_stats["train"][-1]
    out, ets = outs["entropy_nonzero_omega"], outs["entropy"]
    assert torch.equal(out["completion_ids"], ets["completion_ids"])  # the same batch
    adv, mask = out["advantages"], out["completion_mask"].bool()
    assert torch.all(adv[4:] == 0) and adv[:4].abs().sum() > 0
    _, ent = trainer.scoring_pass(out)
    omega = adv.unsqueeze(1).expand_as(ent)  # on-policy, beta 0
    keep = out["selection_mask"]
    assert torch.equal(keep, select_top_fraction(ets_nonzero_omega_scores(ent, omega), mask, 0.2))
    assert int(keep.sum()) == int(ets["selection_mask"].sum()) == kept_count(int(mask.sum()), 0.2)
    assert not (keep & ~mask).any() and not keep[4:].any()
    assert ets["selection_mask"][4:].any(), "this batch does not tell the control from ETS"
    assert stats["entropy_nonzero_omega"]["zero_advantage_kept_share"].item() == 0.0
    assert stats["entropy"]["zero_advantage_kept_share"].item() > 0.0
    assert stats["entropy_nonzero_omega"]["overlap"].item() < 1.0  # the overlap is with ETS's ranking


def test_control_rule_off_policy_ranks_clipped_tokens_last(tmp_path):
    """Microbatch scope with a live ratio: omega is 0 where the clip branch is active (A != 0), so the control ranks
    those tokens after every token that moves: the same omega as GMTS, exact off-policy."""
    trainer = make_trainer(tmp_path, token_selection="entropy_nonzero_omega", selection_scope="microbatch",
                           gradient_accumulation_steps=1, per_device_train_batch_size=16)
    batch = prepared_batch(len(trainer.processing_class), groups=4, group_size=4)
    with torch.no_grad():
        logps, _ = trainer.scoring_pass(batch)
    batch["old_per_token_logps"] = logps + 0.4 * torch.randn(logps.shape, generator=torch.Generator().manual_seed(1))
    seen, select = [], trainer._select_across_processes

    def spy_select(entropy, omega, mask, *args, **kwargs):
        keep, n = select(entropy, omega, mask, *args, **kwargs)
        seen.append((entropy, omega, mask.bool(), keep))
        return keep, n

    trainer._select_across_processes = spy_select
    trainer.current_gradient_accumulation_steps = 1
    trainer.compute_loss(trainer.model, batch).backward()
    entropy, omega, valid, keep = seen[0]
    a = batch["advantages"].unsqueeze(1).expand_as(omega)
    clipped = valid & (a != 0) & (omega == 0)
    assert clipped.any() and (valid & ~clipped & (omega != 0)).sum() >= keep.sum()
    assert not (keep & (omega == 0)).any()
    assert torch.equal(keep, select_top_fraction(ets_nonzero_omega_scores(entropy, omega), valid, 0.2))


def test_dropped_tokens_get_exactly_zero_gradient_through_prepare_inputs_with_accumulation(tmp_path):
    # TRL's own path: generate once for 2 accumulation steps, shuffle, split, one microbatch per call
    trainer = make_trainer(tmp_path, gradient_accumulation_steps=2, peft=False)
    trainer.model.train()
    examples = [trainer.train_dataset[i // 4] for i in range(8)]
    torch.manual_seed(3)
    held = hold_policy_logps(trainer)
    trainer.current_gradient_accumulation_steps = 2
    kept_total = 0
    for step in range(2):
        trainer._step = step
        inputs = trainer._prepare_inputs(examples)
        trainer.compute_loss(trainer.model, inputs).backward()
        grad, keep = held["logps"].grad, inputs["selection_mask"]
        assert torch.all(grad[~keep] == 0), "a dropped token received gradient"
        nonzero_adv = inputs["advantages"].unsqueeze(1).expand_as(keep) != 0
        assert torch.all(grad[keep & nonzero_adv] != 0)
        kept_total += int(keep.sum())
    assert trainer._buffered_inputs is not None and len(trainer._buffered_inputs) == 2
    valid_total = sum(int(b["completion_mask"].sum()) for b in trainer._buffered_inputs)
    assert kept_total == kept_count(valid_total, 0.2)  # one threshold over the generation batch, split in two


# ---------------------------------------------------------------- merged-adapter generation
def test_merged_lora_generation_restores_the_base_weights_bit_for_bit(tmp_path):
    from gmts_recipe.generation.fast import merged_lora

    trainer = make_trainer(tmp_path, generation_merge_adapter=True)
    model = trainer.model
    for name, p in model.named_parameters():  # a trained-looking adapter: B is zero at init
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_lora(model):
            merged = model(input_ids=ids).logits
            assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items() if "base_layer" in k)
        again = model(input_ids=ids).logits
    assert torch.allclose(unmerged, merged, atol=1e-4)  # the same function while generating
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # exactly the same weights after
    assert torch.equal(unmerged, again)
    out = generation_batch(trainer)  # the trainer's generation path with the option on
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert int(out["selection_mask"].sum()) == kept_count(int(out["completion_mask"].sum()), 0.2)


# ---------------------------------------------------------------- compiled generation
def test_compile_cache_length_rounds_prompt_plus_completion_up_to_a_bucket():
    from gmts_recipe.generation.fast import COMPILE_CACHE_BUCKET, compile_cache_length

    assert COMPILE_CACHE_BUCKET == 256
    assert compile_cache_length([[1] * 10, [1] * 300], 12, None) == 512
    assert compile_cache_length([[1] * 200], 56, "auto") == 256  # exactly one bucket
    assert compile_cache_length([[1] * 201], 56, None) == 512
    assert compile_cache_length([[1] * 180], 70, None) == 256  # 250 tokens
    assert compile_cache_length([[1] * 180], 70, 64) == 512  # TRL pads the prompt to 192 first: 262 tokens


@pytest.mark.parametrize("overrides,match", [
    ({"use_vllm": True}, "use_vllm=True does not use"),
    ({"use_transformers_continuous_batching": True}, "use_transformers_continuous_batching=True does not use"),
    ({"cache_implementation": "dynamic"}, "cache_implementation='dynamic' is not one"),
    ({"generation_kwargs": {"cache_implementation": "offloaded"}}, "cache_implementation='offloaded' is not one"),
    ({"pad_to_multiple_of": 64}, "pad_to_multiple_of=64: sampling met NaN"),
])
def test_generation_compile_refuses_paths_it_cannot_compile(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        make_config(tmp_path, generation_compile=True, **overrides)
    make_config(tmp_path, **overrides)  # each is fine without generation_compile


def test_generation_compile_turns_on_transformers_compiled_decoding(tmp_path):
    from gmts_recipe.generation.fast import compile_cache_length

    plain = make_trainer(tmp_path)
    assert plain.generation_config.disable_compile  # what TRL does
    trainer = make_trainer(tmp_path, generation_compile=True, generation_merge_adapter=True)
    g = trainer.generation_config
    assert not g.disable_compile and g.cache_implementation == "static"
    assert g.compile_config.dynamic is False  # one static graph per shape, never transformers' automatic dynamic
    prompts = []
    generate = trainer._generate_single_turn

    def spy(prompt_ids, *args, **kwargs):
        prompts.append(prompt_ids)
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = spy
    out = generation_batch(trainer)
    assert len(prompts) == 1
    expected = compile_cache_length(prompts[0], trainer.max_completion_length, trainer.pad_to_multiple_of)
    assert g.max_cache_len == expected
    model = trainer.accelerator.unwrap_model(trainer.model).get_base_model()
    assert model._previous_max_cache_length >= expected  # transformers sized its static cache from the bucket
    # generation-time entropy is still recorded on this path, and selection keeps the exact count
    assert trainer.entropy_source_used == "generation"
    assert int(out["selection_mask"].sum()) == kept_count(int(out["completion_mask"].sum()), 0.2)


@pytest.mark.parametrize("source", ["auto", "scoring_pass"])
def test_input_grad_hooks_do_not_pile_up_over_steps(tmp_path, source):
    """TRL re-enables gradient checkpointing after every generation and no-grad scoring pass, and transformers adds a
    hook each time (10 after 4 steps before)."""
    trainer = make_trainer(tmp_path, gradient_checkpointing=True, max_steps=4, selection_entropy_source=source)
    trainer.train()
    assert trainer.entropy_source_used == ("generation" if source == "auto" else "extra_scoring_pass")
    model = trainer.accelerator.unwrap_model(trainer.model)
    hooks = [h for h in model.get_input_embeddings()._forward_hooks.values()
             if h.__name__ == "make_inputs_require_grads"]
    assert len(hooks) == 1
    assert model.get_input_embeddings()(torch.tensor([[1, 2]])).requires_grad  # the one kept still works


def test_input_grad_hooks_are_lifted_while_generating_and_put_back(tmp_path):
    from gmts_recipe.generation.fast import without_input_grad_hooks

    trainer = make_trainer(tmp_path, generation_compile=True, gradient_checkpointing=True)
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.enable_input_require_grads()
    emb = model.get_input_embeddings()
    names = lambda: [h.__name__ for h in emb._forward_hooks.values()]  # noqa: E731
    before = names()
    assert "make_inputs_require_grads" in before
    with without_input_grad_hooks(model):
        assert "make_inputs_require_grads" not in names()
    assert sorted(names()) == sorted(before)
    # the training forward still gets an embedding output that requires grad (what checkpointing needs)
    out = emb(torch.tensor([[1, 2]]))
    assert out.requires_grad


# ---------------------------------------------------------------- the compiled decode step (decode_loop.py)
def test_compiled_step_loop_generates_what_generate_does_and_feeds_the_recorder(tmp_path, monkeypatch):
    """Same seed, first generation batch: generation_decode_loop="compiled_step" (eager on the CPU, the exponential
    sampler: torch.multinomial's own single-draw algorithm, so the same random numbers as generate's multinomial)
    gives the same completions as transformers' generate, and its entropy, computed inside the step, reaches the
    batch-scope selection with no scoring pass (the same kept tokens)."""
    from gmts_recipe.generation import fast

    calls = []
    original = fast.sample_with_config
    monkeypatch.setattr(fast, "sample_with_config", lambda *a, **k: calls.append(k) or original(*a, **k))
    out, entropy = {}, {}
    for loop in ("transformers", "compiled_step"):
        trainer = make_trainer(tmp_path, temperature=0.7, generation_decode_loop=loop)
        batch_entropy = trainer.generation_entropy

        def spy(*args, loop=loop, batch_entropy=batch_entropy):
            entropy[loop], logps = batch_entropy(*args)
            return entropy[loop], logps

        trainer.generation_entropy = spy
        out[loop] = generation_batch(trainer)
        assert trainer.entropy_source_used == "generation"
    assert len(calls) == 1 and calls[0]["return_entropy"]  # the loop decoded, once, with the entropy buffer
    ref, got = out["transformers"], out["compiled_step"]
    assert ref["completion_mask"].sum(1).min() < ref["completion_ids"].size(1)  # a row stopped at EOS
    assert torch.equal(got["completion_ids"], ref["completion_ids"])
    assert entropy["compiled_step"].shape == entropy["transformers"].shape
    torch.testing.assert_close(entropy["compiled_step"], entropy["transformers"], rtol=1e-5, atol=1e-5)
    assert torch.equal(got["selection_mask"], ref["selection_mask"])


def test_compiled_step_loop_restores_generate_and_refuses_other_inputs(tmp_path):
    from gmts_recipe.generation.fast import with_decode_loop

    trainer = make_trainer(tmp_path)
    model = trainer.accelerator.unwrap_model(trainer.model)
    with with_decode_loop(model, cache_len=64):
        with pytest.raises(ValueError, match="decodes token ids only, not pixel_values"):
            model.generate(input_ids=torch.ones(1, 2, dtype=torch.long), attention_mask=torch.ones(1, 2),
                           generation_config=trainer.generation_config, pixel_values=torch.zeros(1))
    assert "generate" not in vars(model)  # the class method again


@pytest.mark.parametrize("overrides,match", [
    ({"generation_decode_loop": "compiled"}, "generation_decode_loop='compiled' is not one of transformers, "
                                             "compiled_step"),
    ({"use_vllm": True}, "use_vllm=True does not use"),
    ({"use_transformers_continuous_batching": True}, "use_transformers_continuous_batching=True does not use"),
    ({"use_transformers_paged": True}, "use_transformers_continuous_batching=True does not use"),
    ({"top_k": 50}, "top_k=50 unsupported"),
    ({"top_p": 0.9}, "top_p=0.9 unsupported"),
    ({"min_p": 0.1}, "min_p=0.1 unsupported"),
    ({"repetition_penalty": 1.1}, "repetition_penalty=1.1 unsupported"),
    ({"temperature": 0.0}, "temperature=0.0: must be > 0"),  # the method's refusal, before the speed options'
])
def test_compiled_step_loop_refuses_at_config_what_it_cannot_sample(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match) as err:
        make_config(tmp_path, **{"generation_decode_loop": "compiled_step", **overrides})
    assert "\n" not in str(err.value)
    if "generation_decode_loop" not in overrides and "temperature" not in overrides:
        make_config(tmp_path, **overrides)  # each is fine with transformers' generate (temperature 0 is refused for
        # every generation: tests/test_refusals.py)


@pytest.mark.parametrize("setting,match", [
    ({"suppress_tokens": [5]}, r"suppress_tokens=\[5\] unsupported"),
    ({"min_new_tokens": 3}, "min_new_tokens=3 unsupported"),
    ({"temperature": 0.5}, "would sample at temperature 0.5"),
    ({"typical_p": 0.9}, "typical_p=0.9 unsupported"),
    ({"stop_strings": ["="]}, r"stop_strings=\['='\] unsupported"),
    ({"top_k": 5}, "top_k=5 unsupported"),
    ({"do_sample": False}, "do_sample=False unsupported"),  # greedy: the recorder's list cannot see it either
    ({"num_beams": 2}, "num_beams=2 unsupported"),
    ({"no_repeat_ngram_size": 3}, "no_repeat_ngram_size=3 unsupported"),
    ({"bad_words_ids": [[5]]}, r"bad_words_ids=\[\[5\]\] unsupported"),
    ({"length_penalty": 0.5}, "length_penalty=0.5 unsupported"),  # the recorder's allow-list accepted it
    ({"return_dict_in_generate": True}, "return_dict_in_generate=True unsupported"),
    ({"top_k": None}, "top_k=50 unsupported"),  # unset: generate fills in transformers' default 50
])
def test_compiled_step_loop_refuses_generation_settings_it_would_drop(tmp_path, setting, match):
    with pytest.raises(ValueError, match=match) as err:
        make_trainer(tmp_path, generation_decode_loop="compiled_step", generation_kwargs=setting)
    assert "\n" not in str(err.value)


def test_compiled_step_loop_refuses_a_checkpoint_generation_config_it_would_drop(tmp_path):
    """A field TRL leaves unset (min_p, suppress_tokens) is filled from the model's generation_config by generate."""
    tok = tiny_tokenizer()
    for name, value, match in (("min_p", 0.05, "min_p=0.05 unsupported"),
                               ("suppress_tokens", [5], r"suppress_tokens=\[5\] unsupported"),
                               ("forced_eos_token_id", 3, "forced_eos_token_id=3 unsupported")):
        model = tiny_model(tok)
        setattr(model.generation_config, name, value)
        with pytest.raises(ValueError, match=match):
            FastGMTSTrainer(model=model, reward_funcs=digit_reward, processing_class=tok, train_dataset=tiny_dataset(16),
                            args=make_config(tmp_path, generation_decode_loop="compiled_step"))


@pytest.mark.parametrize("rule, bf16", [("entropy", False), ("gmts", True)])
def test_gradient_checkpointing_changes_no_gradient_bit(tmp_path, rule, bf16):
    """Why gradient_checkpointing is an execution option (recorded with each arm, out of the config hash): the loss
    and every LoRA gradient of one update are the same bit for bit with and without it (float32, and bf16 autocast
    over float32 weights as on a GPU): the recomputed forward is the same computation."""
    out = {}
    for checkpointing in (True, False):
        trainer = make_trainer(tmp_path / str(checkpointing), token_selection=rule, bf16=bf16,
                               gradient_checkpointing=checkpointing)
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()
        if checkpointing:  # Trainer.train() turns it on; compute_loss alone does not
            trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        layer = next(m for name, m in trainer.model.named_modules() if name.endswith("layers.0"))
        calls = []
        layer.register_forward_pre_hook(lambda *_: calls.append(1))
        loss = trainer.compute_loss(trainer.model, prepared_batch(len(trainer.processing_class), groups=4,
                                                                  group_size=4))
        loss.backward()
        assert len(calls) == (2 if checkpointing else 1)  # on: the backward ran the layer's forward again
        out[checkpointing] = loss.detach(), {n: p.grad for n, p in trainer.model.named_parameters()
                                             if p.grad is not None}
    (loss_on, on), (loss_off, off) = out[True], out[False]
    assert torch.equal(loss_on, loss_off) and loss_on.item() != 0.0
    assert on.keys() == off.keys() and len(on) == 8  # LoRA A and B of q and v, two layers
    assert all(torch.equal(on[n], off[n]) for n in on)
    assert any(g.abs().max() > 0 for g in on.values())
