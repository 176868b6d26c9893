"""A rerun of recipe.py never replaces what a run folder holds without being asked: a finished arm, or an interrupted
arm's checkpoints, is refused in one line before the model loads, unless --resume (keep, continue) or --overwrite
(train again, replace). Each arm's final adapter is kept by default (arm-<arm>/adapter), --keep_adapter false keeps
no weights."""

import types
from pathlib import Path

import pytest

import recipe
from gmts_recipe import run_setup
from gmts_recipe.verify.file import load
from tiny import write_tiny_config


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def stand_in_run(tmp_path: Path, finished=(), resume=False, overwrite=False) -> recipe.Run:
    run = recipe.Run.__new__(recipe.Run)
    run.recipe = types.SimpleNamespace(resume=resume, overwrite=overwrite)
    run.dir, run.path = tmp_path / "quickstart", tmp_path / "quickstart" / "results.json"
    run.results = {"arms": {arm: {} for arm in finished}}
    return run


def test_a_finished_arm_is_kept_or_replaced_only_when_asked(tmp_path):
    run = stand_in_run(tmp_path, finished=("ets",))
    with pytest.raises(recipe.RecipeError, match=r"results.json already holds the finished arm\(s\) ets: --resume "
                                                 r"keeps them .* --overwrite trains them again and replaces them"):
        recipe.check_rerun(run, ["ets", "gmts"])
    recipe.check_rerun(run, ["gmts"])  # a new arm beside the finished one: nothing replaced
    for asked in ({"resume": True}, {"overwrite": True}):
        recipe.check_rerun(stand_in_run(tmp_path, finished=("ets",), **asked), ["ets", "gmts"])
    with pytest.raises(recipe.RecipeError, match="pass one of them"):
        recipe.check_rerun(stand_in_run(tmp_path, resume=True, overwrite=True), ["gmts"])


def test_an_interrupted_arms_checkpoints_are_continued_or_started_over_only_when_asked(tmp_path):
    run = stand_in_run(tmp_path)
    (run.dir / "arm-gmts" / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    with pytest.raises(recipe.RecipeError, match="holds the checkpoints of an interrupted run of gmts: --resume "
                                                 "continues it, --overwrite starts it over"):
        recipe.check_rerun(run, ["ets", "gmts"])
    recipe.check_rerun(run, ["ets"])


def test_a_rerun_is_refused_before_the_model_loads_and_the_adapter_is_kept(tiny_config, tmp_path, capsys,
                                                                          monkeypatch):
    argv = ["--arm", "gmts", "--config", str(tiny_config), "--results_dir", str(tmp_path)]
    assert recipe.main(argv) == 0
    arm = tmp_path / "tiny" / "arm-gmts"
    adapter = arm / "adapter" / "adapter_model.safetensors"
    assert (arm / "adapter" / "adapter_config.json").is_file() and adapter.is_file()
    assert not (arm / "checkpoints").exists()
    first = load(tmp_path / "tiny" / "results.json")["arms"]["gmts"]["eval"]["records"]
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(run_setup, "load_model", lambda *a: pytest.fail("the model loaded"))
        m.setattr(recipe, "load_tasks", lambda *a: pytest.fail("the data loaded"))
        assert recipe.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds the finished arm(s) gmts" in err, err
    assert recipe.main([*argv, "--resume"]) == 0  # kept: nothing trained
    assert "gmts: finished in" in capsys.readouterr().out
    before = adapter.stat().st_mtime_ns
    assert recipe.main([*argv, "--overwrite"]) == 0
    assert "trained again (--overwrite)" in capsys.readouterr().out
    assert adapter.stat().st_mtime_ns != before  # the adapter of the new run replaced the old one
    assert load(tmp_path / "tiny" / "results.json")["arms"]["gmts"]["eval"]["records"] == first  # same seed


def test_keep_adapter_false_keeps_no_weights(tiny_config, tmp_path):
    assert recipe.main(["--arm", "ets", "--config", str(tiny_config), "--results_dir", str(tmp_path),
                        "--keep_adapter", "false"]) == 0
    arm = tmp_path / "tiny" / "arm-ets"
    assert (arm / "train_log.jsonl").is_file() and not (arm / "adapter").exists()
    assert not (arm / "checkpoints").exists()


def test_a_sweeps_cells_keep_no_adapter_and_always_resume():
    from gmts_recipe.recipe_config import parse
    from gmts_recipe.sweep.grid import Grid, cell_command

    grid = Grid.__new__(Grid)
    grid.config, grid.results_dir, grid.name = "configs/qwen.yaml", "results", "demo"
    cell = types.SimpleNamespace(name="paper-lr0.0001-s1", recipe_args=lambda: ["--seed", "1"])
    command = cell_command(grid, cell, ("ets", "gmts"), ["--keep_adapter", "true"])
    assert "--resume" in command and command[command.index("--keep_adapter") + 1] == "false"
    assert command[-2:] == ["--keep_adapter", "true"]  # a user's own flag (sweep.py GRID -- ...) comes last, and wins
    recipe_args = parse(["--config", "configs/smoke.yaml", "--keep_adapter", "false", "--keep_adapter", "true"])[0]
    assert recipe_args.keep_adapter
