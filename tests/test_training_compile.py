"""training_compile: the decoder layers compiled for the training forward and backward (regional compilation).

The fast tests compile with backend "aot_eager" (dynamo's capture and AOTAutograd's forward/backward split, without
inductor's C++ code generation, minutes on this CPU); the inductor variant is marked slow. Tolerance rtol 1e-5: aot_eager
runs the same operations (bit-identical here, in fp32 and under bf16 autocast); inductor fuses and reorders them (fp32:
log-probs within 5e-7, LoRA gradients within ~1e-6 of their largest). TRL's GRPOConfig turns bf16 on by default, so
the fp32 tests set bf16=False.
"""

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, PeftModel
from safetensors.torch import load_file
from torch._dynamo.utils import counters
from transformers import TrainerCallback

import recipe
from gmts_recipe import training_speed
from gmts_recipe.training_speed import layer_forwards, repeated_layers
from gmts_recipe.fast_trainer import FastGMTSTrainer
from test_trainer import LORA, make_config, make_trainer
from tiny import prepared_batch, tiny_model, tiny_tokenizer

RTOL, ATOL = 1e-5, 1e-7


def varied_reward(completions, **kwargs) -> list[float]:
    """Rewards that differ within a group: non-zero advantages, so the first step has a gradient."""
    return [float(sum(map(ord, c)) % 3) for c in completions]


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    """Each test counts its own compiles: no graph of another test (or another backend) is reused."""
    monkeypatch.setattr(training_speed, "TRAINING_COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    training_speed.compiled_forward.cache_clear()
    counters.clear()
    yield
    torch._dynamo.reset()
    training_speed.compiled_forward.cache_clear()


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


class GraphsPerStep(TrainerCallback):
    def __init__(self):
        self.graphs: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.graphs.append(graphs())


def one_step(tmp_path, training_compile: bool, **overrides):
    """One training step that saves its adapter; what the layers ran in generation and in the loss forward."""
    trainer = make_trainer(tmp_path, reward=varied_reward, training_compile=training_compile, save_strategy="steps",
                           save_steps=1, **overrides)
    seen = {"generation": [], "loss": []}
    generate, compute_loss = trainer._generate_single_turn, trainer._compute_loss

    def compiled_now():
        return ["forward" in layer.__dict__ for layer in repeated_layers(trainer.model)]

    def watched_generate(*args, **kwargs):
        seen["generation"].append(compiled_now())
        return generate(*args, **kwargs)

    def watched_loss(*args, **kwargs):
        seen["loss"].append(compiled_now())
        return compute_loss(*args, **kwargs)

    trainer._generate_single_turn, trainer._compute_loss = watched_generate, watched_loss
    trainer.train()
    loss = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, loss, trainer._update_cosine.previous, seen


@pytest.mark.parametrize("checkpointing,bf16", [(False, False), pytest.param(True, True, marks=pytest.mark.slow)],
                         ids=["fp32", "bf16-checkpointing"])
def test_one_step_compiled_matches_eager_and_saves_the_same_adapter(tmp_path, checkpointing, bf16):
    options = dict(gradient_checkpointing=checkpointing, bf16=bf16)  # bf16: autocast, float32 weights, as on the GPU
    eager, loss_eager, grad_eager, seen_eager = one_step(tmp_path / "eager", False, **options)
    assert graphs() == 0 and eager.training_layers == []
    trainer, loss, grad, seen = one_step(tmp_path / "compiled", True, **options)
    assert trainer.lora_autocast_inputs_on is bf16
    assert graphs() > 0  # the layers did run compiled
    assert len(trainer.training_layers) == 2
    # compiled in both loss forwards of the step (2 microbatches), their own forwards while generating and after
    assert seen["loss"] == [[True, True]] * 2 and seen["generation"] == [[False, False]]
    assert seen_eager["loss"] == [[False, False]] * 2
    assert not any("forward" in layer.__dict__ for layer in trainer.training_layers)
    assert len(loss) == 1 and loss == pytest.approx(loss_eager, rel=RTOL)
    assert grad.abs().sum() > 0 and torch.allclose(grad, grad_eager, rtol=RTOL, atol=ATOL)
    if not bf16:  # aot_eager runs eager's operations: the LoRA gradients are eager's to the bit (layer 0's input
        assert torch.equal(grad, grad_eager)  # gradient, computed now and read by nobody, changes none of them)
    # the saved adapter: same keys (no "_orig_mod."), and it loads back into a fresh model with the trained values
    saved = {name: load_file(run / "checkpoint-1" / "adapter_model.safetensors")
             for name, run in (("eager", tmp_path / "eager"), ("compiled", tmp_path / "compiled"))}
    assert sorted(saved["compiled"]) == sorted(saved["eager"]) and not any("_orig_mod" in k for k in saved["compiled"])
    loaded = PeftModel.from_pretrained(tiny_model(tiny_tokenizer()), str(tmp_path / "compiled" / "checkpoint-1"))
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert len(lora) == len(saved["compiled"]) and all(
        torch.equal(p, dict(loaded.named_parameters())[n]) for n, p in lora.items())


def varied_prompt_trainer(tmp_path, max_steps: int, **overrides) -> FastGMTSTrainer:
    tok = tiny_tokenizer()
    prompts = Dataset.from_list([{"prompt": "1" * k + "=", "answer": "1"} for k in range(1, 17)])  # 2 to 17 tokens
    args = make_config(tmp_path, training_compile=True, max_steps=max_steps, gradient_checkpointing=False, **overrides)
    return FastGMTSTrainer(model=tiny_model(tok), reward_funcs=varied_reward, train_dataset=prompts, args=args,
                           processing_class=tok, peft_config=LoraConfig(**LORA))


def test_the_first_step_compiles_every_graph_and_the_next_arm_compiles_none(tmp_path):
    trainer = varied_prompt_trainer(tmp_path / "gmts", max_steps=6)
    widths, counted = [], GraphsPerStep()
    original = trainer._compute_loss

    def watched_loss(model, inputs):
        widths.append(inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1))
        return original(model, inputs)

    trainer._compute_loss = watched_loss
    trainer.add_callback(counted)
    trainer.train()
    assert len(set(widths)) >= 3, widths  # sequence lengths vary from step to step
    # the first step compiles one symbolic graph for every layer, without checkpointing too (the first layer's input,
    # which needs no grad, enters as a view that does; before: a second graph for it, [2, 2, ...]); every later
    # length reuses it (40 steps: the same)
    assert counted.graphs == [1, 1, 1, 1, 1, 1]  # dynamic=None compiled static, then symbolic: [1, 2, 2, ...]
    # the next arm of the same process (a new model and trainer) reuses the graph: compile once per process
    varied_prompt_trainer(tmp_path / "ets", max_steps=2, token_selection="entropy", seed=7).train()
    assert graphs() == 1


def test_logps_and_entropy_of_the_training_forward_match_eager(tmp_path):
    trainer = make_trainer(tmp_path, training_compile=True, bf16=False)
    batch = prepared_batch(len(trainer.processing_class), groups=2, completion=9)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    mask[0, :2] = 0  # left padding in one row
    trainer.model.train()
    out = {}
    for compiled in (False, True):
        with layer_forwards(trainer.training_layers, compiled):
            out[compiled] = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, ids.size(1) - batch["prompt_ids"].size(1), compute_entropy=True)
    assert graphs() > 0
    for eager, compiled in zip(out[False][:2], out[True][:2]):
        assert compiled.requires_grad is eager.requires_grad
        assert torch.allclose(compiled, eager, rtol=RTOL, atol=ATOL)


def test_repeated_layers_are_the_decoder_layers():
    model = tiny_model(tiny_tokenizer(), layers=3)
    assert repeated_layers(model) == list(model.model.layers)


def test_the_option_is_a_speed_option_left_out_of_the_hash_and_recorded_with_the_arm():
    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false"]
    off, on = (recipe.parse([*flags, "--training_compile", value]) for value in ("false", "true"))
    assert off[1].training_compile is False and on[1].training_compile is True
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert "training_compile" in recipe.GENERATION_OPTIONS


@pytest.mark.slow
def test_one_step_compiled_with_inductor_matches_eager(tmp_path, monkeypatch):
    monkeypatch.setattr(training_speed, "TRAINING_COMPILE_BACKEND", "inductor")
    _, loss_eager, grad_eager, _ = one_step(tmp_path / "eager", False, bf16=False)
    _, loss, grad, _ = one_step(tmp_path / "compiled", True, bf16=False)
    assert graphs() > 0
    assert loss == pytest.approx(loss_eager, rel=RTOL)
    assert torch.allclose(grad, grad_eager, rtol=1e-4, atol=1e-6)
