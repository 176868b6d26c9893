"""The "counter" sampler (decode_loop.counter_noise): noise that is a function of (key, column, token) alone, so a
sample repeats whatever ran before in the process and two arms at one training step can draw the same numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from tiny import tiny_model, tiny_tokenizer

from gmts_recipe.generation import decode_loop
from test_decode_loop import RAGGED, sharpen


def lowbias32(x: int) -> int:
    """The published hash in plain Python integers (hash prospector, lowbias32), the reference for `hash32`."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_hash32_is_lowbias32_without_int64_overflow(values):
    """Every 32-bit input, including those whose product with the constants passes 2^63, hashes as the reference."""
    got = decode_loop.hash32(torch.tensor(values, dtype=torch.long)).tolist()
    assert got == [lowbias32(v) for v in values]


def test_hash32_edges():
    edges = [0, 1, 2**31 - 1, 2**31, 2**32 - 1]
    assert decode_loop.hash32(torch.tensor(edges)).tolist() == [lowbias32(v) for v in edges]


def test_counter_sampler_matches_softmax_over_temperature():
    """40,000 rows with their own keys draw one token from the same logits: the counts fit softmax(logits / T)
    (chi-square p > 0.001), at two columns, and the -inf token is never drawn."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0, float("-inf")])
    temperature, draws = 0.7, 40_000
    keys = decode_loop.noise_keys(seed=5, stream=11, rows=torch.arange(draws))
    expected = torch.softmax(logits.double() / temperature, dim=-1).numpy()
    for column in (0, 137):
        tokens = decode_loop.sample_next(logits.expand(draws, -1), temperature, "counter", keys=keys,
                                         column=torch.tensor([column]))
        counts = np.bincount(tokens.numpy(), minlength=logits.numel())
        assert counts[-1] == 0
        assert stats.chisquare(counts[:-1], expected[:-1] * draws).pvalue > 1e-3


def test_counter_noise_is_exponential_and_independent_across_rows_columns_and_tokens():
    """E = -log u: mean 1, variance 1 (Exp(1)); u uniform (Kolmogorov-Smirnov p > 0.001); and no correlation between
    neighbouring rows, columns or vocabulary entries (|r| < 0.01 over 256 x 2,000 values, ~4.5 standard errors)."""
    keys = decode_loop.noise_keys(seed=0, stream=3, rows=torch.arange(256))
    e0 = decode_loop.counter_noise(keys, torch.tensor([0]), 2000).double()
    e1 = decode_loop.counter_noise(keys, torch.tensor([1]), 2000).double()
    assert bool((e0 > 0).all()) and bool(torch.isfinite(e0).all())
    assert abs(float(e0.mean()) - 1) < 0.01 and abs(float(e0.var()) - 1) < 0.02
    assert stats.kstest(torch.exp(-e0).flatten().numpy(), "uniform").pvalue > 1e-3
    for a, b in ((e0[:-1], e0[1:]), (e0, e1), (e0[:, :-1], e0[:, 1:])):
        assert abs(float(np.corrcoef(a.flatten().numpy(), b.flatten().numpy())[0, 1])) < 0.01


def test_the_noise_is_positive_and_finite_at_every_bit_pattern():
    """Every 23-bit value gives 0 < E < inf in float32, the extremes included (24 bits gave E = 0 at the top value:
    p / E = inf, a token picked whatever its probability, ~1% of token steps over Qwen's vocabulary)."""
    e = decode_loop.exponential_of_bits(torch.arange(2**23, dtype=torch.long))
    assert bool((e > 0).all()) and bool(torch.isfinite(e).all())
    assert float(e.min()) < 1e-7 and 16 < float(e.max()) < 17


def test_noise_keys_separate_seeds_streams_and_rows():
    rows = torch.arange(1000)
    a = decode_loop.noise_keys(1, 0, rows)
    assert len(set(a.tolist())) == 1000  # a bijection of the row: no two rows share noise
    for other in (decode_loop.noise_keys(2, 0, rows), decode_loop.noise_keys(1, 1, rows)):
        assert len(set(a.tolist()) & set(other.tolist())) < 3
    assert torch.equal(a, decode_loop.noise_keys(1, 0, rows))


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer()
    return tok, sharpen(tiny_model(tok).eval())


def _sample(tok, model, prompts, keys, compiled=False, backend="inductor"):
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    return decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=12, temperature=1.0,
                              eos_token_ids=[1, 5], pad_token_id=0, compiled=compiled, cache_len=32,
                              sampler="counter", noise_keys=keys, compile_backend=backend, return_entropy=True)


def test_counter_samples_repeat_whatever_the_process_drew_before(tiny):
    """The same prompts and keys give the same tokens after other draws from the global generator (which move the
    "exponential" sampler's tokens), and a row's tokens do not depend on the other rows of its batch."""
    tok, model = tiny
    keys = decode_loop.noise_keys(0, 0, torch.arange(len(RAGGED)))
    first, _ = _sample(tok, model, RAGGED, keys)
    torch.rand(12345)
    again, _ = _sample(tok, model, RAGGED, keys)
    assert torch.equal(first, again)
    batch = tok(RAGGED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    other = []
    for _ in range(2):  # the stream sampler, for contrast: the same call twice differs
        other.append(decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=12,
                                        temperature=1.0, eos_token_ids=[1, 5], pad_token_id=0, compiled=False,
                                        cache_len=32))
    assert not torch.equal(*other)
    alone = [_sample(tok, model, [p], keys[i : i + 1])[0] for i, p in enumerate(RAGGED)]
    prompt_len = first.size(1) - 12
    for i, row in enumerate(alone):  # the row's completion (its own prompt has no padding here)
        got = row[0, row.size(1) - 12 :]
        assert torch.equal(got[: (got != 0).sum()], first[i, prompt_len:][: (got != 0).sum()])


def test_equal_weights_and_keys_give_equal_rollouts_other_keys_other_rollouts(tiny):
    """Two arms at one step: equal weights and the step's keys give identical rollouts; another step's keys do not."""
    tok, model = tiny
    keys = decode_loop.noise_keys(17, 4, torch.arange(len(RAGGED)))
    a, _ = _sample(tok, model, RAGGED, keys)
    b, _ = _sample(tok, model, RAGGED, keys.clone())
    c, _ = _sample(tok, model, RAGGED, decode_loop.noise_keys(17, 5, torch.arange(len(RAGGED))))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_counter_step_gives_eager_tokens(tiny, backend, monkeypatch):
    """The counter sampler compiled (dynamo + AOT autograd; and inductor's generated kernels) draws eager's tokens:
    the noise is integer arithmetic, exact everywhere, not a generator that a compiled graph may consume otherwise."""
    monkeypatch.setattr(decode_loop, "_COMPILED", {})
    torch._dynamo.reset()
    tok, model = tiny
    keys = decode_loop.noise_keys(3, 9, torch.arange(len(RAGGED)))
    eager = _sample(tok, model, RAGGED, keys)
    compiled = _sample(tok, model, RAGGED, keys, compiled=True, backend=backend)
    assert torch.equal(compiled[0], eager[0])
    torch.testing.assert_close(compiled[1], eager[1])


@pytest.mark.parametrize("bad, match", [({"sampler": "counter"}, "noise_keys go with sampler='counter'"),
                                        ({"noise_keys": torch.zeros(6, dtype=torch.long)}, "noise_keys go with"),
                                        ({"sampler": "counter", "noise_keys": torch.zeros(2, dtype=torch.long)},
                                         r"one key per row: \(6,\)")])
def test_counter_keys_refused_where_they_do_not_fit(tiny, bad, match):
    tok, model = tiny
    batch = tok(RAGGED, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    with pytest.raises(ValueError, match=match):
        decode_loop.sample(model, batch["input_ids"], batch["attention_mask"], max_new_tokens=4, temperature=1.0,
                           eos_token_ids=[1], pad_token_id=0, compiled=False, **bad)


# ---------------------------------------------------------------- the trainer's generations: which keys each draws
from gmts_recipe.generation import noise  # noqa: E402


def _version_1_keys(seed: int, step: int, rows: torch.Tensor, generation: int, train: bool) -> torch.Tensor:
    """Version 1 as the runs that recorded it computed it: the step's stream XOR the generation shifted by 24 bits."""
    stream = decode_loop.train_stream(step) if train else (1 << 30) + step
    return decode_loop.noise_keys(seed, stream ^ (generation << 24), rows)


@pytest.mark.parametrize("seed,step,generation,train", [(0, 0, 0, True), (17, 3, 1, True), (5, 1, 192, False),
                                                         (200, 39, 0, False)])
def test_version_1_keys_are_those_the_recorded_runs_drew(seed, step, generation, train):
    got = noise.rollout_noise_keys(seed, step, 4, process_index=1, generation=generation, train=train, version=1)
    assert torch.equal(got, _version_1_keys(seed, step, torch.arange(4, 8), generation, train))
    assert noise.generator_seed(seed, step, 1, generation, train, version=1) == int(
        _version_1_keys(seed, step, torch.tensor([1]), generation, train))


def test_version_1_gives_an_evaluation_a_training_generations_stream_and_version_2_does_not():
    """The wrap version 2 removes: under version 1 an evaluation's generation 192 during training, at step 1, draws
    training step 1's first generation's keys (and so do the generators of transformers' generate)."""
    def keys(version, generation, train):
        return noise.rollout_noise_keys(0, 1, 64, generation=generation, train=train, version=version)

    assert torch.equal(keys(1, 192, False), keys(1, 0, True))
    assert noise.generator_seed(0, 1, 0, 192, False, version=1) == noise.generator_seed(0, 1, 0, 0, True, version=1)
    assert not set(keys(2, 192, False).tolist()) & set(keys(2, 0, True).tolist())
    assert noise.generator_seed(0, 1, 0, 192, False) != noise.generator_seed(0, 1, 0, 0, True)


def test_version_2_streams_do_not_collide_over_a_large_range():
    """Every generation of 2 seeds x training and evaluation x 500 steps x 128 generations a step (256,000): no two
    share their 64-bit stream, and no two draw the same keys for their first two rows (each row's key mixes both
    halves of the stream); within a generation, every row has a key of its own."""
    streams = [noise.noise_stream(seed, step, generation, train) for seed in (0, 17) for train in (True, False)
               for step in range(500) for generation in range(128)]
    assert len(set(streams)) == len(streams) == 256_000
    s = torch.tensor([x - (1 << 64) if x >= 1 << 63 else x for x in streams], dtype=torch.long)  # as int64 bits
    low, high = s & noise.MASK32, (s >> 32) & noise.MASK32
    keys = decode_loop.hash32(decode_loop.hash32(low[:, None] ^ torch.arange(2)[None, :]) ^ high[:, None])
    # the function's own keys: index ((seed, mode) block x 500 + step) x 128 + generation
    assert torch.equal(keys[464 * 128 + 64], noise.rollout_noise_keys(0, 464, 2, generation=64, version=2))
    assert torch.equal(keys[3 * 64_000 + 5 * 128 + 7],
                       noise.rollout_noise_keys(17, 5, 2, generation=7, train=False, version=2))
    assert torch.unique((keys[:, 0] << 32) | keys[:, 1]).numel() == len(streams)
    assert torch.unique(noise.rollout_noise_keys(3, 7, 100_000, version=2)).numel() == 100_000


def test_version_2_keys_are_a_function_of_the_generation_and_the_global_row():
    """Process p's rollouts are rows p x rows + r of the generation's global batch: two processes of 4 rows draw the
    keys one process of 8 does; every part of the tuple changes them."""
    whole = noise.rollout_noise_keys(5, 3, 8, generation=1, version=2)
    parts = [noise.rollout_noise_keys(5, 3, 4, process_index=p, generation=1, version=2) for p in (0, 1)]
    assert torch.equal(torch.cat(parts), whole)
    assert torch.equal(whole, noise.rollout_noise_keys(5, 3, 8, generation=1, version=2))  # nothing else decides them
    for other in ({"seed": 6}, {"step": 4}, {"generation": 2}, {"train": False}):
        place = {"seed": 5, "step": 3, "generation": 1, "train": True, **other}
        changed = noise.rollout_noise_keys(place.pop("seed"), place.pop("step"), 8, version=2, **place)
        assert not set(changed.tolist()) & set(whole.tolist()), other
    seeds = {noise.generator_seed(5, 3, p, g, t) for p in range(4) for g in range(4) for t in (True, False)}
    assert len(seeds) == 32 and all(0 <= x < 1 << 64 for x in seeds)
    with pytest.raises(ValueError, match="counter_noise_version=4 is not one of 1, 2, 3"):
        noise.rollout_noise_keys(5, 3, 8, version=4)


def _counter_noise_of_32_bit_keys(keys: torch.Tensor, column: torch.Tensor, vocab: int) -> torch.Tensor:
    """counter_noise as it was while keys had 32 bits: the reference every run of versions 1 and 2 drew with."""
    row = decode_loop.hash32(keys ^ decode_loop.hash32(column))
    token = torch.arange(vocab)
    return decode_loop.exponential_of_bits(decode_loop.hash32(decode_loop.hash32(row[:, None] ^ token[None, :])) >> 9)


@pytest.mark.parametrize("version,train", [(1, True), (2, True), (2, False)])
def test_keys_below_2_to_the_32_draw_the_noise_they_drew_with_32_bit_keys(version, train):
    """Versions 1 and 2 (and the evaluation's keys) repeat bit for bit: a key's high half enters through
    hash32(high), and hash32(0) is 0."""
    keys = noise.rollout_noise_keys(299, 1, 64, generation=0, train=train, version=version)
    assert int(keys.max()) < 1 << 32 and int(keys.min()) >= 0
    for column in (0, 1, 255):
        c = torch.tensor([column])
        assert torch.equal(decode_loop.counter_noise(keys, c, 500), _counter_noise_of_32_bit_keys(keys, c, 500))
    evaluation = decode_loop.noise_keys(0, decode_loop.EVAL_STREAM, torch.arange(64))
    assert torch.equal(decode_loop.counter_noise(evaluation, torch.tensor([3]), 500),
                       _counter_noise_of_32_bit_keys(evaluation, torch.tensor([3]), 500))


def test_version_3_keys_widen_version_2_keys_to_64_bits():
    """Version 3's low half is version 2's key, its high half another hash of the same generation and place; a key
    that differs from another in its high half only draws other noise."""
    v2 = noise.rollout_noise_keys(299, 7, 64, process_index=1, generation=2, version=2)
    v3 = noise.rollout_noise_keys(299, 7, 64, process_index=1, generation=2, version=3)
    assert torch.equal(v3 & noise.MASK32, v2)
    assert torch.unique((v3 >> 32) & noise.MASK32).numel() == 64
    assert torch.equal(v3, noise.rollout_noise_keys(299, 7, 64, process_index=1, generation=2))  # the default
    only_high = torch.stack([v3[0], v3[0] ^ (1 << 40)])
    e = decode_loop.counter_noise(only_high, torch.tensor([5]), 1000)
    assert not torch.equal(e[0], e[1])


def _collisions(keys: torch.Tensor) -> int:
    return keys.numel() - torch.unique(keys).numel()


def test_version_3_keys_do_not_collide_over_a_whole_sequential_test():
    """Every training rollout of the sequential extension's whole sequence (260 seeds x 40 steps x 64 rollouts,
    665,600 rows): version 2's 32-bit keys give some rows another row's key, hence its noise at every column (n^2 /
    2^33, ~52 pairs expected); version 3's 64-bit keys give none."""
    def every_key(version):
        return torch.cat([noise.rollout_noise_keys(seed, step, 64, version=version)
                          for seed in range(200, 460) for step in range(1, 41)])

    v2, v3 = every_key(2), every_key(3)
    assert v3.numel() == 665_600
    assert _collisions(v2) > 10
    assert _collisions(v3) == 0
