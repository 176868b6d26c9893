"""lora_autocast_inputs: under autocast, LoRA layers skip PEFT's float32 copy of their input, with the same numbers."""

import contextlib
from collections import Counter

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch.profiler import profile

import recipe
from gmts_recipe import fast_trainer
from gmts_recipe.fast_config import FastGMTSConfig
from gmts_recipe.fast_trainer import FastGMTSTrainer
from gmts_recipe.training_speed import lora_autocast_blockers, lora_input_casting
from tiny import tiny_dataset, tiny_model, tiny_tokenizer

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # the paper config's
LAYERS = 2  # tiny model: 2 x 7 = 14 LoRA layers


def lora_model(dtype, checkpointing=None, **lora):
    """Tiny model with frozen `dtype` weights and float32 LoRA (PEFT's default upcast), B non-zero."""
    model = tiny_model(tiny_tokenizer(), hidden=64, layers=LAYERS).to(dtype)
    torch.manual_seed(1)
    config = dict(r=8, lora_alpha=16, target_modules=ALL_LINEAR, init_lora_weights=False) | lora
    model = get_peft_model(model, LoraConfig(**config))
    if checkpointing is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing})
        model.enable_input_require_grads()
    model.train()
    return model


def loss_and_grads(model, dtype, skip_cast: bool):
    ids = torch.randint(2, 60, (4, 24), generator=torch.Generator().manual_seed(0))
    model.zero_grad(set_to_none=True)
    with lora_input_casting(model, enabled=False) if skip_cast else contextlib.nullcontext():
        with torch.autocast("cpu", dtype):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()  # outside autocast, as Trainer does: the checkpoint recompute runs here
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("checkpointing", [None, False, True], ids=["no-ckpt", "ckpt", "ckpt-reentrant"])
def test_skipping_the_cast_gives_bit_identical_loss_and_lora_gradients(dtype, checkpointing):
    model = lora_model(dtype, checkpointing)
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
    loss, grads = loss_and_grads(model, dtype, skip_cast=False)
    loss_skip, grads_skip = loss_and_grads(model, dtype, skip_cast=True)
    assert len(grads) == 4 * LAYERS * len(ALL_LINEAR) // 2  # A and B of each layer
    assert all(g.abs().sum() > 0 for g in grads.values())
    assert torch.equal(loss, loss_skip)
    assert all(torch.equal(grads[n], grads_skip[n]) for n in grads), [n for n in grads
                                                                      if not torch.equal(grads[n], grads_skip[n])]


def test_skipping_the_cast_removes_two_copies_per_lora_layer_in_forward_recompute_and_backward():
    model = lora_model(torch.bfloat16, checkpointing=False)

    def copies(skip_cast: bool) -> int:
        with profile() as prof:
            loss_and_grads(model, torch.bfloat16, skip_cast)
        return sum(e.count for e in prof.key_averages() if e.key == "aten::_to_copy")

    # PEFT's bf16 -> float32 and autocast's float32 -> bf16 of the input, in the forward, in the checkpoint's
    # recompute, and their two gradient casts in the backward
    assert copies(skip_cast=False) - copies(skip_cast=True) == 2 * 3 * LAYERS * len(ALL_LINEAR)


def test_lora_input_casting_restores_each_layers_own_value():
    model = lora_model(torch.bfloat16)
    layers = [m for m in model.modules() if hasattr(m, "cast_input_dtype_enabled")]
    layers[0].cast_input_dtype_enabled = False  # a layer someone else switched off stays off
    with lora_input_casting(model, enabled=False):
        assert not any(m.cast_input_dtype_enabled for m in layers)
        with lora_input_casting(model, enabled=True):
            assert all(m.cast_input_dtype_enabled for m in layers)
        assert not any(m.cast_input_dtype_enabled for m in layers)
    assert [m.cast_input_dtype_enabled for m in layers] == [False] + [True] * (len(layers) - 1)


@pytest.mark.parametrize("autocast,lora,blocker", [
    (None, {}, "no bf16/fp16 autocast"),
    (torch.bfloat16, {"lora_dropout": 0.05}, "lora_dropout > 0"),
    (torch.bfloat16, {"use_dora": True}, "a LoRA variant (DoraLinearVariant)"),
])
def test_the_cast_is_kept_where_skipping_it_could_change_the_numbers(autocast, lora, blocker):
    assert lora_autocast_blockers(lora_model(torch.bfloat16), torch.bfloat16) == []
    assert blocker in "; ".join(lora_autocast_blockers(lora_model(torch.bfloat16, **lora), autocast))
    assert lora_autocast_blockers(tiny_model(tiny_tokenizer()), torch.bfloat16) == [
        "not a PEFT model with adapter layers"]
    narrow = lora_model(torch.bfloat16).to(torch.bfloat16)  # bf16 adapters under fp16 autocast would round twice
    assert "neither float32 nor the autocast dtype" in lora_autocast_blockers(narrow, torch.float16)[0]


# ---------------------------------------------------------------- through the trainer
def bf16_trainer(tmp_path, lora_autocast_inputs: bool, lora=None, **overrides) -> FastGMTSTrainer:
    """bf16 base weights, float32 LoRA on every linear module, bf16 autocast (accelerate's), checkpointing."""
    tok = tiny_tokenizer()
    kw = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
              gradient_accumulation_steps=2, max_completion_length=12, max_steps=2, learning_rate=1e-2,
              logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, seed=5, temperature=1.0, bf16=True,
              gradient_checkpointing=True, lora_autocast_inputs=lora_autocast_inputs) | overrides
    return FastGMTSTrainer(
        model=tiny_model(tok).to(torch.bfloat16), args=FastGMTSConfig(**kw), train_dataset=tiny_dataset(16),
        reward_funcs=lambda completions, **_: [float(sum(map(ord, c)) % 3) for c in completions],  # varied rewards
        processing_class=tok, peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=ALL_LINEAR, **(lora or {})),
    )


def train_and_watch(trainer) -> Counter:
    """Train; count (input dtype, grad enabled) of every call of a LoRA A matrix."""
    seen = Counter()
    for name, m in trainer.model.named_modules():
        if name.endswith("lora_A.default"):
            m.register_forward_pre_hook(lambda _, args: seen.update([(args[0].dtype, torch.is_grad_enabled())]))
    trainer.train()
    return seen


def test_trainer_steps_are_bit_identical_and_skip_the_cast_only_in_the_autocast_forwards(tmp_path):
    runs = {}
    for flag in (True, False):
        trainer = bf16_trainer(tmp_path, flag)
        assert trainer.lora_autocast_inputs_on is flag
        seen = train_and_watch(trainer)
        logs = [(h["loss"], h["grad_norm"]) for h in trainer.state.log_history if "loss" in h]
        lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        layers = [m for m in trainer.model.modules() if hasattr(m, "cast_input_dtype_enabled")]
        assert len(layers) == 14 and all(m.cast_input_dtype_enabled for m in layers)  # restored after the steps
        runs[flag] = logs, lora, seen
    (logs_on, lora_on, seen_on), (logs_off, lora_off, seen_off) = runs[True], runs[False]
    assert len(logs_on) == 2 and all(grad_norm > 0 for _, grad_norm in logs_on)
    assert logs_on == logs_off
    assert all(torch.equal(lora_on[n], lora_off[n]) for n in lora_on)
    # 2 steps x 2 microbatches x 14 layers, forward and checkpoint recompute: bf16 in, not PEFT's float32 copy
    assert seen_on[(torch.bfloat16, True)] == 112 and seen_off[(torch.float32, True)] == 112
    # generation runs without autocast: PEFT's cast stays on there, with the option or without
    assert seen_on[(torch.float32, False)] == seen_off[(torch.float32, False)] > 0
    assert sum(seen_on.values()) == sum(seen_off.values())


@pytest.mark.parametrize("overrides,lora,blocker", [({"bf16": False}, {}, "no bf16/fp16 autocast"),
                                                    ({}, {"lora_dropout": 0.1}, "lora_dropout > 0")])
def test_trainer_keeps_the_cast_and_says_why_where_the_option_does_not_engage(tmp_path, monkeypatch, overrides, lora,
                                                                              blocker):
    said = []
    monkeypatch.setattr(fast_trainer.logger, "info", said.append)
    trainer = bf16_trainer(tmp_path, True, lora=lora, **overrides)
    assert trainer.lora_autocast_inputs_on is False
    assert len(said) == 1 and blocker in said[0] and "PEFT casts LoRA inputs" in said[0]


def test_the_option_is_a_speed_option_left_out_of_the_hash_and_recorded_with_the_arm():
    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false"]
    off = recipe.parse([*flags, "--lora_autocast_inputs", "false"])
    on = recipe.parse([*flags, "--lora_autocast_inputs", "true"])
    assert off[1].lora_autocast_inputs is False and on[1].lora_autocast_inputs is True
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert "lora_autocast_inputs" in recipe.GENERATION_OPTIONS
