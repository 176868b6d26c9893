"""Grouped-query attention for decoding, without copying the KV cache once per query head.

Qwen2.5-1.5B has 12 query heads and 2 key/value heads. transformers' `sdpa` attention hands PyTorch's
`scaled_dot_product_attention` its GQA flag only when there is no attention mask; a left-padded batch always has one,
so every decoding step first expands each layer's whole key and value cache 6x (`repeat_kv`: a new tensor of
rows x 12 x cache length x 128 per layer, written and read again). With a static cache that is the full cache
length at every step: at 880 evaluation rows and a 512-token cache about 2.8 GB per layer and step, 28 layers.

The same attention without the copy: a decoding step has one query position, so the 6 query heads that share a
key/value head can stand in for 6 query positions of that head. `grouped_sdpa_forward` reshapes the query
(B, 12, 1, D) -> (B, 2, 6, D), broadcasts the (B, 1, 1, L) mask to (B, 1, 6, L) without a copy, and calls the same
`scaled_dot_product_attention` once; the result (B, 2, 6, D) is the (B, 1, 12, D) that `sdpa` returns, in the same
head order (query head h reads key/value head h // 6, as `repeat_kv` lays them out). It is the same computation, up
to floating-point summation order. Every other call (prefill and training forwards with several query positions, no
mask, no groups) goes to transformers' own `sdpa` function unchanged.

Two kernels for the folded call. `sdpa` (the default, `NAME`): PyTorch's fused kernel, which on a GPU picks its
memory-efficient kernel (made for long queries: with 6 query rows per block it reads the cache at a fraction of the
bandwidth). `matmul` (`NAME_MATMUL`): transformers' own eager formulation (scores = q k^T x scaling in the model's
dtype, softmax in float32, cast back, times v) on the folded shapes, two batched matrix products that read the cache
at full bandwidth; the same attention with eager's rounding. configs/paper.yaml uses it. Measurements of both
kernels: bench/README.md, section "What selection costs", "Grouped-query decoding" (the script that measured them:
`git show be9f7b1:bench/decode_options.py`, --option decode_kernel).

Used only inside `grouped_query_attention(model)`, around generation (`generation_grouped_attention`).
"""

from __future__ import annotations

import contextlib

import torch

NAME = "sdpa_grouped"  # contains "sdpa": transformers applies its sdpa dispatch checks to it
NAME_MATMUL = "sdpa_grouped_matmul"  # the same folding, eager's two matrix products for the folded call
KERNELS = {"sdpa": NAME, "matmul": NAME_MATMUL}


def _matmul_attention(q: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                      scaling: float | None) -> torch.Tensor:
    """transformers' eager attention on the folded shapes: q (B, KV, G, D), key/value (B, KV, L, D), mask (B, 1, G, L)
    boolean (True: attend) or additive; returns (B, KV, G, D)."""
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(q, key.transpose(-1, -2)) * scale  # (B, KV, G, L)
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(probs, value)


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, _matmul: bool = False, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, H, Q, D), key/value (B, KV, L, D); returns (B, Q, H, D)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    batch, heads, q_len, dim = query.shape
    if (groups == 1 or q_len != 1 or attention_mask is None or attention_mask.dim() != 4
            or attention_mask.shape[1] != 1 or kwargs.get("position_bias") is not None
            or kwargs.get("output_attentions", False)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    kv_heads = key.shape[1]
    q = query.reshape(batch, kv_heads, groups, dim)  # (B, KV, G, D): the G query heads of a group as G positions
    mask = attention_mask.expand(batch, 1, groups, attention_mask.shape[-1])  # (B, 1, G, L), a view
    if _matmul and dropout == 0.0:
        out = _matmul_attention(q, key, value, mask, scaling)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout,
                                                               scale=scaling)  # (B, KV, G, D)
    return out.reshape(batch, 1, heads, dim), None  # (B, Q=1, H, D)


def grouped_matmul_forward(*args, **kwargs) -> tuple[torch.Tensor, None]:
    """`grouped_sdpa_forward` with the folded call as two matrix products (the `matmul` kernel)."""
    return grouped_sdpa_forward(*args, _matmul=True, **kwargs)


def register() -> None:
    """Make NAME and NAME_MATMUL valid `attn_implementation`s (attention functions and, as for `sdpa`, the mask
    builder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    for name, forward in ((NAME, grouped_sdpa_forward), (NAME_MATMUL, grouped_matmul_forward)):
        AttentionInterface.register(name, forward)
        AttentionMaskInterface.register(name, sdpa_mask)


@contextlib.contextmanager
def grouped_query_attention(model, kernel: str = "sdpa"):
    """While active, a model that uses `sdpa` with grouped key/value heads decodes through `grouped_sdpa_forward`
    (kernel "sdpa") or its two-matmul variant (kernel "matmul"); anything else (eager attention, no GQA) is left as
    it is. Restored on exit, also after an error."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown decoding attention kernel {kernel!r}: use one of {', '.join(KERNELS)}")
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(owner, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", heads)
    if config is None or config._attn_implementation != "sdpa" or kv_heads in (None, heads):
        yield
        return
    register()
    owner.set_attn_implementation(KERNELS[kernel])
    try:
        yield
    finally:
        owner.set_attn_implementation("sdpa")
