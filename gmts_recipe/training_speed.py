"""Training speed: `training_step` with PEFT's cast of LoRA inputs turned off under autocast
(`lora_autocast_blockers`, `lora_input_casting`) and with the decoder layers compiled for the loss forward, the
checkpoint recompute and the backward (`repeated_layers`, `compiled_forward`, `layer_forwards`).

The trainer's options (`FastGMTSTrainer.training_step`):
- Speed only, same numbers (`lora_autocast_inputs`, on by default): under bf16/fp16 autocast, `training_step` runs
  with PEFT's cast of each LoRA layer's input to the adapter's float32 turned off (`lora_input_casting`), a copy that
  autocast copies straight back, in the forward, the checkpoint recompute and the backward; generation, which runs
  without autocast, keeps it, as do evaluation's forwards (`lora_autocast_blockers` says where it does not engage).
- Optional (`training_compile`): `training_step` runs the loss forward, the checkpoint recompute and the backward
  through the decoder layers compiled with torch.compile (regional compilation, `compiled_forward`), so inductor
  fuses the elementwise work around the matrix products (norms, rotary, SiLU x mul, LoRA's scale and add, the
  residual adds); generation and every no-grad scoring pass inside it run the layers' own forwards
  (`layer_forwards`). Same tokens, other rounding in the update: in fp32 (CPU, inductor) log-probs move by ~5e-7;
  under bf16 autocast the fused kernels keep intermediates in float32 that eager rounds to bf16 at every operation
  (log-probs ~1e-3 apart on the tiny model). The first step pays the compilation (symbolic shapes from the start,
  one graph for every layer: layer 0's input is made to require grad, ~1% more backward work); later steps, and
  later trainers in the process, compile nothing.
"""

from __future__ import annotations

import contextlib
import functools
import types
from typing import Callable

import torch

TRAINING_COMPILE_BACKEND = "inductor"  # torch.compile backend of training_compile (tests: "aot_eager")


def lora_autocast_blockers(model: torch.nn.Module, autocast_dtype: torch.dtype | None) -> list[str]:
    """Why PEFT's cast of LoRA inputs cannot be skipped with these settings ([]: it can, with the same numbers).

    A plain `lora.Linear` casts its input to the adapter's dtype and then calls `lora_A`, an nn.Linear that autocast
    casts to `autocast_dtype` anyway: from bf16/fp16 activations through float32 (which holds them exactly) to the
    autocast dtype is the same single rounding as going there directly, and the backward's casts of the gradient
    are exact too. That needs autocast (without it the float32 adapter would meet a bf16 input), adapters in float32 or
    in the autocast dtype (a narrower adapter dtype would round twice), no LoRA dropout (its mask is drawn on the
    cast input, whose dtype it could depend on), no variant (DoRA and others use the input outside autocast's linear),
    and no other tuner layer (their forwards are not this one). Bit for bit on CPU, with and without checkpointing
    (tests/test_lora_autocast.py).
    """
    from peft.tuners.lora.layer import Linear as LoraLinear
    from peft.tuners.tuners_utils import BaseTunerLayer

    if autocast_dtype not in (torch.bfloat16, torch.float16):
        return ["no bf16/fp16 autocast in training"]
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if not layers:
        return ["not a PEFT model with adapter layers"]
    reasons = set()
    for m in layers:
        if type(m) is not LoraLinear:
            reasons.add(f"{type(m).__name__} is not a plain LoRA Linear layer")
            continue
        if m.lora_variant:
            reasons.add(f"a LoRA variant ({', '.join(sorted({type(v).__name__ for v in m.lora_variant.values()}))})")
        if any(not isinstance(d, torch.nn.Identity) for d in m.lora_dropout.values()):
            reasons.add("lora_dropout > 0")
        dtypes = {a.weight.dtype for a in m.lora_A.values()}
        if dtypes - {torch.float32, autocast_dtype}:
            names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
            reasons.add(f"adapter weights in {names}, neither float32 nor the autocast dtype")
    return sorted(reasons)


@contextlib.contextmanager
def lora_input_casting(model: torch.nn.Module, enabled: bool):
    """Set PEFT's `cast_input_dtype_enabled` on every adapter layer for the block, then restore each layer's own value.

    `peft.helpers.disable_input_dtype_casting` sets the same switch, to False only; generation inside a training step
    (no autocast there) needs it back on.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    saved = [m.cast_input_dtype_enabled for m in layers]
    for m in layers:
        m.cast_input_dtype_enabled = enabled
    try:
        yield
    finally:
        for m, value in zip(layers, saved):
            m.cast_input_dtype_enabled = value


def repeated_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers: the children of each outermost ModuleList whose children share one class (accelerate's
    `is_repeated_blocks`, the regions its `compile_regions` compiles)."""
    from accelerate.utils.other import is_repeated_blocks

    lists = [(name, m) for name, m in model.named_modules() if is_repeated_blocks(m)]
    return [layer for name, m in lists if not any(name.startswith(f"{other}.") for other, _ in lists) for layer in m]


@functools.cache
def compiled_forward(layer_class: type, backend: str) -> Callable:
    """One compiled forward per layer class and backend in the process, shared by every layer (parameters are graph
    inputs) and by every trainer built later (the arms of a run, a sweep's cells), so each graph compiles once.

    Per-layer `torch.compile` of the forward, not accelerate's `compile_regions` or the Trainer's dynamo plugin: those
    return a new module tree that `accelerator.unwrap_model` (TRL's way to the generation model) keeps compiled, so
    generation and the no-grad scoring passes would run it too, nested inside transformers' compiled decoding; they
    also compile every other leaf module and wrap the layer's `__call__`, tracing gradient checkpointing itself. A
    compiled forward set on the layer instance only inside `training_step` (`layer_forwards`) leaves generation,
    the state dict and transformers' eager checkpoint wrapper (which recomputes through the same compiled forward) as
    they are. `dynamic=True`: compiled with symbolic shapes at the first step, which every later length reuses; with
    `dynamic=None` the first shape compiled static and the second once more symbolic, a second compilation in the
    second step (measurements: bench/README.md, "One real step, broken down", `training_compile`).

    One graph for every layer: with grad enabled, a layer input that does not require grad (layer 0's, the frozen
    embeddings' output under LoRA without gradient checkpointing, whose hook `make_inputs_require_grads` does the same)
    enters as a view that does, so layer 0 hits the graph of layers 1..n-1 instead of failing dynamo's requires_grad
    guard and compiling its own forward and backward (two compilations of the layer instead of one). The
    LoRA gradients are unchanged; the cost is layer 0's input gradient, which nobody reads: the backward through its
    q, k, v, gate and up projections' frozen weights and its input norm, for Qwen2.5-1.5B 2 x 1536 x 19968 ~ 61 MFLOP
    per token, ~1% of the update's forward + backward (28 layers and the head: ~6.2 GFLOP per token)."""
    compiled = torch.compile(layer_class.forward, backend=backend, dynamic=True)

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        if torch.is_grad_enabled() and not hidden_states.requires_grad:
            hidden_states = hidden_states.detach().requires_grad_()  # a view of the same storage: no copy
        return compiled(self, hidden_states, *args, **kwargs)

    return forward


@contextlib.contextmanager
def layer_forwards(layers: list[torch.nn.Module], compiled: bool):
    """Run `layers` through `compiled_forward` (compiled=True, with `TRAINING_COMPILE_BACKEND`) or their class's own
    forward for the block, then give each layer back the forward it had (nested blocks: generation inside a compiled
    training step runs eagerly)."""
    saved = [layer.__dict__.get("forward") for layer in layers]
    for layer in layers:
        if compiled:
            layer.forward = types.MethodType(compiled_forward(type(layer), TRAINING_COMPILE_BACKEND), layer)
        else:
            layer.__dict__.pop("forward", None)
    try:
        yield
    finally:
        for layer, forward in zip(layers, saved):
            if forward is None:
                layer.__dict__.pop("forward", None)
            else:
                layer.forward = forward
