"""A config file's values against their fields' declared types (gmts_recipe/field_types.py): hand-written cases with
exact answers, and the property the check rests on, against TRL's own parser: a value that fits reaches the config
object as the field's type; one that does not is refused by the parser or reaches it as something else."""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gmts_recipe.field_types import describe, fits, misfits, quoted_number


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize("value,hint,expected", [
    (40, int, True), ("40", int, False), (2.5, int, False), ("0.5", float, False), (40.0, int, False), (True, int, False),
    ("ten", int, False), (None, int, False), ([1], int, False),
    (1e-4, float, True), ("1e-4", float, True), (1, float, True), (False, float, False), ("fast", float, False),
    (True, bool, True), ("yes", bool, True), ("False", bool, True), (1, bool, False), ("maybe", bool, False),
    ("batch", str, True), (3, str, False), (None, str, False),
    (None, int | None, True), (None, typing.Optional[float], True), (3, str | None, False),
    ("batch", Literal["batch", "group"], True), ("global", Literal["batch", "group"], False),
    ("red", Colour, True), ("green", Colour, False), ("green", Colour | str, True), (3, Colour | str, False),
    (["q_proj", "v_proj"], list[str], True), ("all-linear", list[str], True), ([1, 2], list[str], False),
    ({"use_reentrant": False}, dict | str | None, True), (3, dict | str | None, False),
    (object(), typing.Any, True),
])
def test_fits(value, hint, expected):
    assert fits(value, hint) is expected


@pytest.mark.parametrize("hint,words", [
    (int, "an integer"), (float | None, "a number or null"), (bool, "true or false"),
    (list[str], "a list of strings"), (list[dict], "a list"),
    (Literal["batch", "group"], "one of batch, group"), (Colour, "one of red, blue"), (Colour | str, "a string"),
])
def test_describe(hint, words):
    assert describe(hint) == words


@dataclass
class Fields:
    steps: int = 40
    rate: float = 1e-4
    flag: bool = False
    name: str = "gmts"
    limit: int | None = None
    scale: float = None  # a None default without Optional: null is taken, as argparse leaves it


def test_misfits_names_each_field_and_what_it_takes():
    config = {"steps": 2.5, "rate": "1e-4", "flag": 3, "name": "ets", "limit": None, "scale": None, "other": "x"}
    assert misfits(config, (Fields,)) == [("steps", 2.5, "an integer"), ("flag", 3, "true or false")]
    assert misfits({}, (Fields,)) == []


@dataclass
class Parsed:
    steps: int = field(default=40)
    rate: float = field(default=0.5)
    flag: bool = field(default=False)
    name: str = field(default="gmts")
    limit: int | None = field(default=None)


SCALARS = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False), st.booleans(), st.none(),
                    st.sampled_from(["7", "2.5", "1e-4", "yes", "no", "true", "x", "", "nan"]))
CHECKED = {"steps": int, "rate": float, "flag": bool, "name": str, "limit": int}


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(CHECKED)), value=SCALARS)
@example(name="flag", value="x").via("argparse refuses it")
@example(name="steps", value=2.5).via("stays a float")
@example(name="steps", value=True).via("one step")
@example(name="rate", value="1e-4").via("a string to PyYAML")
@example(name="limit", value=None).via("a None default")
def test_a_value_that_fits_reaches_the_config_as_its_type(tmp_path_factory, name, value):
    from trl import TrlParser

    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_text(yaml.safe_dump({name: value}))
    try:
        (parsed,) = TrlParser((Parsed,)).parse_args_and_config(["--config", str(path)])
        got = getattr(parsed, name)
    except SystemExit:  # argparse refused it
        got = SystemExit
    kind = CHECKED[name]
    if got is SystemExit:
        reached_as_type = False
    elif kind is float:  # an integer serves as a number
        reached_as_type = isinstance(got, (int, float)) and not isinstance(got, bool)
    else:
        reached_as_type = (isinstance(got, kind) and not (kind is int and isinstance(got, bool))
                           or (name == "limit" and got is None))
    quoted = kind in (int, float) and quoted_number(value)  # argparse converts it, but YAML had it quoted: refused
    assert (misfits({name: value}, (Parsed,)) == []) is (reached_as_type and not quoted), (name, value, got)
