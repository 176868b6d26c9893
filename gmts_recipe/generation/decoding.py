"""Decoding without a host stall at every token: transformers' deferred stop check, on CUDA.

transformers' sampling loop asks after every token whether all rows have finished (`unfinished_sequences.max() == 0`
read on the host). The host waits for the GPU to finish the step, and only then prepares and queues the next one, so
the GPU idles while Python runs (measurements: bench/README.md, "One real step, broken down", "Why the deferred stop
check"). transformers ships the remedy, `DeferredStopCheck`: the flag is copied to pinned
memory asynchronously and read one step late, so the host queues step t+1 while the GPU runs step t; when every row
had already stopped, the one step too many is cut from the output (`_undo_generation_steps`). It enables it on Apple's
mps only ("we should enable it for cuda if we observe perf gains"); `deferred_stop_check()` enables it on CUDA for the
`generate` calls inside the block.

What it changes: nothing in the tokens a call returns. When every row stops on EOS before the token limit, one more
decode step runs and is discarded; its sampling draw advances the CUDA random stream, so the *next* call samples from
another point of the stream (the same distribution, other numbers). A call that runs to the token limit stops on time
with no extra step (at 64 rows one row almost always does). Not on CPU (torch has no CPU events): there it is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformers.generation.utils import DeferredStopCheck

from gmts_recipe.generation.attention import grouped_query_attention

DEVICES = ("cuda",)  # where the block turns the deferred check on (transformers: mps already)


def _defer_on(device, cache, cache_is_returned: bool, is_assistant: bool) -> bool:
    """transformers' own conditions, with CUDA admitted: never for an assistant model, and a cache handed back to the
    caller must be croppable so that the extra step can be undone in it."""
    if device.type not in DEVICES or is_assistant:
        return False
    return cache is None or cache.is_croppable or not cache_is_returned


@contextlib.contextmanager
def deferred_stop_check() -> Iterator[None]:
    """Within the block, `generate` on CUDA reads the stop flag one step late instead of waiting for it every step."""
    original = DeferredStopCheck.__dict__["is_supported"]  # the staticmethod itself, restored as it was

    def is_supported(device, cache, cache_is_returned, is_assistant):
        return _defer_on(device, cache, cache_is_returned, is_assistant) or original.__func__(
            device, cache, cache_is_returned, is_assistant)

    DeferredStopCheck.is_supported = staticmethod(is_supported)
    try:
        yield
    finally:
        DeferredStopCheck.is_supported = original


@contextlib.contextmanager
def decoding_options(model, grouped_attention: bool, deferred_stop: bool, kernel: str = "sdpa") -> Iterator[None]:
    """The decoding options training generation and evaluation share, entered the same way for both:
    `attention.grouped_query_attention` (with its kernel for the folded call) and `deferred_stop_check`."""
    with contextlib.ExitStack() as stack:
        if grouped_attention:
            stack.enter_context(grouped_query_attention(model, kernel))
        if deferred_stop:
            stack.enter_context(deferred_stop_check())
        yield
