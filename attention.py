"""Grouped-query attention for decoding, without copying the KV cache once per query head (issue 11).

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

Used only inside `grouped_query_attention(model)`, around generation (`generation_grouped_attention`).
"""

from __future__ import annotations

import contextlib

import torch

NAME = "sdpa_grouped"  # contains "sdpa": transformers applies its sdpa dispatch checks to it


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
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
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling)  # (B, KV, G, D)
    return out.reshape(batch, 1, heads, dim), None  # (B, Q=1, H, D)


def register() -> None:
    """Make NAME a valid `attn_implementation` (its attention function and, as for `sdpa`, its mask builder)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


@contextlib.contextmanager
def grouped_query_attention(model):
    """While active, a model that uses `sdpa` with grouped key/value heads decodes through `grouped_sdpa_forward`;
    anything else (eager attention, no GQA) is left as it is. Restored on exit, also after an error."""
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(owner, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", heads)
    if config is None or config._attn_implementation != "sdpa" or kv_heads in (None, heads):
        yield
        return
    register()
    owner.set_attn_implementation(NAME)
    try:
        yield
    finally:
        owner.set_attn_implementation("sdpa")
