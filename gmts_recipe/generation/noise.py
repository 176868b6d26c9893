"""The "counter" noise of the trainer's generations (sampling_noise "counter"): which keys each generation draws with.

A generation is one of TRL's generate calls: the training rollouts of a step (several when a step accumulates more
than one generation batch) or one batch of an evaluation during training. Each must have noise of its own, and arms of
one seed must draw the same noise at the same generation (they are then coupled). The compiled step takes one key per
row (decode_loop.counter_noise hashes it with the column and the token); transformers' generate takes the
generator's seed.

Version 2 (`counter_noise_version`) derives every generation's stream from a 64-bit hash of the whole
tuple (seed, training or evaluation, step, generation), `noise_stream`: two generations share a stream only if their
64-bit hashes collide. A row's key mixes both halves of the stream with the row's place in the generation's global
batch, so two streams give one row the same key only by a 32-bit coincidence for that row, never for a whole batch.

Version 3 (the default for new runs) widens each row's key to 64 bits: its low half is version 2's key, its high half
a second hash of the stream's halves and the row's place (`_high_half`), both in one int64 (decode_loop.counter_noise
reads both halves). Why: a 32-bit key per row gives two of n rows the same key, hence the same noise at every column,
with n^2 / 2^33 expected pairs: about 10 among the ~300,000 rows a 100-seed test draws. With 64 bits, none is
expected below ~10^9 rows (tests/test_counter_noise.py counts them over a whole sequential test's rows).

Version 1 built the stream by arithmetic: train_stream(step) for training (decode_loop), EVAL_DURING_TRAINING_STREAM +
step for an evaluation during training, XOR the generation's index shifted by GENERATION_SHIFT bits. It wraps: the
evaluation's generation 192 at step 1 has training step 1's generation 0 stream. It is kept so that the runs recorded
with it repeat.
"""

from __future__ import annotations

import hashlib

import torch

from gmts_recipe.generation.decode_loop import hash32, noise_keys, train_stream
from gmts_recipe.speed_options import NOISE_KEY_VERSIONS

MASK32 = 0xFFFFFFFF
# Version 1's streams besides each step's first training one: an evaluation's at step s is EVAL_DURING_TRAINING_STREAM
# + s (between decode_loop.EVAL_STREAM and train_stream(0)); generation g of a step and mode is its stream with g in
# the bits from GENERATION_SHIFT up.
EVAL_DURING_TRAINING_STREAM = 1 << 30
GENERATION_SHIFT = 24
VERSIONS = NOISE_KEY_VERSIONS  # the last is the default (speed_options.SpeedOptions.counter_noise_version)
_HIGH_HALF = 0x9E3779B9  # version 3's constant for a key's upper half (2^32 / golden ratio: any odd constant would do)
_PERSON = b"gmts-noise-v2"  # blake2b's personalization: these hashes are this scheme's only


def _hash64(*parts: object) -> int:
    """A 64-bit hash of a tuple of integers and strings (blake2b of its repr: two tuples differ, their texts differ)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8, person=_PERSON).digest(), "little")


def noise_stream(seed: int, step: int, generation: int = 0, train: bool = True) -> int:
    """Version 2's 64-bit stream of one generation: a hash of (seed, training or evaluation, step, generation)."""
    return _hash64(int(seed), "train" if train else "eval", int(step), int(generation))


def rollout_noise_keys(seed: int, step: int, rows: int, process_index: int = 0, generation: int = 0,
                       train: bool = True, version: int = NOISE_KEY_VERSIONS[-1]) -> torch.Tensor:
    """The "counter" noise keys (rows,) of one process's rollouts at training step `step`: rollout r of process p is
    row p * rows + r of the generation's global batch, so the keys are a function of (seed, step, generation, mode,
    its place) only. `generation` counts the generations of one step in one mode (TRL generates more than once per
    optimizer step when steps_per_generation x num_iterations < gradient_accumulation_steps; an evaluation during
    training generates once per batch) and `train` tells training's rollouts from an evaluation's at the same step."""
    place = process_index * rows + torch.arange(rows)
    if version == 1:
        stream = train_stream(step) if train else EVAL_DURING_TRAINING_STREAM + step
        return noise_keys(seed, stream ^ (generation << GENERATION_SHIFT), place)
    if version not in VERSIONS:
        raise ValueError(f"counter_noise_version={version!r} is not one of {', '.join(map(str, VERSIONS))}")
    stream = noise_stream(seed, step, generation, train)
    low, high = stream & MASK32, stream >> 32
    key = hash32(hash32(torch.tensor(low, dtype=torch.long) ^ (place.long() & MASK32)) ^ high)  # version 2's
    if version == 2:
        return key
    return key | (_high_half(low, high, place) << 32)  # the int64's bits; decode_loop.counter_noise reads both halves


def _high_half(low: int, high: int, place: torch.Tensor) -> torch.Tensor:
    """Version 3's upper 32 bits of a row's key: the stream's halves in the other order, the row's place and a
    constant of its own, so the two halves are two different hashes of (stream, place)."""
    return hash32(hash32(torch.tensor(high, dtype=torch.long) ^ (place.long() & MASK32)) ^ (low ^ _HIGH_HALF))


def generator_seed(seed: int, step: int, process_index: int = 0, generation: int = 0, train: bool = True,
                   version: int = NOISE_KEY_VERSIONS[-1]) -> int:
    """The seed of torch's generator for one process's generate call ("counter" noise without the compiled step):
    versions 2 and 3, a 64-bit hash of the generation's tuple and the process (already 64 bits: version 3 widens
    the compiled step's row keys only); version 1, the key of row `process_index`."""
    if version not in VERSIONS:
        raise ValueError(f"counter_noise_version={version!r} is not one of {', '.join(map(str, VERSIONS))}")
    if version == 1:
        return int(rollout_noise_keys(seed, step, 1, process_index, generation, train, version=1))
    return _hash64(int(seed), "train" if train else "eval", int(step), int(generation), "process", int(process_index))
