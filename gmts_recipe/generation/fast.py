"""Generation speed for the trainer and the recipe's evaluation: what `FastGMTSTrainer._generate_single_turn` and
`eval.generate_samples` put around transformers' `generate`. The static KV cache length of compiled decoding
(`compile_cache_length`, `static_compile_config`), decoding with the LoRA adapter merged (`merged_lora`),
transformers' input-grad hooks lifted while decoding (`without_input_grad_hooks`; grad_hooks.py keeps them to one),
and TRL's `generate` call replaced inside a block (`generate_replaced`): served by
decode_loop's compiled step (`with_decode_loop`), or with the trainer's entropy recorder added to its logits
processors (`with_logits_processor`). Same tokens (the compiled step: the same distribution), fewer kernels and host
waits. `EntropyRecorder`: the entropy of each decoding step for the trainer's selection, recorded while generating
(by a logits processor, or handed over whole by the compiled step), so that no scoring pass computes it again.

The trainer's generation options (`FastGMTSTrainer._generate_single_turn`, gmts_recipe/fast_trainer.py):
- Optional (`generation_merge_adapter`): `_generate_single_turn` generates with the LoRA adapter folded into the
  weights and restores the exact base weights afterwards.
- Optional (`generation_compile`): transformers' compiled decoding (static KV cache, torch.compile with CUDA graphs),
  which TRL turns off with `disable_compile=True`. The cache is sized in buckets of `COMPILE_CACHE_BUCKET` tokens
  so that prompts of another length reuse the compiled decoder instead of recompiling it every step, and compiled
  with static shapes (`static_compile_config`).
- Optional (`generation_grouped_attention`): decoding steps attend through `attention.grouped_sdpa_forward`, the
  same attention without transformers' per-step copy of the key/value cache for every query head;
  `generation_decode_kernel` "matmul" computes its folded call as two matrix products (eager's formulation).
- Optional (`generation_deferred_stop`): on CUDA, decoding reads the all-rows-finished flag one step late
  (`decoding.deferred_stop_check`: transformers' own mechanism, which it enables on mps only), so the host queues
  the next token step while the GPU runs this one. Same tokens per call.
- Optional (`generation_decode_loop="compiled_step"`): TRL's `generate` call is served by `decode_loop.sample`, the
  whole token step (one-token forward on a static cache, sampling, bookkeeping) as one compiled graph, one CUDA-graph
  replay per token on CUDA (eager elsewhere), inside the same context (merged LoRA, grouped attention and decode
  kernel, the cache length of `compile_cache_length`; generation_compile's settings are generate's and go unused).
  It samples softmax(logits / T) and stops at EOS or max_new_tokens, nothing else: any other setting of the config
  generate would use (generation_kwargs, the checkpoint's generation_config) is refused at construction, never
  dropped. Its sampler is torch.multinomial's own algorithm (argmax(p / Exp(1))), but compiled on CUDA it draws other
  random numbers, so completions differ from generate's at the same seed: the same distribution (eager on the CPU
  they are equal, tested). The entropy for the batch and group scopes is computed inside the step
  (`decode_loop.token_entropy`, the recorder's formula) and handed to the recorder, with no processor outside the
  graph. `generation_deferred_stop` is for generate: the loop never waits for the GPU on its all-rows-finished flag
  anyway (a non-blocking copy read `decode_loop.CHECK_EVERY` steps later).
- Optional (`generation_fused_projections`, with the compiled step): each decoder layer's q/k/v projections as one
  matrix product and gate/up as one while generating (fused.py), restored after the call.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from gmts_recipe.generation.decode_loop import sample_with_config, token_entropy
from gmts_recipe.grad_hooks import input_grad_hook_keys

COMPILE_CACHE_BUCKET = 256  # static KV cache length granularity with generation_compile (one compile per bucket)


def compile_cache_length(prompt_ids: list[list[int]], max_new_tokens: int, pad_to_multiple_of: Any) -> int:
    """Static KV cache length for a generation batch, rounded up to `COMPILE_CACHE_BUCKET`: transformers keeps the
    largest length seen, so the compiled decoder sees a new shape (and recompiles) only when a bucket is outgrown."""
    longest = max((len(p) for p in prompt_ids), default=0)
    if isinstance(pad_to_multiple_of, int) and pad_to_multiple_of > 1:
        longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    return -(-(longest + max_new_tokens) // COMPILE_CACHE_BUCKET) * COMPILE_CACHE_BUCKET


def static_compile_config():
    """transformers' compile settings for decoding, with static shapes: its default (`dynamic=None`) recompiles the
    decoder with symbolic shapes the second time it sees another shape (the training's 64 rows, then the evaluation's
    880, or a second cache bucket), and every later call then runs the generic kernels. With `dynamic=False` each
    shape gets its own graph (a few per process), the first call of each paying its compilation."""
    from transformers import CompileConfig

    return CompileConfig(dynamic=False)


@contextlib.contextmanager
def merged_lora(model: torch.nn.Module):
    """Generate with the LoRA adapter folded into the base weights, then restore the base weights bit for bit.

    PEFT's unmerge subtracts the delta again, which in bf16 does not give back the original weights: repeated every
    step it would slowly rewrite the frozen model. A copy of the adapted weights avoids that.
    """
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and not m.merged]
    with torch.no_grad():
        backup = [m.get_base_layer().weight.detach().clone() for m in layers]
        for m in layers:
            m.merge()
    try:
        yield
    finally:
        with torch.no_grad():
            for m, weight in zip(layers, backup):
                m.get_base_layer().weight.copy_(weight)
                m.merged_adapters.clear()


@contextlib.contextmanager
def without_input_grad_hooks(model: torch.nn.Module):
    """Lift transformers' `make_inputs_require_grads` hooks off the input embeddings while generating.

    Gradient checkpointing with an adapter registers them so that checkpointed layers see an input that requires grad.
    Under no_grad they do nothing, but `requires_grad_` is a graph break for torch.compile: with them on, the compiled
    decoding step is split in two graphs. Matched by name; a renamed hook stays on (slower, still correct).
    """
    emb = model.get_input_embeddings()
    lifted = {k: emb._forward_hooks[k] for k in input_grad_hook_keys(emb)}
    for k in lifted:
        del emb._forward_hooks[k]
    try:
        yield
    finally:
        emb._forward_hooks.update(lifted)


class EntropyRecorder(LogitsProcessor):
    """Records the entropy of softmax(logits / T) at each decoding step, and changes nothing.

    Custom processors run before transformers' warpers (temperature, top-k, top-p), so `scores` are the model's
    logits; dividing by T gives exactly the distribution TRL's fused LM head scores in training. A decode that computes
    the entropy itself (decode_loop.sample, inside its compiled step) hands it over whole with `take`.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.steps.append(token_entropy(scores, self.temperature))  # (B,), one row per sequence
        return scores

    def take(self, entropy: torch.Tensor) -> None:
        """Record a whole decode's (B, n) entropy at once, as n calls would."""
        self.steps.extend(entropy.unbind(dim=1))

    def entropy(self, rows: int, width: int, device: torch.device) -> torch.Tensor | None:
        if not self.steps or self.steps[0].numel() != rows:
            return None
        ent = torch.stack(self.steps, dim=1).to(device)  # (B, steps)
        if ent.size(1) < width:  # pad_to_multiple_of can make the completion tensor wider than the decode
            ent = torch.nn.functional.pad(ent, (0, width - ent.size(1)))
        return ent[:, :width]


@contextlib.contextmanager
def with_decode_loop(model: torch.nn.Module, cache_len: int, recorder: EntropyRecorder | None = None,
                     compile_regions: bool = False, keys: torch.Tensor | None = None,
                     fused_projections: bool = False):
    """Serve every `model.generate(input_ids=, attention_mask=, generation_config=)` inside the block (TRL's call)
    with decode_loop.sample_with_config, compiled on CUDA (`compile_regions`: its decoder layers as nested compile
    regions); the recorder, if any, takes the entropy computed inside the step. Other inputs (a VLM's pixel values)
    are refused: the loop decodes token ids only. `keys`: the rows' "counter" noise keys (`noise.rollout_noise_keys`).
    `fused_projections`: q/k/v and gate/up as one matrix product each (fused.py)."""

    def generate(input_ids, attention_mask, generation_config, **other):
        if other:
            raise ValueError(f"generation_decode_loop='compiled_step' decodes token ids only, not {', '.join(other)}; "
                             f"use generation_decode_loop='transformers'.")
        out = sample_with_config(model, input_ids, attention_mask, generation_config, cache_len,
                                 return_entropy=recorder is not None, compile_regions=compile_regions,
                                 noise_keys=keys, fused_projections=fused_projections)
        if recorder is None:
            return out
        recorder.take(out[1])
        return out[0]

    with generate_replaced(model, generate):
        yield


@contextlib.contextmanager
def with_logits_processor(model: torch.nn.Module, processor: LogitsProcessor):
    """Make every `model.generate` call inside the block run `processor` too (TRL builds the generate call itself)."""
    with generate_replaced(model, functools.partial(model.generate,
                                                    logits_processor=LogitsProcessorList([processor]))):
        yield


@contextlib.contextmanager
def generate_replaced(model: torch.nn.Module, generate: Callable):
    """`model.generate` is `generate` inside the block (an instance attribute over the class method), then the class
    method again."""
    model.generate = generate
    try:
        yield
    finally:
        del model.generate  # drop the instance attribute: the class method shows through again
