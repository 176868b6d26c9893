"""attention.py: grouped-query decoding computes what transformers' sdpa computes, without repeating the cache."""

import pytest
import torch

from gmts_recipe.generation import attention
from gmts_recipe.speed_options import SpeedOptions
from tiny import tiny_model, tiny_tokenizer


def _generate(model, batch, static: bool):
    kwargs = {"cache_implementation": "static"} if static else {}
    torch.manual_seed(0)
    out = model.generate(**batch, do_sample=False, max_new_tokens=6, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0, eos_token_id=None, **kwargs)
    return out.sequences, torch.stack(out.logits)  # (B, P + 6), (6, B, V)


@pytest.mark.parametrize("static", [False, True])
def test_grouped_decoding_equals_sdpa_on_left_padded_rows(static, monkeypatch):
    tok = tiny_tokenizer()
    model = tiny_model(tok, hidden=64).eval()  # 4 query heads, 2 key/value heads
    assert model.config._attn_implementation == "sdpa"
    batch = tok(["1+2=", "12+34=56?", "7="], return_tensors="pt", padding=True)  # left-padded: a mask at every step
    seq_ref, logits_ref = _generate(model, batch, static)
    grouped_calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        if q.shape[1] == k.shape[1] and q.shape[1] < model.config.num_attention_heads:
            grouped_calls.append(tuple(q.shape))  # the folded call: query heads as key/value heads
        return original(q, k, v, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with attention.grouped_query_attention(model):
        assert model.config._attn_implementation == attention.NAME
        seq, logits = _generate(model, batch, static)
    assert model.config._attn_implementation == "sdpa"  # restored
    # every decoding step of every layer went through the folded call; the prefill did not
    assert len(grouped_calls) == 5 * model.config.num_hidden_layers
    assert all(shape == (3, 2, 2, 16) for shape in grouped_calls)  # (B, KV, G, D)
    torch.testing.assert_close(logits, logits_ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(seq, seq_ref)


def test_models_without_groups_or_sdpa_are_left_alone():
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    model.set_attn_implementation("eager")
    with attention.grouped_query_attention(model):
        assert model.config._attn_implementation == "eager"


def test_restored_after_an_error():
    model = tiny_model(tiny_tokenizer())
    with pytest.raises(RuntimeError), attention.grouped_query_attention(model):
        raise RuntimeError("generation failed")
    assert model.config._attn_implementation == "sdpa"


def _spy(monkeypatch, name: str, record) -> list:
    """Wrap attention.<name>: each call appends record(*its positional args) to the returned list."""
    calls = []
    original = getattr(attention, name)

    def counting(*args, **kwargs):
        calls.append(record(*args))
        return original(*args, **kwargs)

    monkeypatch.setattr(attention, name, counting)
    return calls


def _count_grouped(monkeypatch) -> list:  # query lengths of the grouped forward's calls
    return _spy(monkeypatch, "grouped_sdpa_forward", lambda module, query, *rest: query.shape[2])


def _count_matmul(monkeypatch) -> list:  # folded query shapes of the matmul kernel's calls
    return _spy(monkeypatch, "_matmul_attention", lambda q, *rest: tuple(q.shape))


def test_evaluation_samples_the_same_through_grouped_attention(monkeypatch):
    from eval import generate_samples

    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    model = tiny_model(tok, hidden=64)
    prompts = [[{"role": "user", "content": c}] for c in ("1+1", "123+45", "9")]
    plain = generate_samples(model, tok, prompts, k=2, seed=5, max_new_tokens=5, progress=False, fast=True)
    calls = _count_grouped(monkeypatch)
    grouped = generate_samples(model, tok, prompts, k=2, seed=5, max_new_tokens=5, progress=False, fast=True,
                               options=SpeedOptions(generation_grouped_attention=True))
    assert grouped == plain and calls.count(1) == 4 * model.config.num_hidden_layers  # 4 decoding steps
    assert model.config._attn_implementation == "sdpa"


def test_training_generation_decodes_through_it_with_the_same_completions(tmp_path, monkeypatch):
    import torch as _torch

    from test_trainer import generation_batch, make_trainer

    plain = generation_batch(make_trainer(tmp_path / "a"))
    calls = _count_grouped(monkeypatch)
    trainer = make_trainer(tmp_path / "b", generation_grouped_attention=True)
    grouped = generation_batch(trainer)
    assert calls.count(1) >= 2 * trainer.model.config.num_hidden_layers  # decoding steps went through it
    assert _torch.equal(grouped["completion_ids"], plain["completion_ids"])
    assert trainer.model.get_base_model().config._attn_implementation == "sdpa"  # training forwards: sdpa


def test_the_base_evaluation_cache_key_ignores_it_and_results_record_it():
    """The same computation with other rounding, like another GPU model: cached base evaluations stay valid. Each arm
    records its generation options, this one among them."""
    import recipe

    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false"]
    off = recipe.parse([*flags, "--generation_grouped_attention", "false"])
    on = recipe.parse([*flags, "--generation_grouped_attention", "true"])
    assert off[1].generation_grouped_attention is False and on[1].generation_grouped_attention is True
    assert recipe.eval_record(off[0], off[2], off[1], [], "cuda") == recipe.eval_record(on[0], on[2], on[1], [], "cuda")
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert "generation_grouped_attention" in recipe.GENERATION_OPTIONS
    kernel = recipe.parse([*flags, "--generation_grouped_attention", "true", "--generation_decode_kernel", "matmul"])
    assert kernel[1].generation_decode_kernel == "matmul"
    assert recipe.eval_record(off[0], off[2], off[1], [], "cuda") == recipe.eval_record(kernel[0], kernel[2], kernel[1],
                                                                                          [], "cuda")
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*kernel[:3]))
    assert "generation_decode_kernel" in recipe.GENERATION_OPTIONS


@pytest.mark.parametrize("static", [False, True])
def test_matmul_kernel_decodes_what_sdpa_decodes(static, monkeypatch):
    """The `matmul` kernel (eager's formulation on the folded shapes) on left-padded rows: in float32 the same logits
    and tokens as transformers' sdpa, every decoding step of every layer through the two matrix products."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, hidden=64).eval()
    batch = tok(["1+2=", "12+34=56?", "7="], return_tensors="pt", padding=True)
    seq_ref, logits_ref = _generate(model, batch, static)
    calls = _count_matmul(monkeypatch)
    with attention.grouped_query_attention(model, kernel="matmul"):
        assert model.config._attn_implementation == attention.NAME_MATMUL
        seq, logits = _generate(model, batch, static)
    assert model.config._attn_implementation == "sdpa"
    assert len(calls) == 5 * model.config.num_hidden_layers and set(calls) == {(3, 2, 2, 16)}
    torch.testing.assert_close(logits, logits_ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(seq, seq_ref)


@pytest.mark.parametrize("boolean", [True, False])
def test_matmul_attention_equals_sdpa_with_either_mask_form(boolean):
    """transformers builds boolean masks for sdpa (True: attend); an additive float mask must give the same."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64) for shape in ((3, 2, 6, 8), (3, 2, 5, 8),
                                                                                  (3, 2, 5, 8)))
    attend = torch.rand(3, 1, 1, 5, generator=g) > 0.3
    attend[..., -1] = True  # the current position: never a row without a key
    attend = attend.expand(3, 1, 6, 5)
    mask = attend if boolean else torch.zeros(attend.shape, dtype=torch.float64).masked_fill(~attend, float("-inf"))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attend, scale=0.3)
    torch.testing.assert_close(attention._matmul_attention(q, k, v, mask, 0.3), expected)


def test_unknown_kernel_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="use one of sdpa, matmul"), \
            attention.grouped_query_attention(tiny_model(tiny_tokenizer()), kernel="flash"):
        pass


def test_training_generation_and_evaluation_take_the_matmul_kernel_from_the_config(tmp_path, monkeypatch):
    """generation_decode_kernel reaches both decoders (the trainer's generation and eval.generate_samples) and gives
    the same completions as sdpa in float32."""
    from eval import generate_samples
    from test_trainer import generation_batch, make_trainer

    plain = generation_batch(make_trainer(tmp_path / "a"))
    forwards = _spy(monkeypatch, "grouped_matmul_forward", lambda module, query, *rest: query.shape[2])
    trainer = make_trainer(tmp_path / "b", generation_grouped_attention=True, generation_decode_kernel="matmul")
    assert torch.equal(generation_batch(trainer)["completion_ids"], plain["completion_ids"])
    # the trainer's decoder attended through the matmul kernel's function (its equal-length prompts need no mask, so
    # the folded call itself is exercised by the evaluation below, whose prompts are left-padded)
    assert forwards.count(1) >= 2 * trainer.model.config.num_hidden_layers
    calls = _count_matmul(monkeypatch)

    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    model = tiny_model(tok, hidden=64)
    prompts = [[{"role": "user", "content": c}] for c in ("1+1", "123+45", "9")]
    reference = generate_samples(model, tok, prompts, k=2, seed=5, max_new_tokens=5, progress=False, fast=True)
    matmul = generate_samples(model, tok, prompts, k=2, seed=5, max_new_tokens=5, progress=False, fast=True,
                              options=SpeedOptions(generation_grouped_attention=True,
                                                   generation_decode_kernel="matmul"))
    assert matmul == reference and len(calls) == 4 * model.config.num_hidden_layers  # 4 decoding steps
    assert model.config._attn_implementation == "sdpa"
