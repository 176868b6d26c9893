"""decode_loop.sample against transformers' generate (tiny random Qwen2, float32, CPU)."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from gmts_recipe.generation import decode_loop
from gmts_recipe.speed_options import SpeedOptions

RAGGED = ["1+2=", "34+5=", "7+8+9+10=", "9=", "6+6=", "12+30+4="]  # left padding of 0 to 7 tokens
EQUAL = ["1+2=", "3+4=", "5+6=", "7+8="]  # no padding: the attention mask alone must hide the empty cache slots


def sharpen(model, factor: float = 4.0):
    """The tiny model with its embeddings (hence the tied logits) and its query/key projections scaled: at random init
    the next-token distribution is nearly uniform and attention nearly flat, so the draw is decided by the random
    numbers alone and a wrong position or mask changes no token. Scaled 4x, it does (checked by mutation)."""
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(factor)
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(factor)
            layer.self_attn.k_proj.weight.mul_(factor)
    return model


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer()
    return tok, sharpen(tiny_model(tok).eval())


def _both(tiny, prompts, temperature, eos, max_new_tokens, seed, sampler="multinomial", cache=None, cache_len=None):
    """(model.generate, decode_loop.sample) at the same seed, completions only."""
    tok, model = tiny
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    kwargs = {"cache_implementation": cache} if cache else {}
    torch.manual_seed(seed)
    with torch.no_grad():
        ref = model.generate(**batch, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=tok.pad_token_id, **kwargs)
    torch.manual_seed(seed)
    with torch.no_grad():
        got = decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=max_new_tokens,
                                 temperature=temperature, eos_token_ids=eos, pad_token_id=tok.pad_token_id,
                                 compiled=False, sampler=sampler, cache_len=cache_len)
    return ref, got, batch["input_ids"].size(1)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
@pytest.mark.parametrize("cache", [None, "static"])
def test_tokens_equal_generate_some_rows_stop_early(tiny, temperature, cache):
    """Left-padded prompts of different lengths; EOS ids 1 and 5: at seed 3 some rows stop, others run to the limit."""
    tok, _ = tiny
    eos = [tok.eos_token_id, 5]
    ref, got, prompt_len = _both(tiny, RAGGED, temperature, eos, max_new_tokens=24, seed=3, cache=cache)
    completion = ref[:, prompt_len:]
    stopped = torch.isin(completion, torch.tensor(eos)).any(dim=1)
    assert 0 < int(stopped.sum()) < len(RAGGED)  # the EOS path and the limit are both exercised
    assert completion.size(1) == 24
    assert bool((completion[stopped][:, -1] == tok.pad_token_id).all())  # pad after EOS
    assert torch.equal(got, ref)


@pytest.mark.parametrize("sampler", ["multinomial", "exponential"])
def test_all_rows_stop_before_the_limit_surplus_steps_cut(tiny, sampler):
    """Six EOS ids: every row stops well before 40 tokens; the steps run until the flag is read are cut. The
    exponential sampler is torch.multinomial's own single-draw algorithm (argmax(p / Exp(1)), ATen's fast path for one
    sample), so in eager on the CPU it gives the same tokens too."""
    eos = [1, 5, 9, 13, 17, 21]
    for prompts in (RAGGED, EQUAL):
        ref, got, prompt_len = _both(tiny, prompts, 1.0, eos, max_new_tokens=40, seed=0, sampler=sampler)
        assert ref.size(1) - prompt_len < 40 - decode_loop.CHECK_EVERY  # stopped early, past a flag read
        assert torch.equal(got, ref)


def test_exponential_sampler_matches_softmax_over_temperature():
    """20,000 draws of one row: each token's frequency within 0.012 of softmax(logits / T) (about 3.4 standard
    deviations at p = 0.5); the -inf token is never drawn."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, float("-inf")])
    temperature, draws = 0.7, 20_000
    generator = torch.Generator().manual_seed(0)
    tokens = decode_loop.sample_next(logits.expand(draws, -1), temperature, "exponential", generator)
    freq = torch.bincount(tokens, minlength=logits.numel()).double() / draws
    expected = torch.softmax(logits.double() / temperature, dim=-1)
    assert float((freq - expected).abs().max()) < 0.012
    assert int(freq[-1] * draws) == 0


@pytest.mark.parametrize("bad, reason", [
    ({"temperature": 0.0}, "temperature 0.0"),
    ({"top_k": 50}, "top_k=50"),
    ({"top_p": 0.9}, "top_p=0.9"),
    ({"min_p": 0.1}, "min_p=0.1"),
    ({"repetition_penalty": 1.1}, "repetition_penalty=1.1"),
    ({"sampler": "greedy"}, "unknown sampler"),
    ({"cache_len": 8}, "cache_len 8"),
])
def test_unsupported_settings_refused(tiny, bad, reason):
    tok, model = tiny
    batch = tok(RAGGED[:2], return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    kwargs = {"max_new_tokens": 4, "temperature": 1.0, "eos_token_ids": 1, "pad_token_id": 0, "compiled": False} | bad
    with pytest.raises(ValueError, match=reason):
        decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], **kwargs)


def test_right_padding_refused(tiny):
    tok, model = tiny
    batch = tok(RAGGED[:2], return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with pytest.raises(ValueError, match="left-padded"):
        decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=4, temperature=1.0,
                           eos_token_ids=1, pad_token_id=0, compiled=False)


def grouped(prompts, k):
    """Each prompt k times in a row: the layout of eval.generate_samples' batches (k samples of one prompt)."""
    return [p for p in prompts for _ in range(k)]


@pytest.mark.parametrize("kernel, entropy, rows_per_prompt", [(None, False, 1), (None, True, 1), ("matmul", True, 1),
                                                              (None, True, 2)])
def test_compiled_step_traces_as_one_graph(tiny, kernel, entropy, rows_per_prompt):
    """compiled=True with fullgraph=True through dynamo and AOT autograd (backend aot_eager: no CUDA graphs on the
    CPU): no graph break in the step, also through grouped attention's matmul kernel (the bench's setting), with
    the entropy buffer (the trainer's setting) and after a shared prefill (the evaluation's), and the same tokens and
    entropy as eager at the same seed."""
    import contextlib

    from gmts_recipe.generation.attention import grouped_query_attention

    tok, model = tiny
    prompts = RAGGED if rows_per_prompt == 1 else grouped(RAGGED[:3], rows_per_prompt)
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    out = {}
    with grouped_query_attention(model, kernel) if kernel else contextlib.nullcontext():
        for compiled in (False, True):
            torch.manual_seed(1)
            with torch.no_grad():
                out[compiled] = decode_loop.sample(model, batch["input_ids"], batch["attention_mask"],
                                                   max_new_tokens=12, temperature=0.8, eos_token_ids=[1, 5],
                                                   pad_token_id=0, compiled=compiled, compile_backend="aot_eager",
                                                   return_entropy=entropy, rows_per_prompt=rows_per_prompt)
    if entropy:
        (tokens, ent), (eager_tokens, eager_ent) = out[True], out[False]
        assert torch.equal(tokens, eager_tokens)
        torch.testing.assert_close(ent, eager_ent)
    else:
        assert torch.equal(out[True], out[False])


def test_entropy_is_the_recorders_on_the_logits_each_token_was_drawn_from(tiny, monkeypatch):
    """The entropy written inside the step, column t, equals fast.EntropyRecorder's (transformers' logits processor)
    on the logits token t was sampled from, exactly; it is trimmed like the tokens (every row stops early here: the
    steps run past the last EOS are cut from both), and computing it moves no token."""
    from gmts_recipe.generation.fast import EntropyRecorder

    tok, model = tiny
    eos, temperature = [1, 5, 9, 13, 17, 21], 0.7
    batch = tok(RAGGED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    kwargs = dict(max_new_tokens=40, temperature=temperature, eos_token_ids=eos, pad_token_id=0, compiled=False)
    torch.manual_seed(0)
    plain = decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], **kwargs)
    recorder = EntropyRecorder(temperature)
    original = decode_loop.sample_next
    monkeypatch.setattr(decode_loop, "sample_next", lambda logits, *a, **k: recorder(None, logits) is None or
                        original(logits, *a, **k))
    torch.manual_seed(0)
    tokens, entropy = decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], return_entropy=True,
                                         **kwargs)
    assert torch.equal(tokens, plain)
    completion = tokens.size(1) - batch["input_ids"].size(1)
    assert completion < 40 - decode_loop.CHECK_EVERY and len(recorder.steps) > completion  # surplus steps were run
    assert entropy.shape == (len(RAGGED), completion) and entropy.dtype == torch.float32
    assert torch.equal(entropy, recorder.entropy(len(RAGGED), completion, entropy.device))


@pytest.mark.parametrize("prompts", [RAGGED, EQUAL], ids=["ragged", "equal"])
def test_step_logits_equal_an_uncached_forward(tiny, monkeypatch, prompts):
    """The logits every step samples from equal one plain forward over prompt + completion (no cache, the full
    2-D mask, transformers' positions): the static cache, the cache slot, the mask and the positions are right. Sampled
    tokens alone can miss a small error in them (a near-tie moves no token)."""
    tok, model = tiny
    seen = []
    original = decode_loop.sample_next
    monkeypatch.setattr(decode_loop, "sample_next", lambda logits, *a, **k: seen.append(logits.clone()) or
                        original(logits, *a, **k))
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    torch.manual_seed(2)
    with torch.no_grad():
        out = decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=16,
                                 temperature=1.0, eos_token_ids=[1], pad_token_id=0, compiled=False)
        prompt_len = batch["input_ids"].size(1)
        mask = torch.cat([batch["attention_mask"], torch.ones_like(out[:, prompt_len:])], dim=1)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        full = model(input_ids=out, attention_mask=mask, position_ids=positions).logits  # (B, P + n, V)
    steps = out.size(1) - prompt_len
    assert len(seen) >= steps
    for t in range(steps):
        torch.testing.assert_close(seen[t], full[:, prompt_len - 1 + t], atol=1e-4, rtol=1e-4)


def test_a_second_call_of_the_same_shape_reuses_the_buffers_and_starts_clean(tiny):
    """Same shape, same cache and state tensors (a CUDA graph replays only at the addresses it recorded), reset in
    place: the second call still equals generate; so does a third with fewer new tokens in the same cache length
    (the outputs are as wide as the cache: bench/step.py's 16- and 40-token profiles replay the 256-token graph)."""
    tok, _ = tiny
    eos = [tok.eos_token_id, 5]
    ref, got, prompt_len = _both(tiny, RAGGED, 1.0, eos, max_new_tokens=24, seed=3)
    assert torch.equal(got, ref)
    cache, state = decode_loop._BUFFERS[0][2:]
    ref, got, _ = _both(tiny, RAGGED[::-1], 0.7, eos, max_new_tokens=24, seed=7)
    assert decode_loop._BUFFERS[0][2] is cache and decode_loop._BUFFERS[0][3] is state
    assert torch.equal(got, ref)
    ref, got, _ = _both(tiny, RAGGED, 1.0, eos, max_new_tokens=10, seed=4, cache_len=prompt_len + 24)
    assert decode_loop._BUFFERS[0][2] is cache and decode_loop._BUFFERS[0][3] is state
    assert torch.equal(got, ref) and ref.size(1) == prompt_len + 10


def test_the_compiled_step_is_cached_per_compile_mode_and_a_bad_mode_is_refused(monkeypatch):
    """A benchmark may compile the step in both modes in one process (reduce-overhead, then max-autotune): each mode
    gets its own compiled function (a cache keyed on the backend alone would time the first mode twice)."""
    monkeypatch.setattr(decode_loop, "_COMPILED", {})
    monkeypatch.setattr(decode_loop, "COMPILE_MODE", "reduce-overhead")
    overhead = decode_loop.compiled_step()
    assert decode_loop.compiled_step() is overhead
    monkeypatch.setattr(decode_loop, "COMPILE_MODE", "max-autotune")
    autotune = decode_loop.compiled_step()
    assert autotune is not overhead and decode_loop.compiled_step() is autotune
    monkeypatch.setattr(decode_loop, "COMPILE_MODE", "max-autotun")
    with pytest.raises(ValueError, match="max-autotun'.*use one of reduce-overhead, max-autotune"):
        decode_loop.compiled_step()


@pytest.mark.parametrize("k, entropy", [(1, False), (2, True), (3, False), (3, True)])
def test_a_shared_prefill_samples_what_a_prefill_per_row_samples(tiny, monkeypatch, k, entropy):
    """rows_per_prompt=k on k consecutive copies of each ragged prompt (left padding of 0 to 7 tokens): the prefill
    runs once per prompt and its keys and values fill the group's rows; the logits every step samples from, the
    tokens and the entropy equal those of a prefill per row at the same seed (bit for bit here: the unique rows'
    prefill is the same computation per row, same cache length and mask width)."""
    tok, model = tiny
    batch = tok(grouped(RAGGED, k), return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    original = decode_loop.sample_next
    out, seen = {}, {}
    for rows_per_prompt in (1, k):
        seen[rows_per_prompt] = []
        monkeypatch.setattr(decode_loop, "sample_next", lambda logits, *a, **kw: seen[rows_per_prompt].append(
            logits.clone()) or original(logits, *a, **kw))
        torch.manual_seed(5)
        out[rows_per_prompt] = decode_loop.sample(
            model, batch["input_ids"], batch["attention_mask"], max_new_tokens=20, temperature=1.0,
            eos_token_ids=[1], pad_token_id=0, compiled=False, return_entropy=entropy, rows_per_prompt=rows_per_prompt)
    tokens, shared = (out[1][0], out[k][0]) if entropy else (out[1], out[k])
    assert torch.equal(shared, tokens)
    if entropy:
        torch.testing.assert_close(out[k][1], out[1][1])
    assert len(seen[k]) == len(seen[1]) == 20
    for per_row, once in zip(seen[1], seen[k]):
        torch.testing.assert_close(once, per_row)
    if k > 1:  # the group's rows draw their own tokens
        assert any(not torch.equal(tokens[i], tokens[i + 1]) for i in range(0, len(tokens), k))


def test_rows_that_are_not_whole_groups_of_one_prompt_are_refused(tiny):
    """A shared prefill of rows that differ would be silently wrong: 6 rows in groups of 4, groups of 2 holding two
    prompts, and equal token ids under different masks (a pad id that is also a token) are refused."""
    tok, model = tiny
    kwargs = {"max_new_tokens": 4, "temperature": 1.0, "eos_token_ids": 1, "pad_token_id": 0, "compiled": False}
    two = tok(grouped(RAGGED[:3], 2), return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    with pytest.raises(ValueError, match="rows_per_prompt=4 does not divide the 6 rows"):
        decode_loop.sample(model, two["input_ids"], two["attention_mask"], rows_per_prompt=4, **kwargs)
    with pytest.raises(ValueError, match="rows_per_prompt=3 but a group of 3 consecutive rows holds different"):
        decode_loop.sample(model, two["input_ids"], two["attention_mask"], rows_per_prompt=3, **kwargs)
    ids, mask = torch.tensor([[0, 5, 6], [0, 5, 6]]), torch.tensor([[0, 1, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="holds different prompts"):
        decode_loop.sample(model, ids, mask, rows_per_prompt=2, **kwargs)


def test_a_shared_prefill_is_refused_for_sliding_window_layers(tiny):
    """A sliding-window layer of the static cache keeps other slots than the prompt's first ones: refused."""
    from transformers import Qwen2ForCausalLM

    tok, model = tiny
    config = model.config.__class__.from_dict(model.config.to_dict() | {
        "use_sliding_window": True, "sliding_window": 4, "layer_types": ["sliding_attention"] * 2})
    sliding = Qwen2ForCausalLM(config).eval()
    batch = tok(grouped(RAGGED[:2], 2), return_tensors="pt", padding=True, padding_side="left",
                add_special_tokens=False)
    with pytest.raises(ValueError, match="rows_per_prompt > 1 needs full-attention layers only"):
        decode_loop.sample(sliding, batch["input_ids"], batch["attention_mask"], max_new_tokens=4, temperature=1.0,
                           eos_token_ids=1, pad_token_id=0, compiled=False, rows_per_prompt=2)


def compile_counting(monkeypatch) -> list:
    """Every `decode_loop.sample` compiled on the CPU through a backend that records each graph dynamo hands it (one
    per compilation of the step: fullgraph) and runs it as traced; dynamo's caches start empty."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    original = decode_loop.sample
    monkeypatch.setattr(decode_loop, "sample", lambda *a, **kw: original(
        *a, **(kw | {"compiled": True, "compile_backend": counting})))
    monkeypatch.setattr(decode_loop, "_COMPILED", {})
    torch._dynamo.reset()
    return graphs


@pytest.mark.parametrize("regions", [False, True], ids=["unrolled", "regions"])
def test_a_complete_runs_decode_steps_compile_once(tmp_path, monkeypatch, regions):
    """A complete run's uses of the compiled step in one process (recipe.py --arm ets,gmts): the base evaluation of the
    plain model (12 rows, k=2 samples per prompt: a shared prefill, no entropy), then per arm a training step's
    generation (8 rows, the PEFT model with its adapter merged, train mode, gradient checkpointing turned off around
    it by TRL, the entropy recorded) and the arm's evaluation (12 rows, the PEFT model merged, eval mode, gradient
    checkpointing left on after training). One compilation for all of them: before this change three (one per
    entropy signature and number of rows, one more for the PEFT model's wrappers, train mode and frozen weights).
    With generation_compile_regions: one per number of rows (12 and 8), each with the decoder layers as one subgraph."""
    from eval import generate_samples
    from test_eval import _tiny_chat_model
    from test_trainer import make_trainer

    graphs = compile_counting(monkeypatch)
    base, tok = _tiny_chat_model()
    prompts = [[{"role": "user", "content": c}] for c in ("1", "123+456", "7+8", "99", "4+4+4", "6")]
    evaluate = lambda model: generate_samples(model, tok, prompts, k=2, seed=4, max_new_tokens=6,  # noqa: E731
                                              progress=False, fast=True, batch_size=12,
                                              options=SpeedOptions(generation_decode_loop="compiled_step",
                                                                   generation_compile_regions=regions))
    evaluate(base)
    assert len(graphs) == 1
    for arm in ("entropy", "gmts"):
        trainer = make_trainer(tmp_path / arm, token_selection=arm, generation_decode_loop="compiled_step",
                               generation_merge_adapter=True, max_completion_length=6,
                               generation_compile_regions=regions)
        assert trainer.args.gradient_checkpointing
        recorded = []
        original = trainer.generation_entropy
        trainer.generation_entropy = lambda *a: recorded.append(a) or original(*a)
        trainer.train()
        assert recorded and trainer.entropy_source_used == "generation"  # the step's entropy, at 8 rows
        evaluate(trainer.model)
    assert len(graphs) == (2 if regions else 1)
    subgraphs = [sum(isinstance(c, torch.fx.GraphModule) for _, c in graph.named_children()) for graph in graphs]
    assert subgraphs == ([1, 1] if regions else [0])


def _assert_compiled_matches_eager(tok, model, prompts: list[str], backend, **options) -> None:
    """The compiled step (through `backend`, with `options`) gives eager's tokens and entropy at the same seed, one
    row per prompt (left padding, a 32-slot cache, 12 new tokens)."""
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    out = {}
    for compiled in (False, True):
        torch.manual_seed(1)
        out[compiled] = decode_loop.sample(
            model, batch["input_ids"], batch["attention_mask"], max_new_tokens=12, temperature=0.8,
            eos_token_ids=[1, 5], pad_token_id=0, compiled=compiled, cache_len=32, return_entropy=True,
            compile_backend=backend, **options)
    (tokens, entropy), (eager_tokens, eager_entropy) = out[True], out[False]
    assert tokens.size(0) == len(prompts) and torch.equal(tokens, eager_tokens)
    torch.testing.assert_close(entropy, eager_entropy)


def counting_backend(monkeypatch) -> tuple[list, object]:
    """A compile backend (dynamo and AOT autograd, aot_eager) that keeps every graph it is given, and the compiled
    step's cache emptied, so each test counts its own compilations."""
    from torch._dynamo.backends.debugging import aot_eager

    graphs: list = []
    monkeypatch.setattr(decode_loop, "_COMPILED", {})
    torch._dynamo.reset()
    return graphs, lambda gm, inputs: graphs.append(gm) or aot_eager(gm, inputs)


def test_one_graph_for_every_number_of_rows_with_the_tokens_and_entropy_of_eager(tiny, monkeypatch):
    """The rows are the step's one symbolic dim: compiled (dynamo and AOT autograd, backend aot_eager) at 12 rows, the
    step serves 6 rows with no second compilation (before: one graph per number of rows), and at both sizes the
    tokens and the entropy equal eager's at the same seed: the symbolic batch computes what the static one did."""
    graphs, counting = counting_backend(monkeypatch)
    tok, model = tiny
    for prompts in (grouped(RAGGED, 2), RAGGED):
        _assert_compiled_matches_eager(tok, model, prompts, counting)
    assert len(graphs) == 1


def trained_peft_model(tok):
    """The tiny model as GRPOTrainer holds it: TRL's fused LM head on the model's forward, a LoRA adapter (not zero)
    around q and v, gradient checkpointing on, train mode."""
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    model = sharpen(tiny_model(tok))
    add_fused_lm_head(model)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return peft_model.train()


def test_the_step_view_is_the_plain_model_samples_the_same_and_is_undone_on_an_exception():
    """Inside `step_view` the merged PEFT model is a plain transformers model (no LoRA wrapper, no instance forward,
    eval mode, no gradient checkpointing, no parameter requiring grad: what dynamo guards on); afterwards, also after
    an exception, every module, mode, flag and forward is back. The loop through the view samples the tokens
    transformers' generate samples from the model as TRL generates with it (train mode, wrappers, checkpointing off),
    at the same seed."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    from gmts_recipe.generation.fast import merged_lora

    tok = tiny_tokenizer()
    peft_model = trained_peft_model(tok)
    model = peft_model.get_base_model()

    def snapshot():
        return ([(name, m, m.training, vars(m).get("gradient_checkpointing")) for name, m in model.named_modules()],
                [(p, p.requires_grad) for p in peft_model.parameters()], vars(model).get("forward"))

    batch = tok(RAGGED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    with torch.no_grad(), merged_lora(peft_model):
        before = snapshot()
        with pytest.raises(RuntimeError, match="inside"), decode_loop.step_view(model):
            assert not any(isinstance(m, BaseTunerLayer) for m in model.modules())
            assert not any(m.training or getattr(m, "gradient_checkpointing", False) for m in model.modules())
            assert not any(p.requires_grad for p in model.parameters()) and "forward" not in vars(model)
            raise RuntimeError("inside")
        assert snapshot() == before
        model.gradient_checkpointing_disable()  # TRL's state around generate
        torch.manual_seed(3)
        ref = peft_model.generate(**batch, do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=16,
                                  eos_token_id=[1, 5], pad_token_id=0)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # as after training
        torch.manual_seed(3)
        got = decode_loop.sample(peft_model, batch["input_ids"], batch["attention_mask"], max_new_tokens=16,
                                 temperature=0.7, eos_token_ids=[5, 1], pad_token_id=0, compiled=False,
                                 sampler="multinomial")
        assert snapshot() == before
    assert torch.equal(got, ref)


@pytest.mark.parametrize("kernel", [None, "matmul"])
def test_compile_regions_trace_one_layer_subgraph_for_every_layer_with_the_tokens_of_eager(monkeypatch, kernel):
    """compile_regions=True on a 4-layer model (dynamo and AOT autograd, backend aot_eager), also through grouped
    attention's matmul kernel (the evaluation's setting): the 4 decoder layers are 4 calls of one subgraph
    (invoke_subgraph), through each layer's in-place cache write, and the tokens and the entropy equal eager's at the
    same seed. The rows are static there: 12 then 6 rows compile twice, 12 rows again not."""
    import contextlib

    from gmts_recipe.generation.attention import grouped_query_attention

    graphs, counting = counting_backend(monkeypatch)
    tok = tiny_tokenizer()
    model = sharpen(tiny_model(tok, layers=4).eval())
    stack = contextlib.ExitStack()
    if kernel:
        stack.enter_context(grouped_query_attention(model, kernel))
    for prompts in (grouped(RAGGED, 2), RAGGED, grouped(RAGGED, 2)):
        _assert_compiled_matches_eager(tok, model, prompts, counting, compile_regions=True)
    stack.close()
    assert len(graphs) == 2
    for graph in graphs:
        subgraphs = [name for name, child in graph.named_children() if isinstance(child, torch.fx.GraphModule)]
        calls = [n for n in graph.graph.nodes if n.target is torch.ops.higher_order.invoke_subgraph]
        assert len(subgraphs) == 1 and len(calls) == 4
    assert not any("forward" in vars(layer) for layer in model.model.layers)


def test_layer_regions_wrap_every_decoder_layer_and_are_undone_also_on_an_exception():
    """Inside `layer_regions` each decoder layer's forward is its class's forward as one nested compile region (the
    same function object for every layer and call: dynamo guards on it); afterwards, also after an exception, the
    layers have no forward of their own again. A model without decoder layers is refused in one line."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, layers=3)
    with pytest.raises(RuntimeError, match="inside"), decode_loop.layer_regions(model):
        functions = {vars(layer)["forward"].__func__ for layer in model.model.layers}
        assert len(functions) == 1 and hasattr(functions.pop(), "__marked_compile_region_fn__")
        raise RuntimeError("inside")
    assert not any("forward" in vars(layer) for layer in model.model.layers)
    with decode_loop.layer_regions(model):
        assert {vars(layer)["forward"].__func__ for layer in model.model.layers} == set(
            decode_loop._REGION_FORWARDS.values())
    with pytest.raises(ValueError, match="compile_regions=True found no decoder layer .* in Linear; pass "
                                         "compile_regions=False"):
        with decode_loop.layer_regions(torch.nn.Linear(2, 2)):
            pass


def test_compile_regions_reach_the_trainers_generation_and_every_evaluation_and_need_the_compiled_step(tmp_path,
                                                                                                        monkeypatch):
    """generation_compile_regions: refused in one line without the compiled step (it would do nothing), not in the
    config hash (same computation), recorded with the arm's generation options; the recipe's evaluations
    (Run._evaluate -> eval.evaluate_pass_at_1 -> generate_samples) and the trainer's generation (with_decode_loop)
    pass it on to decode_loop.sample."""
    import eval as evaluation
    from gmts_recipe.generation import fast
    from test_decoding import check_rounding_only_switch
    from test_trainer import make_config

    with pytest.raises(ValueError, match="with generation_decode_loop='transformers' also pass "
                                         "--generation_compile_regions false") as err:
        make_config(tmp_path, generation_compile_regions=True)
    assert "\n" not in str(err.value)
    check_rounding_only_switch(monkeypatch, "generation_compile_regions")

    from test_eval import _tiny_chat_model

    calls, original = [], decode_loop.sample_with_config
    monkeypatch.setattr(decode_loop, "sample_with_config", lambda *a, **kw: calls.append(kw) or original(*a, **kw))
    base, tok = _tiny_chat_model()
    evaluation.generate_samples(base, tok, [[{"role": "user", "content": "1+2"}]], k=2, seed=0, max_new_tokens=4,
                                progress=False, fast=True,
                                options=SpeedOptions(generation_decode_loop="compiled_step",
                                                     generation_compile_regions=True))
    assert calls and calls[0]["compile_regions"] is True

    calls = []
    monkeypatch.setattr(fast, "sample_with_config", lambda *a, **kw: calls.append(kw) or a[1])
    model = torch.nn.Linear(1, 1)
    with fast.with_decode_loop(model, 16, None, compile_regions=True):
        model.generate(input_ids=torch.zeros(1, 2, dtype=torch.long), attention_mask=None, generation_config=None)
    assert calls[0]["compile_regions"] is True


# ---------------------------------------------------------------- sample_with_config stands in for generate
def _config(**overrides):
    """What eval.py passes: every sampling field set, so nothing is left for the model's generation_config."""
    from transformers import GenerationConfig

    return GenerationConfig(**{"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 6,
                               "eos_token_id": 1, "pad_token_id": 0} | overrides)


IGNORED_SETTINGS = [  # each changes what generate returns; the loop implements none of them
    ("do_sample", False), ("num_beams", 2), ("num_return_sequences", 2), ("min_new_tokens", 3), ("min_length", 12),
    ("no_repeat_ngram_size", 2), ("encoder_no_repeat_ngram_size", 2), ("suppress_tokens", [5]),
    ("begin_suppress_tokens", [5]), ("bad_words_ids", [[5]]), ("sequence_bias", {(5,): 2.0}),
    ("forced_bos_token_id", 3), ("forced_eos_token_id", 3), ("exponential_decay_length_penalty", (2, 1.5)),
    ("length_penalty", 0.5), ("early_stopping", True), ("typical_p", 0.9), ("epsilon_cutoff", 1e-3),
    ("eta_cutoff", 1e-3), ("top_h", 0.5), ("encoder_repetition_penalty", 1.2), ("guidance_scale", 2.0),
    ("renormalize_logits", True), ("remove_invalid_values", True), ("stop_strings", ["="]), ("max_time", 5.0),
    ("output_scores", True), ("output_logits", True), ("return_dict_in_generate", True),
    ("prompt_lookup_num_tokens", 3), ("penalty_alpha", 0.6), ("dola_layers", "low"),
    ("a_setting_transformers_adds_later", 1),  # not on any list: refused by default
    ("top_k", 50), ("top_p", 0.9), ("min_p", 0.1), ("repetition_penalty", 1.1),
]


@pytest.mark.parametrize("name, value", IGNORED_SETTINGS, ids=[name for name, _ in IGNORED_SETTINGS])
def test_sample_with_config_refuses_every_setting_it_would_ignore(tiny, name, value):
    tok, model = tiny
    batch = tok(RAGGED[:2], return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    with pytest.raises(ValueError, match=f"{name}=") as err:
        decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"], _config(**{name: value}))
    assert "\n" not in str(err.value) and "unsupported" in str(err.value)


def test_sample_with_config_judges_an_unset_field_by_the_value_generate_fills_in(tiny):
    """top_k left unset: generate applies transformers' default 50, or the model's generation_config's value."""
    tok, model = tiny
    batch = tok(RAGGED[:2], return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    with pytest.raises(ValueError, match="top_k=50 unsupported"):
        decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"], _config(top_k=None))
    saved = model.generation_config
    try:
        model.generation_config = type(saved)(top_k=0, suppress_tokens=[7])
        with pytest.raises(ValueError, match=r"suppress_tokens=\[7\] unsupported"):  # the checkpoint's own setting
            decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"], _config(top_k=None))
        model.generation_config = type(saved)(top_k=0)
        decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"], _config(top_k=None))
    finally:
        model.generation_config = saved


def test_sample_with_config_accepts_the_cache_compile_and_length_settings_and_samples_what_generate_does(tiny):
    """The settings eval.py and the trainer set that change how, not what, generate samples: the same tokens as
    generate with the same config at the same seed (eager on the CPU)."""
    from transformers import CompileConfig

    tok, model = tiny
    batch = tok(RAGGED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    config = _config(max_new_tokens=10, eos_token_id=[1, 5], bos_token_id=None, cache_implementation="static",
                     max_cache_len=64, compile_config=CompileConfig(dynamic=False), disable_compile=True,
                     use_cache=True, max_length=3, min_p=None, repetition_penalty=1.0, typical_p=1.0,
                     epsilon_cutoff=0.0, eta_cutoff=0.0, no_repeat_ngram_size=0, num_beams=1, min_new_tokens=0,
                     output_attentions=False, output_hidden_states=False)
    torch.manual_seed(4)
    ref = model.generate(**batch, generation_config=config)
    torch.manual_seed(4)
    got = decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"], config, cache_len=64)
    assert torch.equal(got, ref) and ref.size(1) > batch["input_ids"].size(1) + 3  # max_new_tokens, not max_length
    with pytest.raises(ValueError, match="max_new_tokens unset"):
        decode_loop.sample_with_config(model, batch["input_ids"], batch["attention_mask"],
                                       _config(max_new_tokens=None, max_length=12))


def test_the_whole_step_graph_is_checked_and_kept_per_buffers_and_weights(tiny, monkeypatch):
    """STEP_GRAPH='whole_step' (bench/step.py --step_graph): refused for a sampler that draws from a generator (a
    replay would repeat the recording's draws) and for an unknown value; its recording is kept while the buffers,
    the scalars and every weight's address stay, recorded anew when one changes, and dropped with the buffers. The
    step compiled for it is another function (no inductor CUDA graphs). The recording itself needs CUDA: on the CPU
    the loop runs as before (the tokens are checked against generate by the tests above)."""
    tok, model = tiny
    batch = tok(["1 + 2 ="], return_tensors="pt", add_special_tokens=False)
    call = dict(max_new_tokens=2, temperature=1.0, eos_token_ids=[0], pad_token_id=0, compiled=True)
    monkeypatch.setattr(decode_loop, "STEP_GRAPH", "whole_stepp")
    with pytest.raises(ValueError, match="STEP_GRAPH 'whole_stepp': use one of cudagraph_trees, whole_step"):
        decode_loop.sample(model, batch.input_ids, batch.attention_mask, **call)
    monkeypatch.setattr(decode_loop, "STEP_GRAPH", "whole_step")
    with pytest.raises(ValueError, match="only the 'counter' sampler allows.*sampler='exponential'"):
        decode_loop.sample(model, batch.input_ids, batch.attention_mask, **call)

    monkeypatch.setattr(decode_loop, "_GRAPHS", [])
    monkeypatch.setattr(decode_loop, "_BUFFERS", [])
    cache, state = decode_loop._buffers(model, 2, 16, torch.device("cpu"))
    args = (model, cache, state, 1.0, (0,), 0, "counter")
    first = decode_loop._step_graph(decode_loop.decode_step, *args)
    assert decode_loop._step_graph(decode_loop.decode_step, *args) is first and first.graph is None
    assert decode_loop._step_graph(decode_loop.decode_step, model, cache, state, 0.5, (0,), 0, "counter") is not first
    again = decode_loop._step_graph(decode_loop.decode_step, *args)
    weight = next(model.parameters())
    original = weight.data
    try:
        weight.data = original.clone()  # a new address: a recording would read the old one
        assert decode_loop._step_graph(decode_loop.decode_step, *args) is not again
    finally:
        weight.data = original
    decode_loop._buffers(model, 3, 16, torch.device("cpu"))  # another shape: the buffers and the recording go
    assert decode_loop._GRAPHS == []
    decode_loop._step_graph(decode_loop.decode_step, *args)
    decode_loop.release_buffers()
    assert decode_loop._GRAPHS == [] and decode_loop._BUFFERS == []

    monkeypatch.setattr(decode_loop, "_COMPILED", {})
    with_graphs, without = decode_loop.compiled_step(), decode_loop.compiled_step(graphs=False)
    assert without is not with_graphs and decode_loop.compiled_step(graphs=False) is without
