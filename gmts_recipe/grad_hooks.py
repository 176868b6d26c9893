"""transformers' input-grad hooks (`make_inputs_require_grads`), which gradient checkpointing with an adapter registers
on the input embeddings so that checkpointed layers see an input that requires grad: found by name
(`input_grad_hook_keys`) and kept to one (`drop_duplicate_input_grad_hooks`). GMTSTrainer's scoring pass turns
checkpointing off and on, as TRL does around every generation; the generation speed code lifts them while decoding
(generation/fast.py)."""

from __future__ import annotations

import torch


def input_grad_hook_keys(emb: torch.nn.Module) -> list[int]:
    """The forward-hook ids of transformers' `make_inputs_require_grads` on an embedding, oldest first (by name)."""
    return [k for k, h in emb._forward_hooks.items() if getattr(h, "__name__", "") == "make_inputs_require_grads"]


def drop_duplicate_input_grad_hooks(model: torch.nn.Module) -> None:
    """Keep one `make_inputs_require_grads` hook on the input embeddings. TRL turns gradient checkpointing off and on
    around every generation; transformers' enable registers another hook each time, and for a PEFT-wrapped model its
    disable removes none, so without this the hooks pile up, one more per step, each run by every forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb = model.get_input_embeddings()
    keys = input_grad_hook_keys(emb)
    current = {h.id for h in getattr(base, "_require_grads_hooks", None) or []}
    keep = next((k for k in keys if k in current), keys[-1] if keys else None)  # the one transformers would remove
    for k in keys:
        if k != keep:
            del emb._forward_hooks[k]
