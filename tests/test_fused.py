"""generation_fused_projections: q/k/v and gate/up as one matrix product each in decode_loop.sample (tiny random Qwen2
and Llama models, float32, CPU)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_decode_loop import RAGGED, counting_backend, grouped, sharpen, trained_peft_model
from tiny import tiny_model, tiny_tokenizer
from torch.utils._python_dispatch import TorchDispatchMode

from gmts_recipe.generation import decode_loop, fused
from gmts_recipe.speed_options import SpeedOptions

MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.baddbmm.default}


def tiny_llama(tok, layers: int = 2):
    """The tiny model's shapes as a Llama (SmolLM2's architecture): no q/k/v bias, an MLP bias to fuse one too."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, mlp_bias=True,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                         tie_word_embeddings=True)
    return LlamaForCausalLM(config)


MODELS = {"qwen2": tiny_model, "llama": tiny_llama}


@pytest.fixture(scope="module", params=list(MODELS))
def tiny(request):
    tok = tiny_tokenizer()
    return tok, sharpen(MODELS[request.param](tok).eval())


class _CountMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func in MATMULS
        return func(*args, **(kwargs or {}))


def _sample(model, batch, fused_projections: bool, seed: int = 3, compiled: bool = False, **options):
    torch.manual_seed(seed)
    return decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=16, temperature=0.8,
                              eos_token_ids=[1, 5], pad_token_id=0, compiled=compiled, return_entropy=True,
                              fused_projections=fused_projections, **options)


def _batch(tok, prompts=RAGGED):
    return tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)


@pytest.mark.parametrize("sampler", ["multinomial", "exponential"])
def test_fused_projections_sample_the_tokens_and_entropy_of_the_separate_ones(tiny, sampler):
    """At the same seed the loop with the projections fused samples the very tokens, with the very entropy (bit for
    bit), of the loop without: on the CPU in float32 each column of the fused product is the dot product the separate
    product computes, in the same order. The logits of a forward inside the block equal the plain forward's exactly,
    and a forward runs 4 matrix products per layer instead of 7 (plus the rotary angles' and the LM head's)."""
    tok, model = tiny
    batch = _batch(tok)
    off = _sample(model, batch, False, sampler=sampler)
    on = _sample(model, batch, True, sampler=sampler)
    assert torch.equal(on[0], off[0]) and torch.equal(on[1], off[1])
    assert on[0].size(1) > batch["input_ids"].size(1) + 4  # tokens were sampled, not only the prompt
    layers = model.config.num_hidden_layers
    counts = {}
    with torch.no_grad():
        for on_ in (False, True):
            with fused.fused_projections(model) if on_ else contextlib.nullcontext(), _CountMatmuls() as mode:
                counts[on_] = (model(**batch).logits, mode.count)
    assert torch.equal(counts[True][0], counts[False][0])
    assert (counts[False][1], counts[True][1]) == (7 * layers + 2, 4 * layers + 2)  # + rotary angles, LM head


@pytest.mark.parametrize("regions", [False, True], ids=["unrolled", "regions"])
def test_the_compiled_step_traces_the_fused_projections_in_one_graph_with_the_tokens_of_eager(monkeypatch, regions):
    """Compiled (dynamo and AOT autograd, backend aot_eager, fullgraph: no graph break through the owners' instance
    forwards and the slices), also with the decoder layers as nested compile regions (configs/paper.yaml's setting),
    the fused step samples eager's tokens and entropy; a second call of the same shape, after the weights changed
    (a training step), compiles nothing new and samples what eager samples with the new weights: the fused copies are
    refilled, at the same addresses (a recorded CUDA graph reads them there)."""
    graphs, counting = counting_backend(monkeypatch)
    tok = tiny_tokenizer()
    model = sharpen(tiny_model(tok, layers=3).eval())
    batch = _batch(tok, grouped(RAGGED, 2))
    addresses = []
    for call in range(2):
        if call:
            with torch.no_grad():
                for layer in model.model.layers:
                    layer.mlp.up_proj.weight.mul_(1.5)
                    layer.self_attn.v_proj.bias.add_(0.25)
        eager = _sample(model, batch, True)
        compiled = _sample(model, batch, True, compiled=True, compile_backend=counting, compile_regions=regions)
        assert torch.equal(compiled[0], eager[0])
        torch.testing.assert_close(compiled[1], eager[1])
        assert torch.equal(eager[0], _sample(model, batch, False)[0])
        kept = [fused._FUSED[layer.mlp] for layer in model.model.layers]
        addresses.append([k.weight.data_ptr() for k in kept])
        for layer, k in zip(model.model.layers, kept):
            assert torch.equal(k.weight, torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]))
    assert len(graphs) == 1 and addresses[0] == addresses[1]
    if regions:
        calls = [n for n in graphs[0].graph.nodes if n.target is torch.ops.higher_order.invoke_subgraph]
        assert len(calls) == 3


def _snapshot(model):
    """The module tree (names and objects), every parameter (object and a copy of its value), every module's own
    forward attribute."""
    return ([(name, m) for name, m in model.named_modules()],
            [(name, p, p.detach().clone(), p.requires_grad) for name, p in model.named_parameters()],
            [name for name, m in model.named_modules() if "forward" in vars(m)])


def _same(before, after) -> bool:
    return (before[0] == after[0] and before[2] == after[2] and len(before[1]) == len(after[1])
            and all(n1 == n2 and p1 is p2 and torch.equal(v1, v2) and g1 == g2
                    for (n1, p1, v1, g1), (n2, p2, v2, g2) in zip(before[1], after[1])))


def test_after_generation_the_peft_model_is_the_original_bit_for_bit_also_after_an_exception():
    """The trainer's generation: a PEFT model with a LoRA adapter (not zero) on q, v and up, merged for the call
    (merged_lora), sampled with the projections fused. Afterwards every module of the tree is the original object
    in its place, no module has a forward of its own, every parameter is the same object with the same value bit
    for bit and the same requires_grad (what the training step sees); also when the block raises. Unmerged, the
    adapter's layers are refused in one line (the fused product would leave the adapter out)."""
    from peft import LoraConfig, get_peft_model

    from gmts_recipe.generation.fast import merged_lora

    tok = tiny_tokenizer()
    peft_model = get_peft_model(sharpen(tiny_model(tok)), LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)).train()
    batch = _batch(tok)
    before = _snapshot(peft_model)
    with torch.no_grad(), merged_lora(peft_model):
        merged = _sample(peft_model, batch, True)
        assert torch.equal(merged[0], _sample(peft_model, batch, False)[0])
        with pytest.raises(RuntimeError, match="inside"), decode_loop.step_view(peft_model.get_base_model()), \
                fused.fused_projections(peft_model.get_base_model()):
            assert isinstance(peft_model.get_base_model().model.layers[0].self_attn.k_proj, fused.ProjectionSlice)
            raise RuntimeError("inside")
    assert _same(before, _snapshot(peft_model))
    with pytest.raises(ValueError, match=r"^fused_projections \(generation_fused_projections\): Qwen2Attention.q_proj "
                                         r"is a Linear, not a torch.nn.Linear \(a LoRA layer not merged: with an "
                                         r"adapter set generation_merge_adapter\); set it false") as err:
        _sample(peft_model, batch, True)
    assert "\n" not in str(err.value)
    assert _same(before, _snapshot(peft_model))


class _ReadsItsInput(torch.nn.Module):
    """q/k/v projections, and the input read once more (a residual): fusing would hand it the fused product."""

    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        return self.q_proj(x) + self.k_proj(x) + self.v_proj(x) + x


def test_a_model_it_cannot_fuse_exactly_or_an_other_path_is_refused_in_one_line(tmp_path):
    """Refused, each in one line naming the switch: a module whose forward reads its input other than through the
    projections (the line named); a model with no q/k/v or gate/up linears (GPT-2's fused c_attn); the option without
    the compiled step, in the trainer's config and in the evaluation; the trainer's LoRA model without
    generation_merge_adapter, at construction."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from eval import generate_samples
    from test_eval import _tiny_chat_model
    from test_trainer import make_config, make_trainer

    refusals = []
    with pytest.raises(ValueError, match=r"_ReadsItsInput.forward uses its input 'x' other than through "
                                         r"self.q_proj\(x\), self.k_proj\(x\), self.v_proj\(x\) and x.shape\[:-1\] "
                                         r"\(line 2 of the method\); set it false for this model") as err:
        fused.fusable_groups(_ReadsItsInput())
    refusals.append(err)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=16, n_embd=8, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match="GPT2LMHeadModel has no module with q_proj, k_proj, v_proj or gate_proj, "
                                         "up_proj as torch.nn.Linear layers to fuse") as err:
        with fused.fused_projections(gpt2):
            pass
    refusals.append(err)
    with pytest.raises(ValueError, match="with generation_decode_loop='transformers' also pass "
                                         "--generation_fused_projections false") as err:
        make_config(tmp_path, generation_fused_projections=True)
    refusals.append(err)
    base, tok = _tiny_chat_model()
    with pytest.raises(ValueError, match="set generation_decode_loop='compiled_step' or generation_fused_projections=False") as err:
        generate_samples(base, tok, [[{"role": "user", "content": "1"}]], k=1, seed=0, max_new_tokens=2,
                         progress=False, fast=True,
                         options=SpeedOptions(generation_fused_projections=True))
    refusals.append(err)
    with pytest.raises(ValueError, match="a LoRA layer not merged: with an adapter set generation_merge_adapter") as err:
        make_trainer(tmp_path, generation_decode_loop="compiled_step", generation_fused_projections=True)
    refusals.append(err)
    assert all("\n" not in str(e.value) for e in refusals)


def test_the_trainers_rollouts_and_the_evaluation_are_the_same_with_the_projections_fused(tmp_path, monkeypatch):
    """The switch reaches the trainer's generation (with_decode_loop) and every evaluation (Run._evaluate ->
    evaluate_pass_at_1 -> generate_samples); it is not in the config hash (the same numbers up to rounding), it is
    recorded with the arm's generation options, and configs/paper.yaml turns it on (identical on an H200:
    bench/repeat-options-h200-s211.json). A training batch's rollouts with it on equal those with it off at the same
    seed, and the trainer's model is the original afterwards."""
    import recipe
    from test_decoding import check_rounding_only_switch
    from test_trainer import generation_batch, make_trainer

    check_rounding_only_switch(monkeypatch, "generation_fused_projections")
    assert recipe.parse(["--use_cpu", "true"])[1].generation_fused_projections is True  # configs/paper.yaml

    calls, original = [], decode_loop.sample
    monkeypatch.setattr(decode_loop, "sample", lambda *a, **kw: calls.append(kw["fused_projections"]) or original(
        *a, **kw))
    completions = {}
    for switch in (False, True):
        trainer = make_trainer(tmp_path / str(switch), generation_decode_loop="compiled_step",
                               generation_merge_adapter=True, generation_fused_projections=switch)
        with torch.no_grad():
            for p in trainer.model.parameters():  # a non-zero adapter: the merged weights differ from the base
                if p.requires_grad:
                    p.add_(0.05 * torch.randn_like(p))
        before = _snapshot(trainer.model)
        completions[switch] = generation_batch(trainer, seed=2)["completion_ids"]
        assert _same(before, _snapshot(trainer.model))
    assert calls == [False, True]
    assert torch.equal(completions[True], completions[False])


def test_a_hook_on_an_owner_sees_its_input_and_output_unchanged_a_hook_on_a_projection_is_refused(tiny):
    """A forward hook on the attention (transformers installs one to capture attentions when asked) runs around the
    owner's instance forward: it sees the hidden states it always saw and the same output. A hook on a projection
    would be skipped by the fused product: refused in one line."""
    tok, model = tiny
    batch = _batch(tok)
    attention = model.model.layers[0].self_attn
    seen = []
    handle = attention.register_forward_hook(lambda module, args, kwargs, out: seen.append(
        (kwargs["hidden_states"].shape[-1], out[0])), with_kwargs=True)
    try:
        with torch.no_grad():
            model(**batch)
            with fused.fused_projections(model):
                model(**batch)
    finally:
        handle.remove()
    assert seen[0][0] == seen[1][0] == model.config.hidden_size and torch.equal(seen[0][1], seen[1][1])
    handle = attention.k_proj.register_forward_hook(lambda *a: None)
    try:
        with pytest.raises(ValueError, match=r"\.k_proj has a forward hook, which a fused product would skip"):
            fused.fusable_groups(model)
    finally:
        handle.remove()
