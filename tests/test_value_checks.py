"""Degenerate settings are refused before the model loads, in one line naming the field, from recipe.py's flags, its
YAML file and `GMTSConfig(...)` in a user's script alike: every numeric field of the configs walked with nan, inf
and a negative value; the ranges; an arm named twice; a YAML key given twice; a string where a bool belongs."""

import math
import re

import pytest
import yaml
from trl import ModelConfig

import recipe
from gmts_recipe.recipe_config import RecipeArgs
from gmts_recipe.value_checks import NEGATIVE_MEANS, RANGES, check_values, load_unique_yaml, scalar_fields
from gmts_trainer import GMTSConfig
from tiny import write_tiny_config

NAN, INF = math.nan, math.inf


def numeric_fields(cls: type) -> list[str]:
    return [name for name, kinds in scalar_fields(cls).items() if kinds != (bool,)]


GMTS_NUMERIC = numeric_fields(GMTSConfig)
RECIPE_NUMERIC = numeric_fields(RecipeArgs) + numeric_fields(ModelConfig)


def negative(name: str, cls: type) -> int | float:
    return -1 if scalar_fields(cls)[name] == (int,) else -0.5


def negative_allowed(name: str, value: float) -> bool:
    """Where a negative value means something (NEGATIVE_MEANS) or lies in the field's own range (max_steps -1)."""
    return name in NEGATIVE_MEANS or (name in RANGES and RANGES[name][0](value))


def names_the_field(message: str, name: str) -> bool:
    return "\n" not in message and re.search(rf"(?<!\w){re.escape(name)}\b", message) is not None


def test_the_walk_covers_the_fields_named_and_the_exceptions_are_these():
    """The walk below is over every numeric field the config classes declare (not a hand-made list): the fields the
    refusals were asked for are among them, and only these four take a negative value."""
    asked = {"epsilon", "epsilon_high", "delta", "beta", "learning_rate", "temperature", "top_p", "top_k", "min_p",
             "repetition_penalty", "max_grad_norm", "seed", "selection_ratio"}
    assert asked <= set(GMTS_NUMERIC) and len(GMTS_NUMERIC) >= 70
    assert {"eval_temperature", "gmts_learning_rate", "ets_learning_rate", "lora_r", "lora_dropout"} <= set(
        RECIPE_NUMERIC)
    assert set(NEGATIVE_MEANS) == {"local_rank", "entropy_coef", "entropy_coef_min"}


def _gmts_config(tmp_path, **overrides) -> GMTSConfig:
    kw = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1, report_to=[],
              use_cpu=True)
    return GMTSConfig(**{**kw, **overrides})


@pytest.mark.parametrize("name", GMTS_NUMERIC)
def test_every_numeric_field_of_gmtsconfig_refuses_nan_inf_and_a_meaningless_negative(tmp_path, name):
    """A user's script: GMTSConfig(field=nan) is one ValueError naming the field, before GRPOConfig computes with it."""
    for value in (NAN, INF, -INF):
        with pytest.raises(ValueError) as refused:
            _gmts_config(tmp_path, **{name: value})
        assert names_the_field(str(refused.value), name), str(refused.value)
    value = negative(name, GMTSConfig)
    if negative_allowed(name, value):
        _gmts_config(tmp_path, **{name: value})
    else:
        with pytest.raises(ValueError) as refused:
            _gmts_config(tmp_path, **{name: value})
        assert names_the_field(str(refused.value), name), str(refused.value)


@pytest.mark.parametrize("overrides, message", [
    ({"beta": -0.1}, "beta=-0.1: must be >= 0"),
    ({"top_p": 0.0}, "top_p=0.0: must be in (0, 1]"),
    ({"top_p": 1.01}, "top_p=1.01: must be in (0, 1]"),
    ({"min_p": 1.5}, "min_p=1.5: must be in [0, 1]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty=0.0: must be > 0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm=-1.0: must be >= 0"),
    ({"seed": -3}, "seed=-3: must be >= 0"),
    ({"data_seed": -3}, "data_seed=-3: must be >= 0"),
    ({"top_k": -1}, "top_k=-1: must be >= 0"),
    ({"adam_beta2": 1.0}, "adam_beta2=1.0: must be in [0, 1)"),
    ({"max_steps": -5}, "max_steps=-5: must be a positive count of optimizer steps, or -1"),
    ({"bf16": "false"}, "bf16='false': must be true or false"),  # a string would read as on
    ({"use_cpu": 1}, "use_cpu=1: must be true or false"),
    ({"epsilon": "0.2"}, "epsilon='0.2': must be a number"),
    ({"seed": 4.0}, "seed=4.0: must be an integer"),
    ({"learning_rate": True}, "learning_rate=True: must be a number"),
])
def test_out_of_range_values_and_wrong_types_in_a_users_gmtsconfig(tmp_path, overrides, message):
    with pytest.raises(ValueError) as refused:
        _gmts_config(tmp_path, **overrides)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("overrides", [
    {"beta": 0.0}, {"top_p": 1.0}, {"top_p": 1e-3}, {"min_p": 0.0}, {"min_p": 1.0}, {"repetition_penalty": 1e-3},
    {"max_grad_norm": 0.0}, {"seed": 0}, {"top_k": 0}, {"max_steps": -1, "num_train_epochs": 1},
    {"entropy_coef": -0.01}, {"learning_rate": 0}, {"delta": 1.5},
])
def test_the_edges_that_stay_valid_are_accepted(tmp_path, overrides):
    _gmts_config(tmp_path, **overrides)


def test_numpy_scalars_are_numbers(tmp_path):
    """A script that computes its settings with numpy passes numpy's scalars: numbers, not strings or bools."""
    import numpy as np

    config = _gmts_config(tmp_path, seed=np.int64(3), learning_rate=np.float64(1e-4), bf16=np.bool_(False))
    assert config.seed == 3
    with pytest.raises(ValueError, match=r"^learning_rate=.*: must be a finite number"):
        _gmts_config(tmp_path, learning_rate=np.float32("nan"))
    with pytest.raises(ValueError, match=r"^seed=.*: must be an integer"):
        _gmts_config(tmp_path, seed=np.bool_(True))


@pytest.mark.parametrize("name, value, message", [
    ("lora_r", 0, "lora_r=0: must be a rank of at least 1"),
    ("lora_dropout", 1.0, "lora_dropout=1.0: must be in [0, 1)"),
    ("lora_dropout", -0.1, "lora_dropout=-0.1: must be in [0, 1)"),
    ("lora_alpha", 0, "lora_alpha=0: must be > 0"),
])
def test_the_adapters_ranges(name, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_values(ModelConfig(**{name: value}))
    check_values(ModelConfig())


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def _refusal(argv: list[str]) -> str:
    with pytest.raises(recipe.RecipeError) as refused:
        recipe.parse(argv)
    return str(refused.value)


@pytest.mark.parametrize("name", RECIPE_NUMERIC)
def test_every_numeric_recipe_and_model_field_refuses_nan_inf_and_a_negative_on_the_command_line(
        tiny_config, tmp_path, name):
    """recipe.py's own fields and the adapter's (TRL's ModelConfig) from flags: nan, inf and a negative value are each
    one line naming the field (an int field's nan is argparse's own refusal, naming --field)."""
    base = ["--config", str(tiny_config), "--results_dir", str(tmp_path)]
    cls = RecipeArgs if name in scalar_fields(RecipeArgs) else ModelConfig
    for value in ("nan", "inf", str(negative(name, cls))):
        message = _refusal([*base, f"--{name}", value])
        assert names_the_field(message, name), message


@pytest.mark.parametrize("name, value", [("beta", "nan"), ("epsilon_high", "inf"), ("top_p", "nan"), ("min_p", "2"),
                                         ("repetition_penalty", "0"), ("max_grad_norm", "-1"), ("seed", "-1"),
                                         ("learning_rate", "inf"), ("ets_learning_rate", "nan"),
                                         ("lora_dropout", "1"), ("lora_r", "0")])
def test_flags_and_yaml_reach_the_same_refusals(tiny_config, tmp_path, name, value):
    """The trainer's fields through recipe.py: a flag, and the same value in a config file (YAML's .nan, .inf)."""
    message = _refusal(["--config", str(tiny_config), "--results_dir", str(tmp_path), f"--{name}", value])
    assert message.startswith(f"{name}=") and names_the_field(message, name), message
    config = tmp_path / "degenerate.yaml"
    settings = yaml.safe_load(tiny_config.read_text())
    config.write_text(yaml.safe_dump({**settings, name: int(value) if name in ("lora_r", "seed") else float(value)}))
    from_file = _refusal(["--config", str(config), "--results_dir", str(tmp_path)])
    assert from_file.startswith(f"{name}=") and from_file.split(": ", 1)[1] == message.split(": ", 1)[1], from_file


def test_an_arm_named_twice_is_refused(tiny_config, tmp_path):
    base = ["--config", str(tiny_config), "--results_dir", str(tmp_path)]
    assert _refusal([*base, "--arm", "ets,ets"]) == "--arm names ets twice"
    assert _refusal([*base, "--arm", "gmts,ets,grpo,gmts"]) == "--arm names gmts twice"
    assert recipe.trained_arms("gmts,all") == ["gmts", "grpo", "ets"]  # an order: GMTS first, then the rest of all


def test_a_yaml_key_given_twice_is_refused(tiny_config, tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text(tiny_config.read_text() + "\nbeta: 0.0\nseed: 3\nbeta: 0.1\n")
    message = _refusal(["--config", str(config), "--results_dir", str(tmp_path)])
    assert message.startswith(f"{config}: key 'beta' is given twice (lines ") and "\n" not in message
    assert load_unique_yaml("a: 1\nb: {c: 2, d: 3}\n") == {"a": 1, "b": {"c": 2, "d": 3}}
    with pytest.raises(ValueError, match="key 'c' is given twice"):
        load_unique_yaml("a: 1\nb: {c: 2, c: 3}\n")


def test_a_string_where_a_bool_belongs_is_refused_from_yaml_and_in_a_script(tiny_config, tmp_path):
    config = tmp_path / "string-bool.yaml"
    config.write_text(tiny_config.read_text() + "\neval_fast: maybe\n")
    message = _refusal(["--config", str(config), "--results_dir", str(tmp_path)])
    assert message.startswith("eval_fast: 'maybe' in the config file") and "must be true or false" in message
    with pytest.raises(ValueError, match=r"^bf16='no': must be true or false"):
        _gmts_config(tmp_path, bf16="no")
