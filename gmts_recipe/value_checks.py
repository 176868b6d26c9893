"""Degenerate settings, refused in one line naming the field before anything loads, wherever a config is built: by
recipe.py from its flags and YAML file (recipe_config.parse), and by `GMTSConfig(...)` in a user's own script.

Why here and generic: every number a config reads reaches a loss, a sampler or a schedule, and a NaN or an infinity
there trains nothing honestly (a NaN learning rate makes every weight NaN; an infinite temperature samples uniform
noise) while the run goes on without a word. So every field declared as a number is checked, not a list of the ones
someone thought of: it must be a number (an int where an int is declared; never a bool or a string), finite, and
not negative unless a negative value means something there (NEGATIVE_MEANS). Every field declared as a bool must be
a bool: `GMTSConfig(bf16="false")` would read as on. A few fields have a range instead of the sign (RANGES: the
counts, probabilities, the adapter's rank); a few keep a check of their own elsewhere (OWN_CHECKS). GMTSConfig runs
these before GRPOConfig's own arithmetic with the values. A field declared as a list of numbers (base_eval_seeds,
reward_weights) holds numbers of that kind, finite (`check_list_values`): YAML's `["0", "1"]` is a list of strings,
which argparse leaves as they are and a comparison with a seed later fails on.

Standard library only: the trainer imports this module (the recipe's own checks are where the recipe uses them:
data.prompt_name_problem, records.load_unique_yaml, recipe_config.trained_arms, field_types.misfits). `field_docs`
writes the fields' help texts into the docstring of the config class that declares them (what `help()` shows).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, Union

# Numeric fields where a negative value has a meaning: left out of the sign check (their own checks still apply)
NEGATIVE_MEANS = {
    "local_rank": "-1: not started by torch.distributed",
    "entropy_coef": "a negative coefficient penalizes entropy instead of rewarding it",
    "entropy_coef_min": "the lower bound of an entropy coefficient that may be negative",
}


def _in_unit_interval(low_open: bool, high_open: bool) -> Callable[[float], bool]:
    return lambda v: (0 < v if low_open else 0 <= v) and (v < 1 if high_open else v <= 1)


# Fields whose range their own check refuses, in its words (config.check_selection_config, check_sampling_and_clipping,
# recipe_config.check_recipe_values): only finite is checked here
OWN_CHECKS = {"selection_ratio", "temperature", "eval_temperature"}
# The counts a run divides by or loops over: at least 1 (recipe_config.POSITIVE_COUNTS and GMTSConfig's own)
COUNTS = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
          "num_iterations", "num_generations", "max_completion_length", "steps_per_generation", "generation_batch_size")
# field -> (the values allowed, what the refusal says they must be), in place of the sign check
RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    **{name: (lambda v: v >= 1, "a positive count") for name in COUNTS},
    "delta": (lambda v: v > 1, "> 1 (the two-sided clip caps the ratio at delta)"),
    "max_steps": (lambda v: v > 0 or v == -1, "a positive count of optimizer steps, or -1 (num_train_epochs "
                                                "decides)"),
    "top_p": (_in_unit_interval(True, False), "in (0, 1] (the share of probability mass sampled from; 1: all)"),
    "min_p": (_in_unit_interval(False, False), "in [0, 1] (a share of the most likely token's probability)"),
    "repetition_penalty": (lambda v: v > 0, "> 0 (it divides logits; 1: no penalty)"),
    "lora_r": (lambda v: v >= 1, "a rank of at least 1"),
    "lora_alpha": (lambda v: v > 0, "> 0 (the adapter's scale is lora_alpha / lora_r: 0 trains nothing)"),
    "lora_dropout": (_in_unit_interval(False, True), "in [0, 1) (a dropout probability; 1 drops every input)"),
    "adam_beta1": (_in_unit_interval(False, True), "in [0, 1) (a decay rate of Adam's moments)"),
    "adam_beta2": (_in_unit_interval(False, True), "in [0, 1) (a decay rate of Adam's moments)"),
    "top_entropy_quantile": (_in_unit_interval(True, False), "in (0, 1] (the share of tokens TRL keeps)"),
    "vllm_gpu_memory_utilization": (_in_unit_interval(True, False), "in (0, 1] (a share of the GPU's memory)"),
}


def _declared(hint: Any) -> tuple[type, ...]:
    """The scalar types a field declares, None left out: (int,) for `int | None`, (int, float) for a float field
    (an int is a float there), () for anything that is not a plain number or bool."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return tuple(dict.fromkeys(t for a in inner for t in _declared(a))) if all(
            a in (bool, int, float) for a in inner) else ()
    return {bool: (bool,), int: (int,), float: (int, float)}.get(hint, ())


@functools.lru_cache(maxsize=None)
def scalar_fields(cls: type) -> dict[str, tuple[type, ...]]:
    """Every init field of a config dataclass declared as a bool or a number: name -> the types it takes."""
    hints = typing.get_type_hints(cls)
    return {f.name: kinds for f in dataclasses.fields(cls) if f.init and (kinds := _declared(hints[f.name]))}


@functools.lru_cache(maxsize=None)
def list_fields(cls: type) -> dict[str, tuple[type, ...]]:
    """Every init field of a config dataclass declared as a list of numbers (`list[int]`, `list[float] | None`): name
    -> the types its items take."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if typing.get_origin(hint) in (Union, types.UnionType):
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = inner[0] if len(inner) == 1 else None
        if f.init and typing.get_origin(hint) is list and typing.get_args(hint):
            kinds = _declared(typing.get_args(hint)[0])
            if kinds and kinds != (bool,):
                out[f.name] = kinds
    return out


def numpy_bool() -> type:
    """numpy's bool scalar where numpy is loaded (it is no Python bool, nor an Integral), else bool."""
    numpy = sys.modules.get("numpy")
    return numpy.bool_ if numpy is not None else bool


def value_problem(name: str, value: Any, kinds: tuple[type, ...]) -> str | None:
    """What is wrong with `value` for field `name` declared as `kinds` (None: nothing), in words."""
    if value is None:
        return None  # a field that takes None checks its own default; argparse gives None only where declared
    if kinds == (bool,):
        return None if isinstance(value, (bool, numpy_bool())) else "must be true or false"
    number = numbers.Integral if kinds == (int,) else numbers.Real  # numpy's scalars too (np.int64(3) is a seed)
    if isinstance(value, (bool, numpy_bool())) or not isinstance(value, number):
        return "must be an integer" if kinds == (int,) else "must be a number"
    if not math.isfinite(value):
        return "must be a finite number"
    if name in OWN_CHECKS:
        return None
    if name in RANGES:
        return None if RANGES[name][0](value) else f"must be {RANGES[name][1]}"
    if value < 0 and name not in NEGATIVE_MEANS:
        return "must be >= 0"
    return None


def check_values(config: Any) -> None:
    """Refuse the first bool or numeric field of a config dataclass (GMTSConfig, the recipe's fields, TRL's
    ModelConfig) whose value is degenerate (module docstring), then the first list of numbers that is not one
    (check_list_values): ValueError "field=value: must be ...". """
    for name, kinds in scalar_fields(type(config)).items():
        value = getattr(config, name)
        problem = value_problem(name, value, kinds)
        if problem is not None:
            raise ValueError(f"{name}={value!r}: {problem}")
    check_list_values(config)


def items_problem(value: Any, kinds: tuple[type, ...]) -> str | None:
    """What is wrong with `value` for a field declared as a list of `kinds` (None: nothing), in words: it is a list
    (or tuple), and each item is a finite number of that kind (an item in quotes is text: argparse converts only a
    command line's strings, never a config file's list items)."""
    if value is None:
        return None
    what = "a list of integers" if kinds == (int,) else "a list of numbers"
    if not isinstance(value, (list, tuple)):
        return f"must be {what}"
    number = numbers.Integral if kinds == (int,) else numbers.Real
    for item in value:  # the kind and finiteness only: what a value means (a seed >= 0) is its field's own check
        if isinstance(item, str):
            return f"must be {what} ({item!r} is text: write it without quotes)"
        if isinstance(item, (bool, numpy_bool())) or not isinstance(item, number):
            return f"must be {what}"
        if not math.isfinite(item):
            return f"must be {what} (finite)"
    return None


def check_list_values(config: Any) -> None:
    """Refuse the first field of a config dataclass declared as a list of numbers whose value is not one (a string
    item, a bare number, nan): ValueError "field=value: must be a list of integers"."""
    for name, kinds in list_fields(type(config)).items():
        value = getattr(config, name)
        problem = items_problem(value, kinds)
        if problem is not None:
            raise ValueError(f"{name}={value!r}: {problem}")


def field_docs(cls: type, fields: list[dataclasses.Field] | None = None) -> str:
    """One paragraph per field, "name (default): help", from the fields' metadata: what `help()` shows of a config
    class whose docstring is built with it (its help texts, kept in one place)."""
    fields = dataclasses.fields(cls) if fields is None else fields
    return "\n".join(f"    {f.name} ({f.default!r}): {f.metadata.get('help', '')}" for f in fields)
