"""The sequential extension's new seeds run the recipe of the confirmatory test's seeds 200-299: a cell of
configs/sweeps/confirm-extension.yaml, built as sweep.py runs it (grid -> cell_command -> recipe.parse), has seed
299's committed configuration, config hash, execution options, reward version and counter noise version, the seed
alone apart, and gradient checkpointing (an execution option shown to change no number: results/LOG.md, bench/README.md
"Runs that repeat"; gmts_recipe.sequential.looks.SHOWN_NOT_TO_MOVE, to which check.py holds every committed new cell
too)."""

import json
from pathlib import Path

import pytest

from gmts_recipe import recipe_config
from gmts_recipe.records import config_hash, current_record
from gmts_recipe import rewards
from gmts_recipe.run_setup import config_record
from gmts_recipe.speed_options import recorded_noise_version
from gmts_recipe.sweep.grid import cell_command, load_grid
from gmts_recipe.sequential.looks import SHOWN_NOT_TO_MOVE  # what check.py lets a new seed's arms run otherwise

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = "configs/sweeps/confirm-extension.yaml"
LAST_SEED = ROOT / "results/confirm/coupled-lr0.0001-s299/results.json"


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Parse as the GPU machine does: the config's bf16 and dtype apply, only use_cpu (outside the hash) is set so
    that the config classes build here (tests/test_gpu_configs.py does the same)."""
    monkeypatch.setattr(recipe_config, "_hardware", lambda config, argv, *_: [*argv, "--use_cpu", "true"])
    monkeypatch.chdir(ROOT)


def extension_cell(seed_as: int | None = None):
    """(RecipeArgs, FastGMTSConfig, ModelConfig) of the extension's first cell as sweep.py starts it, with its
    training seed replaced by `seed_as` (the only field the comparison allows to differ)."""
    grid = load_grid(EXTENSION)
    cell, _ = grid.jobs_in_order()[0]
    assert cell.seed >= 300
    argv = cell_command(grid, cell, ("ets", "gmts"), ["--gsm8k_path", "/data/gsm8k"])[2:]  # after python recipe.py
    if seed_as is not None:
        i = argv.index("--seed")
        argv[i + 1] = str(seed_as)
    recipe, train, model, _ = recipe_config.parse(argv)
    return recipe, train, model


def trained_reward(recipe) -> int | str:
    """The reward the cell trains and scores with; a recipe without reward versions as a setting trains with the
    task's newest, so that this test says what differs there rather than failing to import."""
    if hasattr(rewards, "run_reward"):
        return rewards.run_reward(recipe.task, getattr(recipe, "reward_version", None))
    return rewards.task_reward(recipe.task)


def committed() -> dict:
    return current_record(json.loads(LAST_SEED.read_text()))


def test_an_extension_cell_has_seed_299s_configuration_and_hash(as_on_a_gpu):
    recipe, train, model = extension_cell(seed_as=299)
    record = config_record(recipe, train, model)
    last = committed()
    assert record == last["config"]
    assert config_hash(record) == last["config_hash"]
    recipe, train, model = extension_cell()
    other = {k for k in set(record) | set(config_record(recipe, train, model))
             if record.get(k) != config_record(recipe, train, model).get(k)}
    assert other == {"seed"}


def test_an_extension_cell_has_seed_299s_reward_noise_and_execution_options(as_on_a_gpu):
    recipe, train, model = extension_cell()
    options = {k: getattr(recipe if k == "cudnn_attention" else train, k) for k in recipe_config.GENERATION_OPTIONS}
    options["use_cpu"] = False  # the GPU machine's; set here only so that the config classes build on a CPU
    for arm, entry in committed()["arms"].items():
        recorded = entry["generation_options"]
        differ = {k for k in (set(recorded) | set(options)) - {"counter_noise_version"}
                  if recorded.get(k) != options.get(k)}
        assert differ <= SHOWN_NOT_TO_MOVE, (arm, differ)
        assert entry["eval"]["samples"]["reward"] == 1  # scored (and trained) with reward version 1
        assert trained_reward(recipe) == 1
        assert train.counter_noise_version == recorded_noise_version(recorded) == 1
