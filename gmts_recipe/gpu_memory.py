"""GPU memory between a run's phases: the peak each phase allocates, the vLLM engine an arm leaves behind, and a cap on
what torch may allocate (`gpu_memory_cap_gib`), so a config can be checked against a smaller card than the one at hand.

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
import math
from collections.abc import Iterator

GIB = 2**30


def check_cap(cap_gib: float) -> None:
    """Refuse a cap that no card could honour (ValueError, one line): zero, negative, not a number or infinite."""
    if isinstance(cap_gib, bool) or not isinstance(cap_gib, (int, float)) or not math.isfinite(cap_gib) \
            or cap_gib <= 0:
        raise ValueError(f"gpu_memory_cap_gib={cap_gib!r}: must be a positive number of GiB (e.g. 44 to check a "
                         f"48 GB card), or unset for the whole card")


def memory_fraction(cap_gib: float, total_bytes: int, card: str = "this GPU") -> float:
    """The share of the card that `cap_gib` is, for torch.cuda.set_per_process_memory_fraction; a cap above the card's
    memory is refused (it would cap nothing, and the check the user asked for would not happen)."""
    check_cap(cap_gib)
    total = total_bytes / GIB
    if cap_gib > total:
        raise ValueError(f"gpu_memory_cap_gib={cap_gib:g} is more than {card} has ({total:.1f} GiB): set at most "
                         f"{total:.1f}, or unset it")
    return cap_gib * GIB / total_bytes


def cap_memory(cap_gib: float | None) -> str | None:
    """Cap what torch's allocator may take on this process's current CUDA device at `cap_gib` GiB; beyond it an
    allocation fails with CUDA's out-of-memory error, as on a card of that size (CUDA's own context, about 0.5 GiB, is
    outside the cap: leave it room). Returns the line to print, or None where nothing was capped: no cap asked, or no
    CUDA device (on a CPU the option is a no-op; its value is still checked, check_cap)."""
    if cap_gib is None:
        return None
    check_cap(cap_gib)
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    fraction = memory_fraction(cap_gib, props.total_memory, props.name)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    return (f"[gpu memory] torch may allocate at most {cap_gib:g} GiB of {props.name}'s "
            f"{props.total_memory / GIB:.1f} GiB (gpu_memory_cap_gib)")


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
