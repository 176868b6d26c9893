"""deterministic_kernels: parsed like every field, out of the hash like the other rounding-only levers (recorded with
each arm's generation_options instead); on, the trainer's process has PyTorch's deterministic algorithms and cuBLAS's fixed workspace before its
first CUDA work, its training step strict and its generation warn_only; each nondeterministic op named once."""

import json
import os
import warnings
from pathlib import Path

import pytest
import torch

import recipe
from gmts_recipe import determinism
from gmts_recipe.records import current_record
from test_trainer import make_trainer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test starts as a fresh process would (no cuBLAS setting, deterministic algorithms off) and leaves it so."""
    monkeypatch.delenv(determinism.CUBLAS_VARIABLE, raising=False)
    determinism.apply(False)
    determinism._reported.clear()
    yield
    determinism.apply(False)
    torch.use_deterministic_algorithms(False)


def parsed(*extra: str):
    return recipe.parse(["--config", "configs/qwen.yaml", "--use_cpu", "true", *extra])


def test_the_option_parses_from_the_command_line_and_from_yaml(tmp_path):
    assert parsed()[1].deterministic_kernels is False
    assert parsed("--deterministic_kernels", "true")[1].deterministic_kernels is True
    config = tmp_path / "c.yaml"
    config.write_text((ROOT / "configs/qwen.yaml").read_text() + "deterministic_kernels: true\n")
    assert recipe.parse(["--config", str(config), "--use_cpu", "true"])[1].deterministic_kernels is True


@pytest.mark.parametrize("where", ["command line", "config file"])
def test_a_typo_in_the_value_is_one_line(tmp_path, where):
    config = tmp_path / "c.yaml"
    config.write_text((ROOT / "configs/qwen.yaml").read_text()
                      + ("deterministic_kernels: treu\n" if where == "config file" else ""))
    argv = ["--config", str(config)] + (["--deterministic_kernels", "treu"] if where == "command line" else [])
    with pytest.raises(recipe.RecipeError) as err:
        recipe.parse(argv)
    assert "deterministic_kernels" in str(err.value) and "treu" in str(err.value) and "\n" not in str(err.value)


def test_it_stays_out_of_the_hash_like_the_other_rounding_only_levers_and_is_recorded_with_each_arm():
    committed = json.loads((ROOT / "results/quickstart-cpu/results.json").read_text())
    for argv in ([], ["--deterministic_kernels", "true"], ["--deterministic_kernels", "false"]):
        parsed_run = recipe.parse(["--config", "configs/quickstart.yaml", *argv])
        record = recipe.config_record(*parsed_run[:3])
        assert "deterministic_kernels" not in record
        # current_record: the hash as recipe.py writes it today, also for a file from before gradient_checkpointing moved
        assert recipe.config_hash(record) == current_record(committed)["config_hash"]
    assert parsed_run[1].deterministic_kernels is False
    assert recipe.parse(["--config", "configs/quickstart.yaml", "--deterministic_kernels", "true"])[1].deterministic_kernels
    assert "deterministic_kernels" in recipe.GENERATION_OPTIONS  # recorded with each arm


def test_off_changes_nothing_in_the_process():
    recipe.deterministic_kernels(parsed()[1])
    assert not torch.are_deterministic_algorithms_enabled()
    assert determinism.CUBLAS_VARIABLE not in __import__("os").environ


def test_the_trainer_process_is_deterministic_its_step_strict_and_its_generation_warn_only(tmp_path):
    trainer = make_trainer(tmp_path, deterministic_kernels=True)
    import os

    assert os.environ[determinism.CUBLAS_VARIABLE] == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    modes = {"generation": [], "loss": []}
    generate, compute_loss = trainer._generate_single_turn, trainer._compute_loss

    def watched_generate(*args, **kwargs):
        modes["generation"].append(torch.is_deterministic_algorithms_warn_only_enabled())
        return generate(*args, **kwargs)

    def watched_loss(*args, **kwargs):
        modes["loss"].append(torch.is_deterministic_algorithms_warn_only_enabled())
        return compute_loss(*args, **kwargs)

    trainer._generate_single_turn, trainer._compute_loss = watched_generate, watched_loss
    trainer.train()
    assert modes["generation"] and set(modes["generation"]) == {True}
    assert modes["loss"] and set(modes["loss"]) == {False}  # strict: the fused attention backward's deterministic path
    assert torch.is_deterministic_algorithms_warn_only_enabled()  # after the step: warn_only again


def test_an_unset_cublas_setting_after_cuda_work_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(recipe.RecipeError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8 before") as err:
        recipe.deterministic_kernels(parsed("--deterministic_kernels", "true")[1])
    assert "\n" not in str(err.value) and not torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv(determinism.CUBLAS_VARIABLE, ":16:8")  # set by the user beforehand: nothing to refuse
    recipe.deterministic_kernels(parsed("--deterministic_kernels", "true")[1])
    assert torch.are_deterministic_algorithms_enabled()


def test_a_nondeterministic_cublas_setting_is_refused(monkeypatch):
    monkeypatch.setenv(determinism.CUBLAS_VARIABLE, ":0:0")
    with pytest.raises(recipe.RecipeError, match="leaves cuBLAS nondeterministic"):
        recipe.deterministic_kernels(parsed("--deterministic_kernels", "true")[1])


def test_each_nondeterministic_op_is_named_once_on_one_line(capsys):
    determinism.enable()
    for _ in range(3):  # a catch_warnings block resets the registries: the default filter would print it again
        with warnings.catch_warnings():
            torch.zeros(3).put_(torch.tensor([0]), torch.tensor([1.0]))  # put_ has no deterministic implementation
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(determinism.PREFIX)]
    assert lines == ["[deterministic_kernels] nondeterministic: put_ does not have a deterministic implementation"]
    assert "put_ does not have a deterministic implementation" in determinism.reported()
    with pytest.warns(UserWarning, match="an unrelated warning"):  # other warnings go where they went
        warnings.warn("an unrelated warning")


@pytest.mark.parametrize("argv, config_line, expected", [
    (["--deterministic_kernels", "true"], "", True),
    (["--deterministic_kernels=true"], "", True),
    (["--deterministic_kernels"], "", True),
    ([], "deterministic_kernels: true\n", True),
    (["--deterministic_kernels", "false"], "deterministic_kernels: true\n", False),
    ([], "", False),
], ids=["flag value", "flag=value", "bare flag", "config file", "command line wins", "off"])
def test_parse_sets_the_cublas_workspace_before_the_config_classes_touch_cuda(tmp_path, monkeypatch, argv,
                                                                            config_line, expected):
    """On a GPU, building TrainingArguments initialises CUDA (its bf16 check); the variable must be set before that,
    so parse sets it as soon as the option is on, and leaves the environment alone otherwise."""
    monkeypatch.delenv(determinism.CUBLAS_VARIABLE, raising=False)
    config = tmp_path / "c.yaml"
    config.write_text((ROOT / "configs/qwen.yaml").read_text() + config_line)
    seen = {}
    from trl import TrlParser

    real = TrlParser.parse_args_and_config

    def spy(self, *a, **k):  # what the environment holds when the config classes are built
        seen["cublas"] = os.environ.get(determinism.CUBLAS_VARIABLE)
        return real(self, *a, **k)

    monkeypatch.setattr(TrlParser, "parse_args_and_config", spy)
    train = recipe.parse(["--config", str(config), "--use_cpu", "true", *argv])[1]
    assert train.deterministic_kernels is expected
    assert seen["cublas"] == (determinism.CUBLAS_WORKSPACE if expected else None)
