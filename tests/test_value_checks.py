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
from gmts_recipe.records import load_unique_yaml
from gmts_recipe.value_checks import NEGATIVE_MEANS, RANGES, check_values, scalar_fields
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


# ---------------------------------------------------------------- values that passed the checks above and broke a run
def _parsed(argv: list[str], **kwargs):
    return recipe.parse(argv, **kwargs)


def _with(tiny_config, tmp_path, name: str, **settings):
    """A copy of the tiny config with `settings` (YAML as PyYAML writes the Python values)."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(tiny_config.read_text()), **settings}))
    return ["--config", str(config), "--results_dir", str(tmp_path)]


def test_a_one_item_lora_target_list_adapts_that_module(tiny_config, tmp_path):
    """TRL's ModelConfig turns ["q_proj"] into "q_proj", which PEFT reads as a regular expression over whole module
    names: nothing matched, and the run stopped at the first arm after the base evaluations. From YAML and from a flag
    the one-item list is the list it was written as, and the adapter wraps every q_proj."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    from trl import get_peft_config

    from gmts_recipe.recipe_config import module_list

    base = ["--config", str(tiny_config), "--results_dir", str(tmp_path)]
    for argv in (_with(tiny_config, tmp_path, "one-target", lora_target_modules=["q_proj"]),
                 [*base, "--lora_target_modules", "q_proj"]):
        _, _, model_args, _ = _parsed(argv)
        assert model_args.lora_target_modules == ["q_proj"]
        model = AutoModelForCausalLM.from_pretrained(str(tiny_config.parent / "model"))
        adapted = get_peft_model(model, get_peft_config(model_args))
        wrapped = [n for n, m in adapted.named_modules() if hasattr(m, "lora_A") and n.endswith("q_proj")]
        assert len(wrapped) == 2 and not any(n.endswith("v_proj") for n, m in adapted.named_modules()
                                             if hasattr(m, "lora_A"))
    assert module_list("all-linear") == "all-linear" and module_list(r".*\.q_proj") == r".*\.q_proj"
    assert module_list(["q_proj", "v_proj"]) == ["q_proj", "v_proj"] and module_list("self_attn.q_proj") == [
        "self_attn.q_proj"]


def test_one_base_eval_seed_is_refused_where_a_noise_floor_is_measured(tiny_config, tmp_path):
    """One base seed makes the noise floor 0 by construction, as repeated seeds do: refused from a flag and from YAML
    for a run (recipe.py); eval.py, which evaluates one model, takes one seed."""
    message = _refusal(["--config", str(tiny_config), "--results_dir", str(tmp_path), "--base_eval_seeds", "3"])
    assert message.startswith("base_eval_seeds=[3] names one seed: the base evaluations' spread is the noise floor")
    assert _refusal(_with(tiny_config, tmp_path, "one-seed", base_eval_seeds=[0])).startswith(
        "base_eval_seeds=[0] names one seed")
    assert _refusal(_with(tiny_config, tmp_path, "one-seed-twice", base_eval_seeds=[4, 4])).startswith(
        "base_eval_seeds=[4, 4] repeats 4")
    one, _, _, _ = _parsed(["--config", str(tiny_config), "--results_dir", str(tmp_path), "--base_eval_seeds", "0"],
                           noise_floor=False)
    assert one.base_eval_seeds == [0]


@pytest.mark.parametrize("value, message", [
    (1e-30, "eval_temperature=1e-30: must be in [0.05, 5.0] (below 0.05 sampling is greedy decoding in effect"),
    (0.04, "eval_temperature=0.04: must be in [0.05, 5.0] (below 0.05"),
    (1e30, "eval_temperature=1e+30: must be in [0.05, 5.0] (above 5 softmax(logits / T) flattens"),
    (5.5, "eval_temperature=5.5: must be in [0.05, 5.0] (above 5"),
    (0.05, None), (0.7, None), (1.0, None), (5.0, None),
])
def test_eval_temperature_is_refused_where_sampling_is_greedy_or_noise(tiny_config, tmp_path, value, message):
    """Flags and YAML alike: 1e-30 samples the argmax (pass@1 over k samples of one answer), 1e30 uniform noise."""
    flag = ["--config", str(tiny_config), "--results_dir", str(tmp_path), "--eval_temperature", repr(value)]
    from_file = _with(tiny_config, tmp_path, "temperature", eval_temperature=value)
    for argv in (flag, from_file):
        if message is None:
            assert _parsed(argv)[0].eval_temperature == value
        else:
            refused = _refusal(argv)
            assert refused.startswith(message) and "\n" not in refused, refused


@pytest.mark.parametrize("seeds, message", [
    (["0", "1"], 'base_eval_seeds: ["0", "1"] in the config file'),
    ("0", "base_eval_seeds: '0' in the config file"),
    ("0 1", "base_eval_seeds: '0 1' in the config file"),
    (7, "base_eval_seeds: 7 in the config file"),
    ([0, 1.5], "base_eval_seeds: [0, 1.5] in the config file"),
])
def test_seeds_written_as_text_in_yaml_are_refused_in_one_line(tiny_config, tmp_path, seeds, message):
    """PyYAML reads ["0", "1"] as text and argparse never converts a list's items: a TypeError traceback at the
    first comparison of a seed before; now one line naming the field and the file."""
    refused = _refusal(_with(tiny_config, tmp_path, "text-seeds", base_eval_seeds=seeds))
    assert refused.startswith(message) and refused.endswith("must be a list of integers") and "\n" not in refused


def test_lists_of_numbers_are_checked_in_a_users_own_config_classes(tmp_path):
    """RecipeArgs(...) and GMTSConfig(...) built in a script: a list of numbers holding text is one ValueError; so are
    RecipeArgs' evaluation temperature out of its range and a system prompt that reads like a mistyped preset."""
    with pytest.raises(ValueError, match=re.escape("base_eval_seeds=['0', '1']: must be a list of integers ('0' is "
                                                   "text: write it without quotes)")):
        RecipeArgs(base_eval_seeds=["0", "1"])
    with pytest.raises(ValueError, match=r"^base_eval_seeds=5: must be a list of integers$"):
        RecipeArgs(base_eval_seeds=5)
    assert RecipeArgs(base_eval_seeds=[0, 1]).base_eval_seeds == [0, 1]
    with pytest.raises(ValueError, match=re.escape("eval_temperature=1e-30: must be in [0.05, 5.0] (below 0.05")):
        RecipeArgs(eval_temperature=1e-30)
    with pytest.raises(ValueError, match=re.escape("eval_temperature=0: must be > 0")):
        RecipeArgs(eval_temperature=0)
    with pytest.raises(ValueError, match=re.escape("system_prompt='two-examples' is no preset name but reads like "
                                                   "two_examples")):
        RecipeArgs(system_prompt="two-examples")
    assert RecipeArgs(system_prompt="Solve", eval_temperature=0.7).system_prompt == "Solve"
    with pytest.raises(ValueError, match=re.escape("reward_weights=['1.0']: must be a list of numbers")):
        _gmts_config(tmp_path, reward_weights=["1.0"])
    with pytest.raises(ValueError, match=re.escape("reward_weights=[nan]: must be a list of numbers (finite)")):
        _gmts_config(tmp_path, reward_weights=[NAN])
    assert _gmts_config(tmp_path, reward_weights=[1, 0.5]).reward_weights == [1, 0.5]


@pytest.mark.parametrize("text, near", [
    ("step", "steps"), ("Steps", "steps"), ("steps.", "steps"), ("boxd", "boxed"), ("exmaple", "example"),
    ("two-examples", "two_examples"), ("two examples", "two_examples"), ("two_example", "two_examples"),
    ("three_examples", "two_examples"), ("Example:", "example"), ("boxed-answer", "boxed"), ("step-by-step", "steps"),
])
def test_a_system_prompt_that_reads_like_a_mistyped_preset_name_is_refused(tiny_config, tmp_path, text, near):
    """"step" was sent to the model as the whole system message: now one line suggesting the preset, from a flag and
    from YAML."""
    for argv in (["--config", str(tiny_config), "--results_dir", str(tmp_path), "--system_prompt", text],
                 _with(tiny_config, tmp_path, "prompt", system_prompt=text)):
        refused = _refusal(argv)
        assert refused.startswith(f"system_prompt={text!r} is no preset name") and near in refused, refused
        assert "\n" not in refused


@pytest.mark.parametrize("text", ["Solve", "Sample", "Explain", "Show steps", "Answer briefly.", "Be concise.",
                                  "Think step by step.", "two examples, then the answer", "steps", "boxed"])
def test_a_real_prompt_text_or_a_preset_name_is_accepted(tiny_config, tmp_path, text):
    """The rule never refuses a sentence (more than two words), nor a short text unlike every name (the tiny config's
    own "Solve")."""
    recipe_args = _parsed(["--config", str(tiny_config), "--results_dir", str(tmp_path), "--system_prompt", text])[0]
    assert recipe_args.system_prompt == text
