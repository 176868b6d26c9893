"""The README's GPU commands run on one 48 GB card: their configs train with gradient checkpointing, which is an
execution option outside the config hash, so turning it on changed no committed result's hash; the offline GPU
config is the confirmatory test's cell, hash for hash."""

import json
import re
from pathlib import Path

import pytest

from gmts_recipe import recipe_config
from gmts_recipe.records import config_hash, current_record
from gmts_recipe.run_setup import config_record

ROOT = Path(__file__).resolve().parent.parent
GPU_CONFIGS = ("configs/paper.yaml", "configs/qwen.yaml", "configs/qwen-coupled.yaml")


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Parse as on a GPU machine: the config's bf16 and dtype apply (recipe_config._hardware leaves them), only
    use_cpu (outside the hash) set so that the config classes build here."""
    monkeypatch.setattr(recipe_config, "_hardware", lambda config, argv, *_: [*argv, "--use_cpu", "true"])
    monkeypatch.chdir(ROOT)


def gpu_hash(argv: list[str]) -> str:
    recipe, train, model, _ = recipe_config.parse(argv)
    return config_hash(config_record(recipe, train, model))


def test_the_offline_gpu_config_is_a_confirmatory_cell(as_on_a_gpu):
    cell = current_record(json.loads((ROOT / "results/confirm/coupled-lr0.0001-s200/results.json").read_text()))
    assert gpu_hash(["--config", "configs/qwen-coupled.yaml", "--seed", "200"]) == cell["config_hash"]


def test_gradient_checkpointing_is_outside_the_hash(as_on_a_gpu):
    assert "gradient_checkpointing" in recipe_config.NOT_HASHED
    for config in GPU_CONFIGS:
        assert gpu_hash(["--config", config]) == gpu_hash(["--config", config, "--gradient_checkpointing", "false"])


@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_every_gpu_config_trains_with_gradient_checkpointing(config):
    from gmts_recipe.records import read_yaml_mapping

    assert read_yaml_mapping(ROOT / config, ValueError, "a mapping")["gradient_checkpointing"] is True


def test_the_readme_gpu_commands_use_those_configs():
    """Every recipe.py line of the README's commands block runs one of GPU_CONFIGS (the default among them) or a
    config of the 135M model."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The recipe: commands and configs", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0] for line in block.splitlines() if line.startswith("python recipe.py")]
    configs = [(re.search(r"--config (\S+)", c) or [None, recipe_config.DEFAULT_CONFIG])[1] for c in commands]
    assert "configs/qwen-coupled.yaml" in configs and recipe_config.DEFAULT_CONFIG in configs
    small_model = {"configs/offline.yaml", "configs/quickstart.yaml", "configs/smoke.yaml"}
    assert set(configs) - small_model <= set(GPU_CONFIGS)
