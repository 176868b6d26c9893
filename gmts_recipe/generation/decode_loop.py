"""Sampling with the whole decode step compiled as one function: one CUDA-graph replay per token.

Why: transformers' `generate` (`_sample`) compiles only the model forward (one CUDA graph per token) and runs the rest
of each token step in Python around it: `prepare_inputs_for_generation`, dynamo's guards, the logits processors,
softmax, `torch.multinomial` (which breaks CUDA graphs), the unfinished-rows bookkeeping, the stopping criteria and
`torch.cat`. Those are dozens of kernel launches and copies per token step outside the graph, so at the training
batch's rows the GPU waits for the host.

What this loop does differently from `_sample`: every tensor a step reads or writes is allocated once with a fixed shape
(the static KV cache, the token, the position ids, the cache slot, the 2-D attention mask over the whole cache length,
the unfinished rows, the (B, cache length) output), and one function (`decode_step`) runs the forward on one token, the
sampling and the bookkeeping in place on them. `compiled=True` wraps that function in
torch.compile(mode="reduce-overhead", fullgraph=True, dynamic=False) with the rows symbolic: one graph for every step of
every batch of the same cache length (see "One graph per process"). The all-rows-finished flag is read on the host every
`check_every` steps, from a non-blocking copy made one check earlier (CUDA), so the host never waits on the GPU; the
surplus steps are cut from the output, as transformers' deferred stop does. The prefill is one ordinary (eager) model
forward.

Only the exact subset of transformers' sampling: temperature > 0 and nothing else (no top-k, top-p, min-p,
repetition penalty; any of them is refused). Three samplers of the same distribution softmax(logits / T):
- "multinomial": transformers' own draw, torch.multinomial(softmax(logits / T), 1) on float32 logits. On the CPU with
  the same seed the tokens equal `model.generate(do_sample=True, top_k=0, top_p=1.0)` (tests/test_decode_loop.py).
  It breaks CUDA graphs, so it is the reference, not the fast path.
- "exponential": argmax(probs / E) with E ~ Exponential(1) per vocabulary entry, E clamped away from 0 so that a
  zero-probability token can never win. This is torch.multinomial's own algorithm for one sample (ATen's
  Distributions.cpp, `multinomial`: "s = argmax( p / q ) where q ~ Exp(1)") without its input checks, which read a
  result on the host and so break CUDA graphs. In eager on the CPU it therefore gives the same tokens as
  "multinomial" at the same seed (tested); compiled, inductor may draw other random numbers (on the CPU it does).
- "counter": the same argmax(p / E), with E = -log u and u a hash of (row key, column, vocabulary entry)
  (`counter_noise`; `noise_keys` makes the row keys from a seed, a stream and the row's index). Nothing is drawn from
  a generator, so a row's tokens depend on its key, its logits and nothing else: not on the other rows, the batches
  before, CUDA-graph warm-ups or anything else the process ran (tests/test_counter_noise.py). The recipe's
  evaluation keys sample s of task i by (eval seed, i * k + s), a training step's rollout r by (seed, step, r), so two
  arms of a seed draw the same numbers at every step (the trainer's `sampling_noise="counter"`).

Repeatable kernels: inductor's deterministic mode (`inductor_options`): by default inductor times the launch
configurations of each reduction kernel at its first run and keeps the fastest, and which one wins (it changes the
order of the sums) depends on timing noise, so two processes on cold compile caches could compute other logits.

Entropy: the step always writes `token_entropy(logits, T)`, the entropy of the distribution each token is drawn
from, into a float32 buffer like the tokens' at the token's column (the prefill's first token too), inside the
compiled graph; `return_entropy=True` returns it, trimmed like the tokens, and the evaluation ignores it. Always: one
signature for the training step's generation and the evaluation, hence one compilation of the whole step less per
process, at the cost of one more reduction over the vocabulary per row and token step (a softmax and a sum of
p log p over the float32 logits), which inductor can fuse with the sampling's softmax of the same logits where it
can; it draws no random number, so the tokens are the same. `token_entropy` is the formula of fast.py's
`EntropyRecorder` (the logits processor that records it around transformers' generate), which calls it: the
trainer's batch-scope selection takes the loop's entropy with no scoring pass and no processor outside the graph.

Users: `eval.generate_samples(decode_loop="compiled_step")` and the trainer's `generation_decode_loop="compiled_step"`
(gmts_trainer.py, through fast.with_decode_loop), which serves TRL's `generate` call with `sample_with_config`.

Attention mask: ones past the current slot would be harmless with sdpa/eager masks: `create_causal_mask` never skips
the mask for a compileable cache and a one-token query (masking_utils.py, `allow_is_causal_skip`), and the causal
function hides every slot past the query's own (kv_idx <= q_idx + the cache's length). The loop still keeps the 2-D
mask true (1 up to the current slot, one slot set per step, one small kernel) so that a mask builder that reads it
directly (flash attention's unpadding counts its ones) sees the real lengths.

Positions: transformers' for left padding (attention_mask.cumsum(-1) - 1, 0 on padding). With rotary embeddings only
differences of positions matter, so plain 0..P-1 for every row would give the same attention up to rounding.

Shared prefill (`rows_per_prompt` g > 1): the evaluation samples k completions of each prompt as k consecutive
identical rows (eval.generate_samples), so a prefill per row computes every prompt's keys and values k times, a large
share of an evaluation batch's time. With g the prefill forward runs on one row per group (input_ids[::g]) into a
StaticCache of B / g rows and the same length, then its keys and values of the prompt's slots are written into the g
rows of the group (repeat_interleave, through the full cache's `update`), and the first token's logits are repeated
the same way; the first draw, one per row, and the decode steps are unchanged, on the full-batch cache and state (the
same shapes and addresses for the CUDA graph). A smaller cache of the same length rather than transformers' dynamic
cache: the unique rows then see the very prefill of a row-per-row call (same kernels, same mask width over the whole
cache), only fewer rows, so on the CPU in float32 logits, tokens and entropy equal a prefill per row bit for bit
(tests/test_decode_loop.py); on a GPU the smaller GEMMs may round otherwise in bf16. Rows that are not whole groups
of one prompt (input_ids and mask compared on the device, once) are refused, as are caches with sliding-window layers
(they keep other slots).

One graph per process: a complete run (recipe.py --arm ets,gmts) uses the compiled step three ways: the plain model
at the evaluation's rows without entropy, the merged PEFT model at the training batch's rows with it, the merged
PEFT model at the evaluation's rows without it. Dynamo guards on what the traced code reads, so each would compile
its own graph: (a) the entropy buffer (None or a tensor): always a tensor; (b) the number of rows (every buffer's dim
0): symbolic (`_mark_for_compile`; every other dim static, the cache length above all, so a new cache bucket still
compiles anew); (c) the model as traced: module classes (PEFT's LoRA wrappers), `training` (TRL generates in train
mode, the evaluation in eval mode), parameters' requires_grad (the plain model's require grad, the PEFT base is
frozen), gradient checkpointing flags (on after training) and TRL's fused LM head on the trained model's forward.
`step_view` makes every model's step see the same plain transformers model, each change exact for what is sampled
(its docstring says why) and undone after the call. On the CPU the sequence of a complete run traces one graph
(tests/test_decode_loop.py); each part of the view is needed there (without any one: two or three graphs). Still
separate graphs: another cache length, temperature or sampler (constants of the graph), a model with dropout (it
keeps its train mode while generating), unmerged adapters. A complete run compiles the step once, in its first base
evaluation, and records one CUDA graph per number of rows.

Nested compile regions (`compile_regions=True`, the trainer's `generation_compile_regions`; on in configs/paper.yaml):
the cold compilation of the 28-layer step is mostly inductor's lowering and code generation of 28 unrolled copies
of one layer. `layer_regions` marks each decoder layer's forward as a torch.compiler.nested_compile_region: dynamo
still traces every layer, but installs equal layer graphs once (invoke_subgraph) and inductor compiles that one. It
traces with fullgraph through the layer's in-place cache write, with the tokens of eager (tests/test_decode_loop.py),
but only with static rows (`_mark_for_compile` says why): one compilation per number of rows, two in a complete run
(the evaluation's and the training step's batch), where the unrolled step compiles once. A cold complete run
compiles for less time with regions; the token step is as fast.

Fused projections (`fused_projections=True`, the trainer's `generation_fused_projections`; off in configs/paper.yaml):
each decoder layer's q/k/v projections as one matrix product and gate/up as one, inside the view (fused.py says how
and why: small-M GEMMs cost their latency, not their weight reads). The same numbers on the CPU in float32; on a GPU
the wider products may round otherwise in bf16.

The compiled path has no .item()/.tolist() in the step and no branching on tensor values, and traces without a graph
break on the CPU (backend aot_eager, tests/test_decode_loop.py).

Measurements (the host's share of a token step, the speed-ups against generate at the training and evaluation rows,
the shared prefill, the compilations per process, nested regions, fused projections): bench/README.md, section "What
selection costs" (paragraphs "The whole token step as one graph", "One compiled step per process", "Nested compile
regions") and section "One real step, broken down".
"""

from __future__ import annotations

import contextlib
import inspect
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, fields

import torch

from gmts_recipe.generation.fused import fused_projections as fused_layers
from gmts_recipe.speed_options import DECODE_LOOPS, SAMPLING_NOISES  # noqa: F401 - re-exported (eval.py, tests)

SAMPLERS = ("multinomial", "exponential", "counter")
CHECK_EVERY = 8  # token steps between two reads of the all-rows-finished flag
_MASK32 = 0xFFFFFFFF
# Where a generation's sampling noise comes from: "stream", torch's generator (what transformers' generate does: each
# draw depends on every draw before it in the process); "counter", a function of (seed, stream, row, column, token)
# (`noise_keys`, `counter_noise`), in the compiled step. The evaluation's stream is EVAL_STREAM, training step t's
# `train_stream(t)`: one seed's arms draw the same numbers at every step.
EVAL_STREAM = 0x5EED


def train_stream(step: int) -> int:
    """The `noise_keys` stream of the generation at training step `step` (apart from EVAL_STREAM below 2^31)."""
    return (1 << 31) + step


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 x in [0, 2^32) and a constant c < 2^32, with every intermediate below 2^49: the
    product is split at c's 16th bit, so int64 never overflows (signed overflow is undefined in C++ kernels)."""
    return ((((x * (c >> 16)) & 0xFFFF) << 16) + x * (c & 0xFFFF)) & _MASK32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (C. Wellons' hash prospector: x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b;
    x ^= x >> 16), a bijection of the 32-bit integers in which every input bit flips each output bit with probability
    ~1/2. On int64 tensors holding [0, 2^32); the same integers on any device, eager or compiled."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def noise_keys(seed: int, stream: int, rows: torch.Tensor) -> torch.Tensor:
    """Per-row keys of the "counter" sampler, (R,) int64: a hash of (seed, stream, row). `stream` names one generation
    call's noise (the evaluation, or a training step), `rows` each row's index in it (a sample's place in the
    evaluation, a rollout's in the step's batch), so the noise a row gets depends on nothing else."""
    base = hash32(hash32(torch.tensor(seed & _MASK32, dtype=torch.long)) ^ (stream & _MASK32))
    return hash32(base ^ (rows.long() & _MASK32))


def counter_noise(keys: torch.Tensor, column: torch.Tensor, vocab: int) -> torch.Tensor:
    """Exp(1) noise (B, V) float32, a pure function of (each row's key, the token's column, the vocabulary entry):
    u = (23 hashed bits + 1/2) / 2^23 in (0, 1), E = -log u (> 0 and finite: `exponential_of_bits`). Nothing is drawn
    from a generator, so the noise repeats whatever ran before in the process, whatever the batch holds and whether
    the step is compiled (CUDA-graph warm-ups and recordings consume no random state). keys (B,), column (1,) long.

    A key is 64 bits (the int64's bits): its high half enters through the column, `column ^ hash32(high)`, and
    hash32(0) is 0, so a key below 2^32 (every key of counter noise versions 1 and 2, and of the evaluation) draws
    exactly the noise it drew when keys were 32 bits. Two keys that differ only in their high half draw the same
    noise at no column but by a 32-bit coincidence at that column, never for a whole row."""
    high = (keys >> 32) & _MASK32  # arithmetic shift of the int64's bits, masked: the key's upper 32 bits
    row = hash32((keys & _MASK32) ^ hash32(column ^ hash32(high)))  # (B,): one 32-bit state per row and column
    token = torch.arange(vocab, device=keys.device)  # (V,)
    return exponential_of_bits(hash32(hash32(row[:, None] ^ token[None, :])) >> 9)  # (B, V)


def exponential_of_bits(bits: torch.Tensor) -> torch.Tensor:
    """E = -log u, u = (bits + 1/2) / 2^23 for 23 random bits: u in [2^-24, 1 - 2^-24], every value exact in float32,
    so E is finite and > 0 (6e-8 to 16.6). With 24 bits the top value, 2^24 - 1/2, rounds to 2^24 in float32: u = 1
    and E = 0, and p / E = inf picks that token whatever its probability, once per ~2^24 entries: ~1% of token steps
    over a 151,936-token vocabulary."""
    return -torch.log((bits.float() + 0.5) * 2.0 ** -23)


def sample_next(logits: torch.Tensor, temperature: float, sampler: str = "exponential",
                generator: torch.Generator | None = None, keys: torch.Tensor | None = None,
                column: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row from softmax(logits / T): logits (B, V) -> (B,) long. A pure function of (logits, T,
    generator); None draws from the default generator (the one a compiled graph can use). "counter": of (logits, T,
    keys (B,), column (1,)) instead (`counter_noise`), the same argmax(p / E) with E ~ Exp(1)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # transformers: float32 logits, then / T, softmax
    if sampler == "multinomial":
        return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
    if sampler == "counter":
        return torch.argmax(probs / counter_noise(keys, column, probs.size(-1)), dim=-1)
    noise = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return torch.argmax(probs / noise.clamp_min(torch.finfo(probs.dtype).tiny), dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Entropy of softmax(logits / T) per row: (B, V) -> (B,) float32, the distribution transformers samples from
    (float32 logits, / T, softmax). The one formula for the entropy recorded while generating: the compiled step
    writes it, fast.EntropyRecorder (the logits processor of transformers' generate) calls it."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.special.entr(probs).sum(dim=-1)


@dataclass
class DecodeState:
    """Every tensor a decode step reads or writes, fixed-shape and updated in place (static addresses for a graph)."""

    token: torch.Tensor  # (B, 1) long: the token fed to the next step
    position_ids: torch.Tensor  # (B, 1) long: its position (transformers' for left padding)
    cache_position: torch.Tensor  # (1,) long: the cache slot it is written to
    attention_mask: torch.Tensor  # (B, L) long: 1 for the prompt's real tokens and every slot written so far
    unfinished: torch.Tensor  # (B,) bool: rows that have not emitted EOS
    step: torch.Tensor  # (1,) long: the next column of `tokens`
    tokens: torch.Tensor  # (B, L) long: the completion in its first columns, pad after a row's EOS
    entropy: torch.Tensor  # (B, L) float32: token_entropy of the logits each token was drawn from, always computed
    noise_key: torch.Tensor  # (B,) long: each row's key of the "counter" sampler (`noise_keys`; unused by the others)


def _is_eos(tokens: torch.Tensor, eos_token_ids: tuple[int, ...]) -> torch.Tensor:
    """Where tokens are one of the EOS ids (bool, tokens' shape); a fixed chain of compares, which compiles into the
    step's graph."""
    is_eos = torch.zeros_like(tokens, dtype=torch.bool)
    for eos in eos_token_ids:
        is_eos = is_eos | (tokens == eos)
    return is_eos


def _advance(state: DecodeState, logits: torch.Tensor, temperature: float, eos_token_ids: tuple[int, ...],
             pad_token_id: int, sampler: str) -> None:
    """Sample the next token from logits (B, V) and do transformers' bookkeeping: pad for a finished row, the row
    finished once it emits EOS, the token written to the output and fed to the next step; the entropy of the
    distribution it was drawn from at the same column (always: one signature for every caller)."""
    state.entropy.index_copy_(1, state.step, token_entropy(logits, temperature)[:, None])
    next_tokens = sample_next(logits, temperature, sampler, keys=state.noise_key, column=state.step)
    next_tokens = torch.where(state.unfinished, next_tokens, pad_token_id)
    is_eos = _is_eos(next_tokens, eos_token_ids)
    state.tokens.index_copy_(1, state.step, next_tokens[:, None])
    state.unfinished.logical_and_(~is_eos)
    state.token.copy_(next_tokens[:, None])
    state.step.add_(1)


def decode_step(model, cache, state: DecodeState, temperature: float, eos_token_ids: tuple[int, ...],
                pad_token_id: int, sampler: str) -> None:
    """One token step on fixed-shape tensors, all in place: the forward on `state.token` at its cache slot, then
    `_advance`. What `compiled=True` turns into one graph."""
    state.attention_mask.index_fill_(1, state.cache_position, 1)
    logits = model(input_ids=state.token, position_ids=state.position_ids, attention_mask=state.attention_mask,
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    state.position_ids.add_(1)
    state.cache_position.add_(1)
    _advance(state, logits, temperature, eos_token_ids, pad_token_id, sampler)


_COMPILED: dict[tuple[str, str], object] = {}
# torch.compile mode of the step with inductor. Both record CUDA graphs; "max-autotune" also times Triton GEMM templates
# against cuBLAS for each matrix product of the step when it first compiles: a bench-level setting, slower for the
# latency-bound small-batch decode GEMMs (bench/README.md, "What selection costs": the max-autotune table; the script
# that measured it: `git show 1974849:bench/decode_options.py`, --option decode_loop_autotune).
COMPILE_MODES = ("reduce-overhead", "max-autotune")
COMPILE_MODE = "reduce-overhead"
# Who records and replays the compiled step's CUDA graph: "cudagraph_trees", torch.compile's own (mode
# "reduce-overhead": before every replay it checks each input in Python, the model's parameters among them), or
# "whole_step": the step compiled without CUDA graphs (the same inductor kernels) and recorded once into one
# torch.cuda.CUDAGraph per decode buffers (`_StepGraph`), replayed with no Python between token steps. A bench-level
# switch (bench/step.py --step_graph), the "counter" sampler only (it draws nothing from a generator, so a replay
# needs no generator state). Not faster than cudagraph trees, with the same kernels and tokens: the host's Python was
# not what kept the GPU waiting (measurements: bench/README.md, "One real step, broken down", `--step_graph`).
STEP_GRAPHS = ("cudagraph_trees", "whole_step")
STEP_GRAPH = "cudagraph_trees"
_BUFFERS: list = []  # at most one (model, shape key, cache, state): the last shape's tensors, reused
_GRAPHS: list = []  # at most one _StepGraph: the one recorded on the last shape's buffers


def _buffers(model, batch: int, cache_len: int, device: torch.device, regions: bool = False):
    """The static cache and the decode state for this shape, reset in place when the last call had the same shape: the
    same addresses every call, so a CUDA graph recorded once is replayed (new tensors would make it re-record), as
    transformers reuses its static cache. Only the last shape is kept (an 880-row cache is gigabytes). The outputs are
    as wide as the cache, which bounds any max_new_tokens: one compiled graph per cache length and one CUDA graph
    recorded per (rows, cache length), whatever the number of new tokens (bench/step.py profiles 16 and 40 on the
    256-token call's graph). `regions` is in the key: its tensors carry other dynamo marks (`_mark_for_compile`)."""
    from transformers import StaticCache

    key = (batch, cache_len, device, next(model.parameters()).dtype, regions)
    if _BUFFERS and _BUFFERS[0][0]() is model and _BUFFERS[0][1] == key:
        cache, state = _BUFFERS[0][2:]
        cache.reset()
        return cache, state
    _BUFFERS.clear()
    _GRAPHS.clear()  # recorded on the dropped buffers' addresses
    long = {"dtype": torch.long, "device": device}
    cache = StaticCache(config=model.config, max_cache_len=cache_len)
    state = DecodeState(token=torch.zeros(batch, 1, **long), position_ids=torch.zeros(batch, 1, **long),
                        cache_position=torch.zeros(1, **long), attention_mask=torch.zeros(batch, cache_len, **long),
                        unfinished=torch.ones(batch, dtype=torch.bool, device=device),
                        step=torch.zeros(1, **long), tokens=torch.zeros(batch, cache_len, **long),
                        entropy=torch.zeros(batch, cache_len, dtype=torch.float32, device=device),
                        noise_key=torch.zeros(batch, **long))
    _BUFFERS.append((weakref.ref(model), key, cache, state))
    return cache, state


def release_buffers() -> None:
    """Drop the kept static cache and decode state (gigabytes at 880 rows): for a process that goes on to other work,
    as a warm sweep worker does between cells (gmts_recipe.worker), where a fresh process would hold none."""
    _BUFFERS.clear()
    _GRAPHS.clear()


def _mark_for_compile(cache, state: DecodeState, regions: bool = False) -> None:
    """Before the compiled step's first call on these tensors: static addresses (a CUDA graph replays at them, and
    cudagraph trees take their in-place updates as mutations of static inputs), and dim 0, the rows, symbolic, every
    other dim static (the cache length above all): 64 and 880 rows trace one graph. `maybe_mark_dynamic`, not
    `mark_dynamic`: where the model specializes the rows (1 row: dynamo fixes sizes 0 and 1) the step recompiles for
    that size instead of failing. With `regions` (`layer_regions`) the rows stay static: one graph per number of rows.
    Symbolic rows cannot serve there (torch 2.13): dynamo gives each marked tensor's rows a symbol of its own, so
    each layer's subgraph (reading its own cache layer) differs from the others, and where they are made one symbol
    (dynamic=True, every other dim marked static), AOT autograd, functionalizing a region that writes the cache in
    place (auto_functionalized_v2), reads the rows as an int inside the layer's first matrix product and fixes them
    anyway (bench/README.md, "Nested compile regions")."""
    for f in fields(state):
        torch._dynamo.mark_static_address(getattr(state, f.name))
    if regions:
        return
    rows = [state.token, state.position_ids, state.attention_mask, state.unfinished, state.tokens, state.entropy,
            state.noise_key]
    rows += [t for layer in cache.layers for t in (layer.keys, layer.values)]
    for t in rows:
        torch._dynamo.maybe_mark_dynamic(t, 0)


def _merged_lora_layers(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Module]]:
    """(parent, name, layer) of every PEFT LoRA Linear or Embedding whose forward is exactly its base layer's: merged,
    adapters enabled, no hook and no instance forward. peft 0.21's `forward` then runs `self.base_layer(x)` alone
    (`_check_forward_args` checks adapter_names only, which the step never passes): the merged adapter is in the base
    weights. Other tuner layers (and subclasses: quantized LoRA) keep their own forwards."""
    from peft.tuners.lora.layer import Embedding, Linear

    return [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
            if type(child) in (Linear, Embedding) and child.merged and not child.disable_adapters
            and not child._forward_hooks and not child._forward_pre_hooks and "forward" not in vars(child)]


def _trl_fused_head(model: torch.nn.Module) -> bool:
    """Whether the model's own `forward` attribute is TRL's fused LM head over its class's forward
    (trl.trainer.utils.add_fused_lm_head, which GRPOTrainer applies to the model it trains): called without
    `fused_lm_head=True` and labels, as the loop calls it, it returns `original_forward(*args, **kwargs)`, the class's
    forward bound to this model (checked here in its closure)."""
    func = getattr(vars(model).get("forward"), "__func__", None)
    if func is None or func.__code__.co_qualname != "add_fused_lm_head.<locals>._fused_forward":  # not __qualname__:
        return False  # functools.wraps gives it the class forward's
    original = inspect.getclosurevars(func).nonlocals.get("original_forward")
    return getattr(original, "__func__", None) is type(model).forward and original.__self__ is model


_UNSET = object()
DROPOUT_NAMES = ("dropout", "pdrop", "jitter")  # module attributes holding a train-mode-only probability or noise


def _eval_mode_is_exact(model: torch.nn.Module) -> bool:
    """Whether the model computes the same in eval mode as in train mode under no_grad: no dropout module with p > 0
    and no module attribute named like a dropout or a router's jitter (Qwen2Attention's `attention_dropout`, GPT-2's
    `resid_pdrop`, Mixtral's `jitter_noise`) other than 0. Conservative: a model that fails keeps its mode."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            return False
        for name, value in vars(module).items():
            if (isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0
                    and any(word in name for word in DROPOUT_NAMES)):
                return False
    return True


_REGION_FORWARDS: dict[type, object] = {}  # decoder layer class -> its forward as a nested compile region


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder layers: transformers' layers (GradientCheckpointingLayer) held in a ModuleList, without a
    forward of their own instance (a hook's or adapter's: wrapping the class's forward would skip it)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [layer for parent in model.modules() if isinstance(parent, torch.nn.ModuleList) for layer in parent
            if isinstance(layer, GradientCheckpointingLayer) and "forward" not in vars(layer)]


def _region_forward(cls: type):
    """`cls.forward` marked as torch.compiler.nested_compile_region, one object per class: dynamo guards on the
    function the step calls, so a new wrapper per call would recompile."""
    if cls not in _REGION_FORWARDS:
        _REGION_FORWARDS[cls] = torch.compiler.nested_compile_region(cls.forward)
    return _REGION_FORWARDS[cls]


@contextlib.contextmanager
def layer_regions(model: torch.nn.Module) -> Iterator[None]:
    """Each decoder layer's forward as a nested compile region for the block (an instance attribute, deleted after,
    also on an exception): dynamo traces each layer into a subgraph, the equal subgraphs are installed once
    (invoke_subgraph) and inductor compiles the layer once instead of 28 unrolled copies. Eager it calls the
    layer's forward as it is. The layer's in-place write of its keys and values into the static cache is an input
    mutation, which invoke_subgraph supports, with static shapes only (`_mark_for_compile`). Refused for a model with
    no decoder layer to wrap."""
    layers = _decoder_layers(model)
    if not layers:
        raise ValueError(f"decode_loop: compile_regions=True found no decoder layer (transformers' "
                         f"GradientCheckpointingLayer in a ModuleList) in {type(model).__name__}; pass "
                         f"compile_regions=False")
    try:
        for layer in layers:
            layer.forward = types.MethodType(_region_forward(type(layer)), layer)
        yield
    finally:
        for layer in layers:
            vars(layer).pop("forward", None)


@contextlib.contextmanager
def step_view(model: torch.nn.Module) -> Iterator[None]:
    """The model as every decode step sees it, for the block, then exactly as it was (also on an exception).

    Dynamo guards on what the traced code reads: module classes, each module's `training`, each parameter's
    requires_grad. The plain model of the base evaluation (eval mode, parameters requiring grad), the PEFT model of a
    training step's generation (train mode, LoRA wrappers, frozen base) and of an arm's evaluation (eval mode) would
    each trace their own 28-layer graph, compiled once each per process (measurements: bench/README.md, "What
    selection costs", "One compiled step per process"). Inside the
    block, with the same sampled distribution:
    - every merged LoRA layer (`_merged_lora_layers`) is replaced in its parent by its base layer, whose weights hold
      the merged adapter: PEFT's own forward would call just that;
    - the modules are in eval mode where that changes nothing (`_eval_mode_is_exact`; TRL generates in train mode);
    - no parameter requires grad (the step runs under no_grad, where the flag changes nothing computed);
    - gradient checkpointing is off, as an instance attribute on every module that has the flag (whether a layer's
      flag is its class's or its own is guarded too): under no_grad it recomputes nothing, and a checkpointed layer in
      train mode would drop the cache the loop decodes from (TRL turns it off around generation, not around an
      evaluation after training).
    - TRL's fused LM head (`_trl_fused_head`), the trained model's own `forward`, is dropped: the class's forward,
      which it calls, is called directly.
    The plain and the merged PEFT model of one architecture then hit one compiled graph."""
    swaps = _merged_lora_layers(model)
    modes = [(m, m.training) for m in model.modules()]  # the wrappers' base layers included
    grads = [p for p in model.parameters() if p.requires_grad]
    checkpointing = [(m, vars(m).get("gradient_checkpointing", _UNSET)) for m in model.modules()
                     if hasattr(m, "gradient_checkpointing")]
    fused_head = vars(model)["forward"] if _trl_fused_head(model) else None
    try:
        if fused_head is not None:
            del model.forward
        for parent, name, layer in swaps:
            setattr(parent, name, layer.base_layer)
        if _eval_mode_is_exact(model):
            model.eval()
        for p in grads:
            p.requires_grad_(False)
        for m, _ in checkpointing:
            m.gradient_checkpointing = False
        yield
    finally:
        for m, value in checkpointing:
            if value is _UNSET:
                del m.gradient_checkpointing
            else:
                m.gradient_checkpointing = value
        for p in grads:
            p.requires_grad_(True)
        for m, training in modes:
            m.training = training
        for parent, name, layer in reversed(swaps):
            setattr(parent, name, layer)
        if fused_head is not None:
            model.forward = fused_head


def inductor_options(mode: str) -> dict:
    """torch.compile's inductor options for `mode`, with inductor's deterministic mode where the mode does not time
    kernels: by default inductor benchmarks the launch configurations of every reduction kernel (RMSNorm, the
    softmax and entropy over the vocabulary) the first time it runs them and keeps the fastest, and the block size and
    warp count it keeps change the order of the sums. Which one wins depends on timing noise, so a process on a cold
    compile cache could compute other logits, hence draw other tokens, than one that found the winner cached
    (`deterministic` fixes each kernel's configuration by a rule instead; torch >= 2.8). "max-autotune" times the
    matrix products' kernels too: a bench-level setting, not repeatable."""
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(mode))
    if mode == "reduce-overhead" and "deterministic" in torch._inductor.config._config:
        options["deterministic"] = True
    return options


def compiled_step(backend: str = "inductor", regions: bool = False, graphs: bool = True):
    """`decode_step` compiled once per process, `COMPILE_MODE` and `regions` (fullgraph, static shapes but the rows,
    which `sample` marks symbolic unless `regions`; CUDA graphs and deterministic kernels with inductor:
    `inductor_options`). `graphs=False`: the same options without inductor's CUDA graphs, for `_StepGraph`."""
    if COMPILE_MODE not in COMPILE_MODES:
        raise ValueError(f"decode_loop.COMPILE_MODE {COMPILE_MODE!r}: use one of {', '.join(COMPILE_MODES)}")
    key = (backend, COMPILE_MODE, regions, graphs)
    if key not in _COMPILED:
        options = {}
        if backend == "inductor":
            options = {"options": {**inductor_options(COMPILE_MODE), **({} if graphs else {"triton.cudagraphs": False})}}
        _COMPILED[key] = torch.compile(decode_step, backend=backend, fullgraph=True, dynamic=False, **options)
    return _COMPILED[key]


class _StepGraph:
    """The compiled step recorded once into one torch.cuda.CUDAGraph and replayed for every later token step
    (`STEP_GRAPH = "whole_step"`). Every tensor the step reads or writes has a fixed address (`_buffers`, the model's
    weights, which the merged adapter changes in place), so a replay computes the step on whatever they hold now; the
    scalars (temperature, EOS ids, pad id, sampler) are constants of the recording, and `key` holds them with every
    parameter's and buffer's address: a call whose key differs records anew. The first `WARMUP` token steps of the
    first call run the compiled function itself on a side stream (real steps: compiling, loading kernels, cuBLAS's
    workspace), then the next one is recorded and replayed."""

    WARMUP = 2

    def __init__(self, fn, args: tuple, key: tuple):
        self.fn, self.args, self.key = fn, args, key
        self.graph, self.warm = None, 0

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
            return
        if self.warm < self.WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn(*self.args)
            torch.cuda.current_stream().wait_stream(side)
            self.warm += 1
            return
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.fn(*self.args)  # recorded, not run
        self.graph, self.args = graph, None  # a replay needs no Python object: the model is not kept alive here
        graph.replay()


def _step_graph(fn, model, cache, state: DecodeState, temperature: float, eos: tuple[int, ...], pad_token_id: int,
                sampler: str) -> _StepGraph:
    """The recorded step for these buffers and this model's weights, kept while they stay (one: the last shape's)."""
    key = (id(cache), id(state), fn, temperature, eos, pad_token_id, sampler,
           tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers())))
    if not _GRAPHS or _GRAPHS[0].key != key:
        _GRAPHS.clear()
        _GRAPHS.append(_StepGraph(fn, (model, cache, state, temperature, eos, pad_token_id, sampler), key))
    return _GRAPHS[0]


class _DoneFlag:
    """Whether every row has finished, read without waiting: on CUDA the flag is copied to pinned memory without
    blocking and read at the next check (by then the GPU is past it); on the CPU it is read at once."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.host = torch.zeros((), dtype=torch.bool, pin_memory=self.cuda)
        self.event = None

    def poll(self, unfinished: torch.Tensor) -> bool:
        if not self.cuda:
            return not bool(unfinished.any())
        done = False
        if self.event is not None:
            self.event.synchronize()
            done = bool(self.host)
        self.host.copy_(~unfinished.any(), non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()
        return done


def check_supported(temperature: float, sampler: str, top_k: int | None = 0, top_p: float | None = 1.0,
                    min_p: float | None = None, repetition_penalty: float | None = 1.0) -> None:
    """Refuse what this loop does not compute exactly as transformers would, with the reason."""
    if not temperature > 0 or temperature == float("inf"):
        raise ValueError(f"decode_loop: temperature {temperature} unsupported; it samples at a finite temperature > 0")
    if sampler not in SAMPLERS:
        raise ValueError(f"decode_loop: unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    neutral_values = {"top_k": (top_k, (0, None)), "top_p": (top_p, (1.0, None)), "min_p": (min_p, (None, 0.0)),
                      "repetition_penalty": (repetition_penalty, (1.0, None))}
    for name, (value, neutral) in neutral_values.items():
        if value not in neutral:
            raise ValueError(f"decode_loop: {name}={value} unsupported; it samples softmax(logits / T) only, use "
                             f"decode_loop='transformers' for {name}")


# GenerationConfig fields `sample_with_config` reads, or that leave what `generate` samples unchanged at any value
# (after generate's own defaults are filled in: `resolved_generation_config`).
GENERATION_ANY_VALUE = frozenset({
    "max_new_tokens", "temperature", "eos_token_id", "pad_token_id",  # implemented (temperature: check_supported)
    "max_length",  # generate stops at max_new_tokens when it is set (then required), whatever max_length says
    "bos_token_id",  # the prompt is given: nothing to start
    "use_cache", "cache_implementation", "cache_config", "max_cache_len", "prefill_chunk_size",  # how, not what
    "compile_config", "disable_compile",  # how, not what
    "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",  # assisted decoding
    "assistant_lookbehind", "target_lookbehind",  # only, with an assistant model, which the loop never receives
    "transformers_version", "_from_model_config",  # metadata
})
# Fields whose processor, search or output is off at these values; unset (None) is off too. `do_sample` must be True.
# Every other field must be unset: a setting transformers adds later is refused until it is listed here.
GENERATION_OFF_VALUES = {
    "do_sample": (True,), "top_k": (0,), "top_p": (1.0,), "min_p": (0.0,), "repetition_penalty": (1.0,),
    "typical_p": (1.0,), "epsilon_cutoff": (0.0,), "eta_cutoff": (0.0,), "encoder_repetition_penalty": (1.0,),
    "no_repeat_ngram_size": (0,), "encoder_no_repeat_ngram_size": (0,), "min_length": (0,), "min_new_tokens": (0,),
    "num_beams": (1,), "num_beam_groups": (1,), "diversity_penalty": (0.0,), "length_penalty": (1.0,),
    "early_stopping": (False,), "num_return_sequences": (1,), "guidance_scale": (1.0,),
    "remove_invalid_values": (False,), "renormalize_logits": (False,), "low_memory": (False,),
    "output_attentions": (False,), "output_hidden_states": (False,), "output_scores": (False,),
    "output_logits": (False,), "return_dict_in_generate": (False,),
}
CHECK_SUPPORTED_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")  # its own messages


def resolved_generation_config(model, config):
    """The settings `model.generate(generation_config=config)` runs with: `config`, its unset fields from the model's
    own generation_config, then transformers' defaults (e.g. top_k 50, do_sample False). It is transformers' own
    merge (`_prepare_generation_config`, which generate calls), so a field left None is judged by the value generate
    would use, not by None."""
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return owner._prepare_generation_config(config)[0]


def check_supported_config(config) -> None:
    """Refuse, in one line naming each setting, a resolved generation config (`resolved_generation_config`) with any
    setting `sample` would ignore: it samples softmax(logits / T) until EOS or max_new_tokens and nothing else. Every
    field is compared with the allow-lists above (the top_k .. repetition_penalty through `check_supported`), so a
    field no list names is refused unless unset."""
    off = []
    for name, value in config.to_dict().items():
        if name in GENERATION_ANY_VALUE or name in CHECK_SUPPORTED_FIELDS:
            continue
        if name in GENERATION_OFF_VALUES:
            ok = value in GENERATION_OFF_VALUES[name] or (value is None and name != "do_sample")
        else:
            ok = value is None
        if not ok:
            off.append(f"{name}={value!r}")
    if off:
        raise ValueError(f"decode_loop: {', '.join(off)} unsupported; it samples softmax(logits / T) until EOS or "
                         f"max_new_tokens, nothing else: unset {'them' if len(off) > 1 else 'it'} or use "
                         f"decode_loop='transformers'")
    if config.max_new_tokens is None:
        raise ValueError("decode_loop: max_new_tokens unset; it stops at max_new_tokens, set it (not max_length)")
    temperature = 1.0 if config.temperature is None else config.temperature  # generate's: no warper
    check_supported(temperature, "exponential", config.top_k, config.top_p, config.min_p, config.repetition_penalty)


def _check_prompt_groups(input_ids: torch.Tensor, mask: torch.Tensor, rows_per_prompt: int) -> None:
    """Refuse a `rows_per_prompt` the rows do not have: a shared prefill of unequal rows would be silently wrong."""
    batch = input_ids.size(0)
    if rows_per_prompt == 1:
        return
    if rows_per_prompt < 1 or batch % rows_per_prompt:
        raise ValueError(f"decode_loop: rows_per_prompt={rows_per_prompt} does not divide the {batch} rows; "
                         f"pass 1 or a divisor whose groups are one prompt's rows")
    groups = (input_ids.unflatten(0, (-1, rows_per_prompt)) == input_ids[::rows_per_prompt, None]).all()
    groups &= (mask.unflatten(0, (-1, rows_per_prompt)) == mask[::rows_per_prompt, None]).all()
    if not bool(groups):
        raise ValueError(f"decode_loop: rows_per_prompt={rows_per_prompt} but a group of {rows_per_prompt} "
                         f"consecutive rows holds different prompts; pass 1 or group each prompt's rows")


def _prefill(model, cache, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
             rows_per_prompt: int) -> torch.Tensor:
    """The prompts' forward (eager) into `cache`; the last position's logits (B, V). With rows_per_prompt g > 1 the
    forward runs on the first row of each group only, into a StaticCache of g times fewer rows and the same length
    (the very computation of the full batch's prefill on those rows, with the same mask width), and its keys and
    values of the prompt's slots are written into every row of the group through the cache's own `update`, as the
    forward would have written them (which also advances the layer's cumulative length the decode step reads)."""
    if rows_per_prompt == 1:
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    if any(type(layer) is not StaticLayer for layer in cache.layers):  # a sliding window keeps other slots
        raise ValueError("decode_loop: rows_per_prompt > 1 needs full-attention layers only; pass rows_per_prompt=1")
    g, prompt_len = rows_per_prompt, input_ids.size(1)
    unique = StaticCache(config=model.config, max_cache_len=attention_mask.size(1))
    logits = model(input_ids=input_ids[::g], attention_mask=attention_mask[::g], position_ids=position_ids[::g],
                   past_key_values=unique, use_cache=True, logits_to_keep=1).logits[:, -1]
    for i, layer in enumerate(unique.layers):
        cache.update(layer.keys[:, :, :prompt_len].repeat_interleave(g, dim=0),
                     layer.values[:, :, :prompt_len].repeat_interleave(g, dim=0), i)
    return logits.repeat_interleave(g, dim=0)


def _checked_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, compiled: bool,
                    sampler: str, cache_len: int, rows_per_prompt: int,
                    noise_keys: torch.Tensor | None) -> torch.Tensor:
    """`sample`'s refusals of what it cannot do exactly, each in one line before any forward runs; the attention
    mask as integers (the prompts' positions are computed from it)."""
    if STEP_GRAPH not in STEP_GRAPHS:
        raise ValueError(f"decode_loop.STEP_GRAPH {STEP_GRAPH!r}: use one of {', '.join(STEP_GRAPHS)}")
    if STEP_GRAPH == "whole_step" and compiled and sampler != "counter":
        raise ValueError(f"decode_loop: STEP_GRAPH='whole_step' records the step once and replays it, which only the "
                         f"'counter' sampler allows (it draws nothing from a generator); sampler={sampler!r}")
    batch, prompt_len = input_ids.shape
    if (sampler == "counter") != (noise_keys is not None):
        raise ValueError(f"decode_loop: noise_keys go with sampler='counter' and only with it (sampler={sampler!r})")
    if noise_keys is not None and tuple(noise_keys.shape) != (batch,):
        raise ValueError(f"decode_loop: noise_keys of shape {tuple(noise_keys.shape)}; one key per row: ({batch},)")
    if max_new_tokens < 1:
        raise ValueError(f"decode_loop: max_new_tokens={max_new_tokens}; it needs at least 1")
    if cache_len < prompt_len + max_new_tokens:
        raise ValueError(f"decode_loop: cache_len {cache_len} < prompt {prompt_len} + {max_new_tokens} new tokens")
    mask = attention_mask.long()
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise ValueError("decode_loop: the prompts must be left-padded (padding_side='left')")
    _check_prompt_groups(input_ids, mask, rows_per_prompt)
    return mask


def _start(model, cache, state: DecodeState, input_ids: torch.Tensor, mask: torch.Tensor, rows_per_prompt: int,
           noise_keys: torch.Tensor | None, temperature: float, eos: tuple[int, ...], pad_token_id: int,
           sampler: str) -> None:
    """The prompts' prefill and the first token's draw, with every decode buffer reset in place for this call (the
    buffers and their addresses are reused across calls: a recorded CUDA graph replays on them)."""
    prompt_len = input_ids.size(1)
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # transformers' left-padding positions
    state.attention_mask.zero_()
    state.attention_mask[:, :prompt_len] = mask
    logits = _prefill(model, cache, input_ids, state.attention_mask, position_ids, rows_per_prompt)
    state.position_ids.copy_(position_ids[:, -1:] + 1)
    state.cache_position.fill_(prompt_len)
    state.unfinished.fill_(True)
    state.step.zero_()
    state.tokens.fill_(pad_token_id)
    state.noise_key.copy_(noise_keys if noise_keys is not None else torch.zeros_like(state.noise_key))
    _advance(state, logits, temperature, eos, pad_token_id, sampler)


def _decode(step, graph, model, cache, state: DecodeState, temperature: float, eos: tuple[int, ...],
            pad_token_id: int, sampler: str, compiled: bool, max_new_tokens: int, check_every: int) -> int:
    """The token steps after the first, until `max_new_tokens` or every row finished; the number of columns
    written. The finished flag is polled every `check_every` steps from a copy made one poll earlier (`_DoneFlag`),
    so the host never waits on the GPU; the surplus steps are cut by `completion_length`."""
    flag = _DoneFlag(state.tokens.device)
    done = 1
    while done < max_new_tokens:
        if graph is not None:
            graph()
        else:
            if compiled:
                torch.compiler.cudagraph_mark_step_begin()
            step(model, cache, state, temperature, eos, pad_token_id, sampler)
        done += 1
        if done % check_every == 0 and flag.poll(state.unfinished):
            break
    return done


@torch.no_grad()
def sample(model, input_ids: torch.LongTensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
           temperature: float, eos_token_ids: int | list[int] | tuple[int, ...], pad_token_id: int, compiled: bool,
           sampler: str = "exponential", cache_len: int | None = None, check_every: int = CHECK_EVERY,
           compile_backend: str = "inductor", top_k: int | None = 0, top_p: float | None = 1.0,
           min_p: float | None = None, repetition_penalty: float | None = 1.0, return_entropy: bool = False,
           rows_per_prompt: int = 1, compile_regions: bool = False, noise_keys: torch.Tensor | None = None,
           fused_projections: bool = False) -> torch.LongTensor | tuple[torch.LongTensor, torch.Tensor]:
    """What `model.generate(input_ids, attention_mask, do_sample=True, temperature=T, top_k=0, top_p=1.0)` returns:
    the left-padded prompt and the completion, (B, P + n), pad after a row's EOS, n = max_new_tokens or the step at
    which the last row emitted EOS. The top_k .. repetition_penalty arguments only refuse what is not supported.
    `return_entropy`: also the (B, n) float32 entropy of each completion token's distribution (`token_entropy`),
    computed inside the step, column t for token t. `rows_per_prompt` g: the rows come in consecutive groups of g
    with identical input_ids and attention_mask (k samples of one prompt), whose prefill is computed once per group
    (`_prefill`); rows that are not such groups are refused. The model is run as `step_view` shows it: a merged PEFT
    model as its plain transformers model, one compiled step for both. `compile_regions` (with `compiled`): the
    decoder layers compiled once as nested compile regions (`layer_regions`), not unrolled, the same computation, but
    the rows static: one compilation per number of rows (`_mark_for_compile` says why). `noise_keys` (B,): the
    "counter" sampler's per-row keys (`noise_keys`), which it needs and the other samplers refuse.
    `fused_projections`: each layer's q/k/v projections run as one matrix product and gate/up as one, in the prefill
    and every step (`fused.fused_projections`: 4 products per layer instead of 7, the same numbers up to the wider
    product's rounding); a model it cannot fuse exactly is refused in one line."""
    check_supported(temperature, sampler, top_k, top_p, min_p, repetition_penalty)
    batch, prompt_len = input_ids.shape
    cache_len = cache_len or prompt_len + max_new_tokens
    mask = _checked_inputs(input_ids, attention_mask, max_new_tokens, compiled, sampler, cache_len, rows_per_prompt,
                           noise_keys)
    eos = (eos_token_ids,) if isinstance(eos_token_ids, int) else eos_token_ids
    eos = tuple(sorted(set(eos)))  # a constant of the step's graph: one order for the evaluation's and TRL's lists
    device = input_ids.device
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # as generate: PEFT's wrapper off

    regions = compiled and compile_regions
    with contextlib.ExitStack() as stack:  # one graph: the view, then what changes the layers inside it
        stack.enter_context(step_view(model))
        if fused_projections:  # after the view: merged LoRA layers are their base layers there
            stack.enter_context(fused_layers(model))
        if regions:
            stack.enter_context(layer_regions(model))
        cache, state = _buffers(model, batch, cache_len, device, regions)
        _start(model, cache, state, input_ids, mask, rows_per_prompt, noise_keys, temperature, eos, pad_token_id,
               sampler)
        step = decode_step
        whole = compiled and STEP_GRAPH == "whole_step" and device.type == "cuda"
        if compiled:
            _mark_for_compile(cache, state, regions)
            step = compiled_step(compile_backend, regions, graphs=not whole)
        graph = _step_graph(step, model, cache, state, temperature, eos, pad_token_id, sampler) if whole else None
        done = _decode(step, graph, model, cache, state, temperature, eos, pad_token_id, sampler, compiled,
                       max_new_tokens, check_every)
    n = completion_length(state.tokens[:, :done], eos)
    out = torch.cat([input_ids, state.tokens[:, :n]], dim=-1)
    return (out, state.entropy[:, :n].clone()) if return_entropy else out  # a copy: the buffer is reused


def sample_with_config(model, input_ids: torch.LongTensor, attention_mask: torch.Tensor, config,
                       cache_len: int | None = None, return_entropy: bool = False, rows_per_prompt: int = 1,
                       compile_regions: bool = False, noise_keys: torch.Tensor | None = None,
                       fused_projections: bool = False):
    """`model.generate(input_ids, attention_mask=..., generation_config=config)` through `sample`: compiled on CUDA,
    eager elsewhere (no CUDA graphs to gain), the exponential sampler (the "counter" one with `noise_keys`);
    temperature, max_new_tokens, EOS and pad ids from the config as generate would complete it
    (`resolved_generation_config`), every other setting refused unless off (`check_supported_config`): never silently
    dropped (eval.py and the trainer use it)."""
    config = resolved_generation_config(model, config)
    check_supported_config(config)
    eos = [] if config.eos_token_id is None else config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos)
    pad = eos[0] if config.pad_token_id is None else config.pad_token_id  # transformers' fallback: pad with EOS
    return sample(model, input_ids, attention_mask, max_new_tokens=config.max_new_tokens,
                  temperature=1.0 if config.temperature is None else config.temperature, eos_token_ids=eos,
                  pad_token_id=pad, compiled=input_ids.device.type == "cuda",
                  sampler="exponential" if noise_keys is None else "counter", noise_keys=noise_keys,
                  cache_len=cache_len, top_k=config.top_k, top_p=config.top_p, min_p=config.min_p,
                  repetition_penalty=config.repetition_penalty, return_entropy=return_entropy,
                  rows_per_prompt=rows_per_prompt, compile_regions=compile_regions,
                  fused_projections=fused_projections)


def completion_length(tokens: torch.Tensor, eos_token_ids: tuple[int, ...]) -> int:
    """Columns transformers would have generated: all of them while a row has no EOS, else up to the last row's
    first EOS (the steps run after every row had finished are the surplus a deferred stop check cuts)."""
    is_eos = _is_eos(tokens, eos_token_ids)
    if not bool(is_eos.any(dim=1).all()):
        return tokens.size(1)
    return int(is_eos.int().argmax(dim=1).max()) + 1
