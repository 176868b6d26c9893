"""A config file's values against the types its fields declare.

TRL's parser hands a YAML file's values to argparse as defaults, and argparse converts only the defaults that are
strings: `max_steps: 2.5` stays a float, `max_steps: true` becomes one step, `beta: null` reaches the loss as None.
A command-line value is always a string, so argparse checks it; the file's values are checked here, before any
config class is built, and the first that does not fit its field is one line naming the field and what it needs.

A value fits when argparse would turn it into the field's type, or when it already is one: a string is accepted
wherever argparse converts strings (an int, a float, true/false), so YAML's `1e-4` (a string to PyYAML) passes; but not
a number YAML reads as one unquoted (`seed: "17"`: a quoted number, `quoted_number`), which says it was meant as text.
A list field of strings also takes a bare string, as TRL passes one through (`lora_target_modules: all-linear`); a list
field's items are never converted (argparse converts a default that is a string, not the items of a list), so a list
of numbers takes numbers only: `base_eval_seeds: ["0", "1"]` and `base_eval_seeds: "0"` are refused. A type this
check does not know passes; the config classes check it when they are built.

The recipe's check (recipe_config.parse): the trainer never imports this module (a user's script passes Python values).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Literal, Union

import yaml

_BOOL_STRINGS = {"yes", "true", "t", "y", "1", "no", "false", "f", "n", "0"}  # transformers' string_to_bool


def _is_number_string(value: Any, kind: type) -> bool:
    try:
        kind(value)
    except (TypeError, ValueError):
        return False
    return not quoted_number(value)


def quoted_number(value: Any) -> bool:
    """A YAML string that YAML reads as a number without its quotes ('17', '0.5'; not '1e-4', a string to PyYAML)."""
    return isinstance(value, str) and type(yaml.safe_load(value)) in (int, float)


def fits(value: Any, hint: Any) -> bool:
    """Whether argparse would turn `value` (from YAML) into `hint`, or it already is one."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is type(None) or hint is None:
        return value is None
    if origin is Literal:
        return value in args or str(value) in {str(a) for a in args}
    if hint is bool:
        return isinstance(value, bool) or (isinstance(value, str) and value.lower() in _BOOL_STRINGS)
    if hint is int:
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _is_number_string(value, int))
    if hint is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) or (
            isinstance(value, str) and _is_number_string(value, float))
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, str) and value in {e.value for e in hint}
    if origin in (list, tuple) or hint in (list, tuple):
        if isinstance(value, str):  # argparse converts a string default as one item: "7" becomes 7, not [7]
            return not args or args[0] not in (int, float)
        return isinstance(value, list) and (not args or all(_item_fits(v, args[0]) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # a type this check does not know


def _item_fits(value: Any, hint: Any) -> bool:
    """Whether a list item from YAML is of type `hint` as it stands: argparse converts a string default, never the items
    of a list one, so base_eval_seeds: ["0", "1"] would reach the run as strings."""
    if hint in (int, float) and isinstance(value, str):
        return False
    return fits(value, hint)


def describe(hint: Any) -> str:
    """What a field of type `hint` takes, in words: "an integer", "a number or null"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if str in args:  # any string passes: the names an enum or literal also takes are no limit
            args = tuple(a for a in args if typing.get_origin(a) is not Literal
                         and not (isinstance(a, type) and issubclass(a, enum.Enum)))
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if hint is type(None) or hint is None:
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(e.value) for e in hint)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}
    if hint in words:
        return words[hint]
    if origin in (list, tuple) or hint in (list, tuple):
        plural = {str: "strings", int: "integers", float: "numbers", bool: "true or false values"}
        return "a list" + (f" of {plural[args[0]]}" if args and args[0] in plural else "")
    if origin is dict:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def misfits(config: dict, classes: tuple[type, ...]) -> list[tuple[str, Any, str]]:
    """(field, value, what it takes) for each value of `config` that does not fit its field's declared type.
    A field whose default is None also takes null. Keys that name no field are left to the unknown-key check."""
    out = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init or f.name not in config:
                continue
            hint = hints[f.name]
            if f.default is None:
                hint = typing.Optional[hint]  # noqa: UP007 - hint may be a typing form that `|` does not take
            value = config[f.name]
            if not fits(value, hint):
                unquoted = quoted_number(value) and fits(yaml.safe_load(value), hint)  # seed: "17" for seed: 17
                out.append((f.name, value, describe(hint) + (" (unquoted)" if unquoted else "")))
    return out

