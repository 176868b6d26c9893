"""GPU memory between a run's phases: the peak each phase allocates, and the vLLM engine an arm leaves behind.

recipe.py trains its arms one after another in one process. Two things follow from that, both here:
- a phase's peak (base evaluation, an arm's training, its evaluation) is only its own if the peak counter is reset
  when the phase starts (`peak_memory`), so results.json can say which phase a card must be sized for;
- with `use_vllm: true` and `vllm_mode: colocate`, TRL's `GRPOTrainer` keeps an engine (`trainer.vllm_generation`,
  its `vllm.LLM` in `.llm`) holding weights and a KV cache on the training GPU. Whatever still references the
  finished trainer keeps that engine, and the next arm's engine then finds the card full (`release_vllm_engine`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

GIB = 2**30


@contextlib.contextmanager
def peak_memory(into: dict, key: str, device: str) -> Iterator[None]:
    """Record in `into[key]` the most GPU memory torch allocated during the block, in GiB (this process's current
    CUDA device: under a data-parallel launcher, each process measures its own card). Nothing is recorded on a CPU
    run, so a results file holds the key only where a GPU measured it."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # the counter holds the process's peak so far: this phase's starts here
    yield
    torch.cuda.synchronize()
    into[key] = round(torch.cuda.max_memory_allocated() / GIB, 3)


def release_vllm_engine(trainer) -> bool:
    """Shut down and drop the vLLM engine TRL keeps on `trainer` (colocate mode: `trainer.vllm_generation.llm`), then
    free the CUDA cache, so the next trainer's engine finds the memory free even if something still holds this
    trainer. Server mode keeps no engine in this process (only a client): nothing to free. Returns whether an engine
    was dropped."""
    generation = getattr(trainer, "vllm_generation", None)
    engine = getattr(generation, "llm", None)
    if engine is None:
        return False
    # vLLM's engine core owns the model executor (weights, KV cache); its shutdown releases them where the version
    # has one. Dropping the last references lets Python free the rest.
    core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        shutdown()
    generation.llm = None
    trainer.vllm_generation = None
    del engine, core, shutdown, generation
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return True
