"""Settings that cannot give an honest run are refused before the model loads, in one line: every numeric field of the
recipe's own args and of GMTSConfig's selection fields at 0, negative and its boundary values, the TRL fields the
selection depends on, an unknown model name, a results file cut short; and report_to reaches the trainer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import check
import recipe
from gmts_recipe.models import ModelError, check_model_name, resolve_model
from gmts_trainer import GMTSConfig
from tiny import write_tiny_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


# (field, value, fragment of the one-line refusal, or None where the value is accepted; other settings of the row).
# The tiny config: arithmetic task, num_generations 4, per_device_train_batch_size 8, gradient_accumulation_steps 1.
ROWS = [
    # the recipe's own numeric fields
    ("n_train", 0, "n_train=0: must be a positive count", []),
    ("n_train", -1, "n_train=-1: must be a positive count", []),
    ("n_train", 1, None, []),
    ("n_heldout", -1, "n_heldout=-1: use a positive count", []),
    ("n_heldout", 0, "n_heldout=0: use a positive count", []),  # 0 (the whole split) is for gsm8k only
    ("n_heldout", 1, None, []),
    ("difficulty", -1, "difficulty=-1: must be 0, 1, 2 or 3", []),
    ("difficulty", 4, "difficulty=4: must be 0, 1, 2 or 3", []),
    ("difficulty", 0, None, []),
    ("difficulty", 3, None, []),
    ("task_seed", -1, "task_seed=-1: must be >= 0", []),
    ("task_seed", 0, None, []),
    ("eval_samples", 0, "eval_samples=0: must be a positive count", []),
    ("eval_samples", -2, "eval_samples=-2: must be a positive count", []),
    ("eval_samples", 1, None, []),
    ("eval_max_new_tokens", 0, "eval_max_new_tokens=0: must be a positive count", []),
    ("eval_max_new_tokens", -1, "eval_max_new_tokens=-1: must be a positive count", []),
    ("eval_max_new_tokens", 1, None, []),
    ("eval_temperature", 0, "eval_temperature=0.0: must be > 0", []),
    ("eval_temperature", -0.5, "eval_temperature=-0.5: must be > 0", []),
    ("eval_temperature", 0.01, "eval_temperature=0.01: must be in [0.05, 5.0] (below 0.05 sampling is greedy", []),
    ("eval_temperature", 0.05, None, []),
    ("eval_temperature", 5, None, []),
    ("eval_temperature", 5.01, "eval_temperature=5.01: must be in [0.05, 5.0] (above 5 softmax", []),
    ("eval_batch_size", 0, "eval_batch_size=0: must be a positive count", []),
    ("eval_batch_size", -4, "eval_batch_size=-4: must be a positive count", []),
    ("eval_batch_size", 1, None, []),
    ("base_eval_seeds", [0, 0, 1], "base_eval_seeds=[0, 0, 1] repeats 0", []),
    ("base_eval_seeds", [-1, -1], "repeats -1", []),
    ("base_eval_seeds", [0], "base_eval_seeds=[0] names one seed: the base evaluations' spread is the noise floor", []),
    ("base_eval_seeds", [0, 1], None, []),
    ("base_eval_seeds", [-1, 0, 1], "base_eval_seeds=[-1, 0, 1]: a seed must be >= 0", []),
    ("base_eval_seeds", [3, 0, 1], None, []),
    ("save_minutes", -1, "save_minutes=-1.0: must be >= 0", []),
    ("save_minutes", 0, None, []),
    *[(f"{arm}_learning_rate", value, message, []) for arm in ("grpo", "ets", "gmts", "ets_nz")
      for value, message in ((-1e-4, f"{arm}_learning_rate=-0.0001: must be >= 0"), (0, None), (1e-4, None))],
    # GMTSConfig's selection field
    ("selection_ratio", 0, "selection_ratio=0.0 must be in (0, 1]", []),
    ("selection_ratio", -0.2, "selection_ratio=-0.2 must be in (0, 1]", []),
    ("selection_ratio", 1.01, "selection_ratio=1.01 must be in (0, 1]", []),
    ("selection_ratio", 1, None, []),
    ("selection_ratio", 0.001, None, []),
    # TRL's fields that a run or the selection depends on
    ("max_steps", 0, "max_steps=0: must be a positive count of optimizer steps", []),
    ("max_steps", -2, "max_steps=-2: must be a positive count", []),
    ("max_steps", 1, None, []),
    ("max_steps", -1, None, []),  # num_train_epochs decides (3 by default)
    ("num_train_epochs", 0, "num_train_epochs=0.0 with max_steps=-1: the arm would train no step",
     ["--max_steps", "-1"]),
    ("num_train_epochs", 0, None, []),  # max_steps decides
    ("learning_rate", -1, "learning_rate=-1.0: must be >= 0", []),
    ("learning_rate", 0, None, []),
    ("epsilon", -0.1, "epsilon=-0.1: must be >= 0", []),
    ("epsilon", 0, None, []),
    ("epsilon_high", -0.1, "epsilon_high=-0.1: must be >= 0", []),
    ("epsilon_high", 0, None, []),
    ("delta", 1, "delta=1.0: must be > 1", []),
    ("delta", 0.5, "delta=0.5: must be > 1", []),
    ("delta", -1, "delta=-1.0: must be > 1", []),
    ("delta", 1.01, None, []),
    ("temperature", 0, "temperature=0.0: must be > 0", []),
    ("temperature", -1, "temperature=-1.0: must be > 0", []),
    ("temperature", 0.01, None, []),
    ("num_generations", 0, "num_generations=0: must be a positive count", []),
    ("num_generations", -4, "num_generations=-4: must be a positive count", []),
    ("num_generations", 1, "at least 2 generations", []),
    ("num_generations", 2, None, []),
    ("num_iterations", 0, "num_iterations=0: must be a positive count", []),
    ("num_iterations", 2, None, []),
    ("max_completion_length", 0, "max_completion_length=0: must be a positive count", []),
    ("max_completion_length", 1, None, []),
    ("gradient_accumulation_steps", 0, "gradient_accumulation_steps=0: must be a positive count", []),
    ("gradient_accumulation_steps", 2, None, []),
    ("steps_per_generation", 0, "steps_per_generation=0: must be a positive count", []),
    ("steps_per_generation", 2, "spans several optimizer steps", []),
    ("steps_per_generation", 2, "spans several optimizer steps", ["--selection_scope", "group"]),
    ("steps_per_generation", 2, None, ["--selection_scope", "microbatch"]),
    ("steps_per_generation", 2, None, ["--gradient_accumulation_steps", "2"]),
    ("steps_per_generation", 1, None, []),
    ("generation_batch_size", 16, "spans several optimizer steps", []),
    ("generation_batch_size", 8, None, []),
    # loss_type bnpo: omega lacks each microbatch's own normalizer
    ("loss_type", "bnpo", "loss_type='bnpo' divides each microbatch by its own token count", []),
    ("loss_type", "bnpo", "selection_scope='group' ranks tokens of different microbatches",
     ["--selection_scope", "group"]),
    ("loss_type", "bnpo", None, ["--selection_scope", "microbatch"]),
]


def _argv(value) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@pytest.mark.parametrize("field,value,message,extra", ROWS,
                         ids=[f"{r[0]}={r[1]}{'+' + '_'.join(r[3]) if r[3] else ''}" for r in ROWS])
def test_each_numeric_field_at_its_edges(tiny_config, tmp_path, monkeypatch, field, value, message, extra):
    """Each row through the recipe's own parsing (the config classes included): refused in one RecipeError line with
    its fragment, or accepted."""
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(tiny_config), "--results_dir", str(tmp_path), f"--{field}", *_argv(value), *extra]
    if message is None:
        recipe.parse(argv)
        return
    with pytest.raises(recipe.RecipeError) as refused:
        recipe.parse(argv)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_refusal_is_one_line_before_the_model_loads(tiny_config, tmp_path, monkeypatch, capsys):
    """recipe.main: exit 2, one stderr line, nothing loaded (a model name that exists nowhere would fail to load)."""
    monkeypatch.chdir(ROOT)
    code = recipe.main(["--config", str(tiny_config), "--results_dir", str(tmp_path), "--num_generations", "0",
                        "--model_name_or_path", str(tmp_path / "no-model-here")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "num_generations=0: must be a positive count" in err
    assert not (tmp_path / "tiny").exists()


def _config(tmp_path, **overrides) -> GMTSConfig:
    kw = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
              gradient_accumulation_steps=1, max_completion_length=8, max_steps=1, report_to=[], use_cpu=True)
    return GMTSConfig(**{**kw, **overrides})


@pytest.mark.parametrize("overrides,message", [
    ({"num_generations": 0}, "num_generations=0: must be a positive count"),
    ({"temperature": 0.0}, "temperature=0.0: must be > 0"),
    ({"epsilon": -0.2}, "epsilon=-0.2: must be >= 0"),
    ({"delta": 1.0}, "delta=1.0: must be > 1"),
    ({"loss_type": "bnpo"}, "loss_type='bnpo'"),
    ({"loss_type": "bnpo", "selection_scope": "group", "token_selection": "entropy_nonzero_omega"}, "loss_type='bnpo'"),
    ({"steps_per_generation": 2}, "steps_per_generation=2 > gradient_accumulation_steps=1"),
    ({"steps_per_generation": 4, "gradient_accumulation_steps": 2, "selection_scope": "group",
      "token_selection": "entropy"}, "steps_per_generation=4 > gradient_accumulation_steps=2"),
])
def test_a_trl_user_building_gmtsconfig_gets_the_same_refusals(tmp_path, overrides, message):
    with pytest.raises(ValueError) as refused:
        _config(tmp_path, **overrides)
    assert message in str(refused.value)


@pytest.mark.parametrize("overrides", [
    {"loss_type": "bnpo", "token_selection": "entropy"},  # ETS ranks by entropy alone: no normalizer missing
    {"loss_type": "bnpo", "selection_scope": "microbatch"},  # one microbatch, one normalizer
    {"steps_per_generation": 2, "token_selection": "all"},  # plain GRPO keeps every token
    {"steps_per_generation": 2, "selection_scope": "microbatch"},  # each microbatch keeps its own top share
    {"steps_per_generation": 2, "gradient_accumulation_steps": 2},  # one generation batch per optimizer step
    {"delta": 1.5, "epsilon": 0.0},
])
def test_what_stays_exact_is_accepted(tmp_path, overrides):
    _config(tmp_path, **overrides)


def test_an_unknown_model_name_suggests_the_closest_known_one(tiny_config, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = ["--config", str(tiny_config), "--results_dir", str(tmp_path)]
    with pytest.raises(recipe.RecipeError, match="did you mean smollm2-135m-instruct") as refused:
        recipe.parse([*argv, "--model_name_or_path", "smollm2-135m-instruc"], hub=True)
    assert "config" not in str(refused.value) and "not a model the recipe knows" in str(refused.value)
    with pytest.raises(ModelError, match="did you mean qwen2.5-coder-1.5b-instruct"):
        resolve_model("qwen2.5-coder-1.5b")
    with pytest.raises(ModelError, match="the offline ones are smollm2-135m-instruct, qwen2.5-coder-1.5b-instruct"):
        check_model_name("llama")
    for fine in ("Qwen/Qwen2.5-1.5B-Instruct", "smollm2-135m-instruct", str(tmp_path), "x.gguf"):
        check_model_name(fine)  # a hub id, a known name, a folder, a file (checked when converted)


def test_a_results_file_cut_short_says_where(tmp_path, capsys):
    whole = json.dumps({"config_name": "x", "arms": {"gmts": {"eval": {"pass@1": 0.5}}}}, indent=1)
    cut = tmp_path / "results.json"
    cut.write_text(whole[:-9])
    assert check.main([str(cut)]) == 2
    err = capsys.readouterr().err
    lines = whole[:-9].splitlines()
    assert err.count("\n") == 1 and f"line {len(lines)}, column {len(lines[-1]) + 1}" in err
    assert "cut short" in err
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": 1,\n "b" 2}\n')
    assert check.main([str(broken)]) == 2
    err = capsys.readouterr().err
    assert "line 2, column 6" in err and "cut short" not in err


def test_report_to_tensorboard_writes_each_arms_events_offline(tiny_config, tmp_path):
    """--report_to tensorboard reaches the trainer (it was replaced with [] for every arm): the arm's events, one run
    name per arm, in its folder beside train_log.jsonl (not in checkpoints/, removed once the arm is recorded)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "GMTS_CACHE": str(tmp_path / "cache"),
           "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    env.pop("TENSORBOARD_LOGGING_DIR", None)
    done = subprocess.run([sys.executable, "recipe.py", "--config", str(tiny_config), "--results_dir", str(tmp_path),
                           "--arm", "gmts", "--report_to", "tensorboard"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "tiny" / "arm-gmts" / "tensorboard"
    assert list(folder.glob("events.out.tfevents.*")), sorted(str(p) for p in (tmp_path / "tiny").rglob("*"))
    events = EventAccumulator(str(folder))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]
    assert "selection/kept_fraction" in " ".join(events.Tags()["scalars"])
    args = json.loads(events.Tensors("args/text_summary")[0].tensor_proto.string_val[0])
    assert args["run_name"] == "tiny-gmts" and args["report_to"] == ["tensorboard"]
